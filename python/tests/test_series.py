"""sweep() and capacity(): series of runs over one load dimension."""

from __future__ import annotations

import json
import math

import pytest

import batchbench

# One worker, batches of at most 4 in steps of 10 ms + 1 ms per sequence: with
# 8-token replies a full batch finishes 4 requests every 8 x 14 ms, about 36/s.
SIM = "sim://?max-running=4&step-base-ms=10&step-ms-per-seq=1"


def run_options(qwen):
    return {
        "host": SIM,
        "tokenizer_model": qwen,
        "input_tokens": 16,
        "output_tokens": 8,
        "stream": True,
        "seed": 3,
    }


def test_a_sweep_over_users_returns_a_point_per_value(qwen, tmp_path):
    points = batchbench.sweep(
        "users", [1, 2], output_dir=tmp_path / "sw", requests_per_user=3, slo="ttft<=1s", **run_options(qwen)
    )
    assert [p["value"] for p in points] == [1, 2]
    for p in points:
        assert p["requests"] == 3 * int(p["value"])
        assert p["passed"] is True
        assert p["goodput"]["mean"] == pytest.approx(p["requests_per_second"]["mean"])
        summary = json.loads((tmp_path / "sw" / p["runs"][0] / "summary.json").read_text())
        assert summary["summary"]["successful_requests"] == p["requests"]
    index = json.loads((tmp_path / "sw" / "index.json").read_text())
    assert index["kind"] == "sweep" and index["dimension"] == "users"


# Steps of 4 ms + 0.4 ms per sequence, 8 in a batch: with 8-token replies,
# 139 requests/s, so that points of hundreds of requests take seconds.
FAST_SIM = "sim://?max-running=8&step-base-ms=4&step-ms-per-seq=0.4"


def ttft_bound(qwen, out) -> str:
    """The TTFT p99 bound of a capacity search on FAST_SIM: 40 ms (ten of its
    steps), or twice the p99 an unloaded run (20 requests/s) measures now plus
    10 ms, where this machine, busy with other work, adds delay of its own at
    every load. The knee of a batching server is sharp under constant arrivals,
    so any bound above the unloaded TTFT finds the same capacity."""
    unloaded = batchbench.sweep(
        "request-rate",
        [20],
        output_dir=out,
        duration_secs=3,
        arrival="constant",
        slo="ttft_p99<=1s",
        **{**run_options(qwen), "host": FAST_SIM},
    )[0]
    p99 = unloaded["ttft_p99_ms"]["mean"]
    return f"ttft_p99<={max(40, math.ceil(2 * p99 + 10))}ms"


def test_capacity_marks_the_highest_load_that_met_the_slo(qwen, tmp_path):
    slo = ttft_bound(qwen, tmp_path / "unloaded")

    def search():
        return batchbench.capacity(
            "request-rate",
            [slo],
            start=64,
            tolerance=0.25,
            duration_secs=2,
            min_requests=400,
            point_max_secs=20,
            arrival="constant",
            **{**run_options(qwen), "host": FAST_SIM},
        )

    points = search()
    found = [p for p in points if p["capacity"]]
    # A stall of this shared machine during a point (its TTFTs far under the
    # bound) can leave the point's time batches too unlike each other for any
    # interval of the p99 within its 20 s: the search then says, honestly,
    # that the point stayed undecided, and its capacity is a lower load. Seen
    # about once in 13 runs of the whole suite; such a search is run again.
    if any(p.get("undecided") for p in points) and not (
        found and 100 < found[0]["value"] < 160
    ):
        points = search()
        found = [p for p in points if p["capacity"]]
    assert len(found) == 1 and found[0]["passed"] is True
    assert found[0]["capacity_verdict"] == "found"
    value = found[0]["value"]
    seen = [(p["value"], p["passed"], p.get("undecided")) for p in points]
    if value <= 100:
        # Twice: the loads between it and the knee stayed undecided (never
        # said to miss), as the search must say of points it cannot tell.
        assert all(p.get("undecided") for p in points if value < p["value"] < 160), seen
    assert value < 160, seen
    assert any(p["passed"] is False and p["value"] > found[0]["value"] for p in points)
    # Every point ran its minimum; one near the knee may stay undecided within
    # its time budget, and then counts as not met.
    assert all(p["requests"] >= 400 for p in points)
    assert all(p["passed"] is False for p in points if p.get("undecided"))


def test_points_too_short_for_their_p99_are_undecided_never_met(qwen):
    points = batchbench.capacity(
        "request-rate",
        ["ttft_p99<=100ms"],
        start=16,
        duration_secs=1.5,
        arrival="constant",
        **run_options(qwen),
    )
    assert [(p["value"], p["passed"], p["undecided"]) for p in points] == [(16, False, True)]
    assert not any(p["capacity"] for p in points)


def test_bad_series_options_are_configuration_errors(qwen):
    with pytest.raises(batchbench.ConfigurationError, match="unknown batchbench sweep option 'speed'"):
        batchbench.sweep("users", [1, 2], speed=3, **run_options(qwen))
    with pytest.raises(batchbench.ConfigurationError, match="exit code 2"):
        batchbench.sweep("colour", [1, 2], **run_options(qwen))
    with pytest.raises(batchbench.ConfigurationError, match="command must be one of"):
        batchbench.capacity("users", "e2e<=1s", command="wrk", **run_options(qwen))
    with pytest.raises(batchbench.ConfigurationError, match="values must be"):
        batchbench.sweep("users", 3, **run_options(qwen))
    points = batchbench.sweep("users", range(1, 3), requests_per_user=1, no_early_stop=True, **run_options(qwen))
    assert [p["value"] for p in points] == [1, 2]


def test_run_benchmark_takes_an_slo(sim):
    report = batchbench.run_benchmark(
        {
            "endpoint": sim.endpoint,
            "user_count": 2,
            "mode": batchbench.finite_mode(2),
            "request_body": batchbench.request_entry({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
            "slo": "e2e<=10s,e2e_p99<=10s",
        }
    )
    slo = report["slo"]
    assert slo["passed"] is True
    assert [b["bound"] for b in slo["bounds"]] == ["e2e<=10000ms", "e2e_p99<=10000ms"]
    assert slo["good_requests"] == 4
    with pytest.raises(batchbench.ConfigurationError, match="holds no bound"):
        batchbench.run_benchmark(
            {
                "endpoint": sim.endpoint,
                "user_count": 1,
                "mode": batchbench.finite_mode(1),
                "request_body": batchbench.request_entry({"messages": [{"role": "user", "content": "hi"}]}),
                "slo": " , ",
            }
        )
