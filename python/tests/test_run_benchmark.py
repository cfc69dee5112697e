"""run_benchmark against the built-in simulator."""

from __future__ import annotations

import _thread
import json
import signal
import threading
import time

import pytest

import batchbench

REPORT_KEYS = {
    "total_requests",
    "successful_requests",
    "failed_requests",
    "total_prompt_tokens",
    "total_completion_tokens",
    "total_duration_seconds",
    "requests_per_second",
    "prompt_tokens_per_second",
    "completion_tokens_per_second",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "failures",
    "records",
    "interrupted",
}


def body(text: str = "ping", max_tokens: int = 8) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}


def test_report_keys_and_counts_match_the_simulator(sim):
    entries = [batchbench.request_entry(body(f"q{i}"), line_idx=i) for i in range(6)]
    report = batchbench.run_benchmark(
        {
            "endpoint": sim.endpoint,
            "user_count": 3,
            "mode": batchbench.finite_mode(requests_per_user=2),
            "requests": entries,
            "seed": 1,
        }
    )
    assert REPORT_KEYS <= set(report)
    assert report["total_requests"] == 6 == sim.stats()["requests"]
    assert report["successful_requests"] == 6 and report["failed_requests"] == 0
    assert report["failures"] == []
    assert report["latency_p99_ms"] > 0 and report["requests_per_second"] > 0
    assert report["total_prompt_tokens"] == sum(r["prompt_tokens"] for r in sim.requests())
    # Request m of user n uses entry m * user_count + n.
    records = sorted(report["records"], key=lambda r: (r["agent_id"], r["request_index"]))
    assert len(records) == 6
    assert [(r["agent_id"], r["request_index"]) for r in records] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)
    ]
    # The body's max_tokens stands: the simulator answered at most 8 tokens.
    assert all(0 < r["completion_tokens"] <= 8 for r in records)


def test_headers_and_output_lognorm_reach_the_server(sim):
    report = batchbench.run_benchmark(
        {
            "endpoint": sim.endpoint,
            "user_count": 2,
            "mode": batchbench.finite_mode(3),
            "request_body": batchbench.request_entry(body()),
            "headers": {"X-SMG-Routing-Key": "team-a"},
            "output_lognorm": {"median": 20, "sigma": 0.4, "max": 40},
            "seed": 9,
        }
    )
    assert report["successful_requests"] == 6
    log = sim.requests()
    assert {e["routing_key"] for e in log} == {"team-a"}
    # min == max tokens sampled per request: the simulator answers exactly that.
    lengths = [e["completion_tokens"] for e in log]
    assert all(1 <= n <= 40 for n in lengths) and len(set(lengths)) > 1


def test_retries_and_retry_delay_are_used(qwen):
    with batchbench.Simulator(qwen, fault_rate=1.0, fault_status=503) as s:
        t = time.monotonic()
        report = batchbench.run_benchmark(
            {
                "endpoint": s.endpoint,
                "user_count": 1,
                "mode": batchbench.finite_mode(1),
                "request_body": batchbench.request_entry(body()),
                "max_retries": 3,
                "retry_delay_ms": 100,
            }
        )
        elapsed = time.monotonic() - t
        assert s.stats()["requests"] == 4  # the first attempt and three retries
    assert report["failed_requests"] == 1
    assert report["retries"] == 3
    assert report["failures_by_kind"] == {"http_503": 1}
    assert report["failures"][0]["kind"] == "http_503"
    # Exponential backoff from 100 ms: at least 100 + 200 + 400 ms of waiting.
    assert elapsed >= 0.7


def test_long_running_mode_runs_for_the_duration_recycling_requests(sim):
    report = batchbench.run_benchmark(
        {
            "endpoint": sim.endpoint,
            "user_count": 2,
            "mode": batchbench.long_running_mode(duration_secs=1.0),
            "request_body": batchbench.request_entry(body()),
        }
    )
    assert report["total_duration_seconds"] >= 1.0
    assert report["total_requests"] > 2 * 5  # recycled, many times over
    assert report["total_requests"] == sim.stats()["requests"]
    assert report["run"]["mode"] == "long_running"


def test_target_ci_stops_the_run_once_its_figure_is_sure(qwen):
    # A queueing simulator at half its capacity: the median e2e settles fast;
    # the long-running mode's duration is the cap.
    with batchbench.Simulator(qwen, max_running=8, step_base_ms=4, step_ms_per_seq=0.4) as s:
        t = time.monotonic()
        report = batchbench.run_benchmark(
            {
                "endpoint": s.endpoint,
                "user_count": 4,
                "mode": batchbench.long_running_mode(duration_secs=40),
                "request_body": batchbench.request_entry(body(max_tokens=10)),
                "load": {"rate": 55, "arrival": "constant", "target_ci": 3},
                "slo": "e2e_p50<=1s",
            }
        )
    c = report["load"]["convergence"]
    assert c["converged"] is True, c
    assert c["secs"] < 40 and time.monotonic() - t < 40
    assert [f["name"] for f in c["figures"]] == ["e2e_p50"]
    assert c["figures"][0]["half_width_pct"] <= 3


def test_warmup_auto_finds_the_steady_window_and_marks_the_records(qwen):
    # Poisson arrivals at half a batching simulator's capacity: whatever the
    # search finds, the records due before its cut, and only those, are warmup.
    with batchbench.Simulator(qwen, max_running=8, step_base_ms=4, step_ms_per_seq=0.4) as s:
        report = batchbench.run_benchmark(
            {
                "endpoint": s.endpoint,
                "user_count": 4,
                "mode": batchbench.long_running_mode(duration_secs=4),
                "request_body": batchbench.request_entry(body(max_tokens=10)),
                "load": {"rate": 50, "arrival": "poisson", "warmup": "auto"},
            }
        )
    steady = report["load"]["steady"]
    assert steady["to_secs"] > 3, steady
    assert [x["name"] for x in steady["series"]][:1] == ["e2e latency"], steady
    cut_ms = steady["from_secs"] * 1000
    warmup = [r for r in report["records"] if r["warmup"]]
    assert all(r["intended_ms"] < cut_ms for r in warmup)
    assert all(r["intended_ms"] >= cut_ms for r in report["records"] if not r["warmup"])
    assert steady["cut_requests"] == len(warmup) == report["load"]["warmup_requests"]
    with pytest.raises(ValueError, match="leave out load.warmup_requests"):
        batchbench.run_benchmark(
            {
                "endpoint": "http://127.0.0.1:9/v1/chat/completions",
                "user_count": 1,
                "mode": batchbench.long_running_mode(duration_secs=4),
                "request_body": batchbench.request_entry(body(max_tokens=10)),
                "load": {"rate": 5, "warmup": "auto", "warmup_secs": 1},
            }
        )


@pytest.fixture
def sigint_handled():
    """Python's own SIGINT handler for the test. ``interrupt_main`` does nothing
    while SIGINT is ignored, as it is when a harness starts the suite in the
    background."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_keyboard_interrupt_cancels_and_returns_the_partial_report(qwen, sigint_handled):
    with batchbench.Simulator(qwen, decode_ms_per_token=20) as s:
        timer = threading.Timer(0.8, _thread.interrupt_main)
        timer.start()
        t = time.monotonic()
        report = batchbench.run_benchmark(
            {
                "endpoint": s.endpoint,
                "user_count": 2,
                "mode": batchbench.long_running_mode(duration_secs=60),
                "request_body": batchbench.request_entry(body(max_tokens=50)),
            }
        )
        timer.join()
    assert time.monotonic() - t < 10
    assert report["interrupted"] is True
    assert report["total_requests"] >= 1


def test_two_runs_in_one_process_share_nothing(sim):
    def run(users: int, n: int) -> dict:
        return batchbench.run_benchmark(
            {
                "endpoint": sim.endpoint,
                "user_count": users,
                "mode": batchbench.finite_mode(n),
                "request_body": batchbench.request_entry(body()),
            }
        )

    a, b = run(2, 2), run(1, 3)
    assert (a["total_requests"], b["total_requests"]) == (4, 3)
    assert {r["agent_id"] for r in b["records"]} == {0}
    assert a["run"]["user_count"] == 2 and b["run"]["user_count"] == 1


def test_unreachable_endpoint_is_counted_as_connect_failures():
    report = batchbench.run_benchmark(
        {
            "endpoint": "http://127.0.0.1:9/v1/chat/completions",
            "user_count": 1,
            "mode": batchbench.finite_mode(2),
            "request_body": batchbench.request_entry(body()),
            "max_retries": 0,
            "request_timeout_secs": 2,
        }
    )
    assert report["failed_requests"] == 2
    assert report["failures_by_kind"] == {"connect": 2}


@pytest.mark.parametrize(
    "config, words",
    [
        ({"bogus": 1}, ["unknown config key 'bogus'"]),
        ({"user_count": -1}, ["'user_count'", ">= 1", "-1"]),
        ({"mode": None}, ["'mode' is required"]),
        ({"user_count": "4"}, ["'user_count'", "int", "str"]),
        ({"user_count": True}, ["'user_count'", "int", "bool"]),
        ({"mode": {"kind": "forever"}}, ["'mode'", "finite_mode"]),
        ({"request_timeout_secs": 0}, ["'request_timeout_secs'", "positive"]),
        ({"headers": {"X": 1}}, ["'headers'", "str"]),
        ({"requests": [{"nope": 1}]}, ["'requests'[0]", "request_entry"]),
        ({"output_lognorm": {"median": 5}}, ["'sigma' is required"]),
        # The CLI's simulator URL is not a server's: Python starts its own.
        ({"endpoint": "sim://"}, ["'endpoint'", "batchbench.Simulator", ".endpoint"]),
        ({"endpoint": ["sim://?replicas=2"]}, ["'endpoint'[0]", "batchbench.Simulator"]),
        ({"endpoint": ""}, ["'endpoint'", "full URL", "http://"]),
        ({"endpoint": "localhost:8000/v1"}, ["'endpoint'", "full URL"]),
        # A knob chat completions cannot carry, and a choice that does not exist.
        ({"reasoning": {"budget_tokens": 2048}}, ["target.reasoning.budget_tokens", "--thinking-budget"]),
        ({"reasoning": {"history": "sometimes"}}, ["'reasoning'", "sometimes"]),
    ],
)
def test_bad_configs_raise_value_errors_naming_the_key(config, words):
    base = {
        "endpoint": "http://127.0.0.1:9/v1/chat/completions",
        "user_count": 1,
        "mode": batchbench.finite_mode(1),
        "request_body": batchbench.request_entry(body()),
        "dry_run": True,
    }
    base.update(config)
    base = {k: v for k, v in base.items() if v is not None}
    with pytest.raises(ValueError) as e:
        batchbench.run_benchmark(base)
    assert isinstance(e.value, batchbench.ConfigurationError)
    assert isinstance(e.value, batchbench.BatchbenchError)
    for w in words:
        assert w in str(e.value)


def test_mode_helpers_validate():
    with pytest.raises(ValueError, match="requests_per_user"):
        batchbench.finite_mode(0)
    with pytest.raises(ValueError, match="duration_secs"):
        batchbench.long_running_mode(-1)
    with pytest.raises(ValueError, match="messages"):
        batchbench.request_entry({"model": "m"})


def test_a_missing_tokenizer_is_a_tokenizer_error(tmp_path):
    with pytest.raises(batchbench.TokenizerError, match="cannot load tokenizer"):
        batchbench.generate_requests(
            {"count": 1, "target_tokens": 8, "tokenizer_model": str(tmp_path / "missing.json")}
        )


def test_a_dry_run_of_long_running_mode_plans_one_cycle_at_once():
    t = time.monotonic()
    report = batchbench.run_benchmark(
        {
            "endpoint": "http://127.0.0.1:9/v1/chat/completions",
            "user_count": 2,
            "mode": batchbench.long_running_mode(duration_secs=3600),
            "requests": [batchbench.request_entry(body(f"q{i}")) for i in range(5)],
            "dry_run": True,
        }
    )
    assert time.monotonic() - t < 5
    # ceil(5 entries / 2 users) = 3 requests per user: every entry appears.
    plan = report["run"]["plan"]
    assert len(plan) == 6
    assert {p["body"]["messages"][0]["content"] for p in plan} == {f"q{i}" for i in range(5)}


def test_a_load_table_releases_requests_at_a_rate_with_the_same_bodies(sim):
    entries = [batchbench.request_entry(body(f"q{i}"), line_idx=i) for i in range(6)]
    config = {
        "endpoint": sim.endpoint,
        "user_count": 3,
        "mode": batchbench.finite_mode(requests_per_user=2),
        "requests": entries,
        "seed": 3,
    }
    closed = batchbench.run_benchmark(config)
    assert closed["load"] is None
    report = batchbench.run_benchmark(
        {**config, "load": {"rate": 50, "arrival": "constant", "max_concurrency": 2, "warmup_requests": 1}}
    )
    load = report["load"]
    assert load["arrivals"] == 6 and load["release"] == "requests"
    assert load["warmup_requests"] == 1
    assert report["total_requests"] == 5, "the warmup request is left out"
    assert load["latency_from_intended"]["count"] == 5
    assert load["queue_wait"] is not None
    assert sim.stats()["requests"] == 12
    # Each record says when it was due and when it went out.
    rec = report["records"]
    assert len(rec) == 6 and sum(r["warmup"] for r in rec) == 1
    assert all(r["sent_ms"] >= r["intended_ms"] >= 0 for r in rec)
    # The same entries went to the same users and positions.
    key = lambda r: (r["agent_id"], r["request_index"], r["prompt_tokens"])
    assert sorted(map(key, rec)) == sorted(map(key, closed["records"]))


@pytest.mark.parametrize(
    "load, words",
    [
        ({"rate": 0}, ["load.rate", "positive"]),
        ({"rate": 5, "burstiness": 2}, ["load.burstiness", "gamma"]),
        ({"rate": 5, "arrival": "weibull"}, ["weibull"]),
        ({"rte": 5}, ["rte"]),
        ({"duration_secs": 5}, ["long_running_mode"]),
    ],
)
def test_a_bad_load_table_is_a_configuration_error_naming_the_field(sim, load, words):
    with pytest.raises(batchbench.ConfigurationError) as e:
        batchbench.run_benchmark(
            {
                "endpoint": sim.endpoint,
                "user_count": 1,
                "mode": batchbench.finite_mode(1),
                "request_body": batchbench.request_entry(body()),
                "load": load,
            }
        )
    for w in words:
        assert w in str(e.value)
    assert sim.stats()["requests"] == 0


def test_a_list_of_endpoints_is_a_fleet_routed_by_the_named_policy(sim, qwen):
    entries = [batchbench.request_entry(body(f"q{i}"), line_idx=i) for i in range(8)]
    with batchbench.Simulator(qwen, record_requests=True) as other:
        report = batchbench.run_benchmark(
            {
                "endpoint": [sim.endpoint, other.endpoint],
                "routing": "least_outstanding",
                "user_count": 4,
                "mode": batchbench.finite_mode(requests_per_user=3),
                "requests": entries,
                "seed": 2,
            }
        )
        assert report["routing"] == "least_outstanding"
        per = report["endpoints"]
        assert [e["url"] for e in per] == [sim.endpoint, other.endpoint]
        assert [e["requests"] for e in per] == [sim.stats()["requests"], other.stats()["requests"]]
        assert sum(e["requests"] for e in per) == report["total_requests"] == 12
        assert {r["endpoint"] for r in report["records"]} <= {0, 1}
    with pytest.raises(batchbench.ConfigurationError, match="same path"):
        batchbench.run_benchmark(
            {
                "endpoint": [sim.endpoint, sim.url + "/v1/completions"],
                "user_count": 1,
                "mode": batchbench.finite_mode(requests_per_user=1),
                "requests": entries,
            }
        )


def test_reasoning_knobs_reach_a_simulator_that_thinks(qwen):
    """``reasoning`` takes the keys of a run spec's ``[target.reasoning]``:
    effort low halves the simulator's reasoning, thinking off ends it."""
    with batchbench.Simulator(qwen, reasoning_tokens=64) as s:
        for knobs, reasoning in [({}, 64), ({"effort": "low"}, 32), ({"off": True}, 0)]:
            report = batchbench.run_benchmark(
                {
                    "endpoint": s.endpoint,
                    "user_count": 2,
                    "mode": batchbench.finite_mode(2),
                    "request_body": batchbench.request_entry(body(max_tokens=96)),
                    "reasoning": knobs,
                    "seed": 3,
                }
            )
            assert report["successful_requests"] == 4, knobs
            assert [r.get("reasoning_tokens") or 0 for r in report["records"]] == [reasoning] * 4, knobs


def test_structured_outputs_are_validated_against_their_schema(qwen, tmp_path):
    """``response_format`` takes the keys of a run spec's
    ``[target.response_format]``: every answer is validated, and the report's
    ``structured`` says how many were valid and why the rest were not."""
    schema = tmp_path / "pet.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"kind": {"enum": ["cat", "dog"]}, "name": {"type": "string", "maxLength": 12}},
                "required": ["kind", "name"],
            }
        )
    )
    with batchbench.Simulator(qwen, invalid_json_rate=0.5) as s:
        report = batchbench.run_benchmark(
            {
                "endpoint": s.endpoint,
                "user_count": 2,
                "mode": batchbench.finite_mode(requests_per_user=20),
                # Bodies of their own: the simulator breaks an answer by its
                # request's body, as a server decodes one prompt alike.
                "requests": [batchbench.request_entry(body(f"q{i}", max_tokens=96), line_idx=i) for i in range(40)],
                "response_format": {"type": "json_schema", "schemas": [schema]},
                "seed": 3,
            }
        )
    st = report["structured"]
    assert st["format"] == "json_schema" and st["schemas"] == ["pet"]
    assert st["checked"] == 40 and 0 < st["valid"] < 40, st
    assert st["invalid"] == {"not_json": 40 - st["valid"]}, st


def test_a_model_mix_sends_each_model_its_share(qwen):
    """``model_mix`` takes the keys of a run spec's ``[target.mix]``: each
    body's ``model`` is the model picked (in turn here), the report's
    ``models`` adds up to the run, and the simulator loads the adapters."""
    mix = {
        "models": [{"name": "base", "weight": 1}, {"name": "sql", "base": "base", "weight": 1}],
        "selection": "round_robin",
    }
    with batchbench.Simulator(qwen, lora_adapters=["sql"], record_requests=True) as s:
        report = batchbench.run_benchmark(
            {
                "endpoint": s.endpoint,
                "user_count": 1,
                "mode": batchbench.finite_mode(requests_per_user=20),
                "requests": [batchbench.request_entry(body(f"q{i}"), line_idx=i) for i in range(20)],
                "model_mix": mix,
                "seed": 3,
            }
        )
        sent = [r.get("model") for r in s.requests()]
    models = {m["model"]: m["requests"] for m in report["models"]}
    assert models == {"base": 10, "sql": 10}, report["models"]
    assert sorted(r["model"] for r in report["records"]) == ["base"] * 10 + ["sql"] * 10
    assert sorted(sent) == ["base"] * 10 + ["sql"] * 10
    with pytest.raises(batchbench.ConfigurationError, match="selection 'sticky' is not one of"):
        batchbench.run_benchmark(
            {
                "endpoint": "http://localhost:1",
                "user_count": 1,
                "mode": batchbench.finite_mode(requests_per_user=1),
                "requests": [batchbench.request_entry(body())],
                "model_mix": {**mix, "selection": "sticky"},
            }
        )
