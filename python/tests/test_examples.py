"""The two Python examples of the specification, as written (apart from the
tokenizer, which is a local file here: no model hub is reachable in the tests)."""

from __future__ import annotations

import batchbench


def test_the_dry_run_example_runs_as_written():
    config = {
        "endpoint": "https://example.com/v1/chat/completions",
        "user_count": 1,
        "mode": batchbench.finite_mode(requests_per_user=1),
        "request_body": batchbench.request_entry(
            {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "ping"}],
            },
            line_idx=0,
            input_tokens=1,
        ),
        "requests": [
            batchbench.request_entry(
                {
                    "model": "gpt-4o-mini",
                    "messages": [{"role": "user", "content": "ping"}],
                    "max_tokens": 4,
                },
                line_idx=0,
                input_tokens=1,
            )
        ],
        "dry_run": True,
    }
    report = batchbench.run_benchmark(config)
    print(report)
    assert report["dry_run"] is True
    assert report["total_requests"] == 0  # nothing was sent
    plan = report["run"]["plan"]
    assert len(plan) == 1
    # `requests` wins over `request_body`: the plan carries its max_tokens.
    assert plan[0]["body"]["max_tokens"] == 4
    assert plan[0]["prompt_tokens"] == 1


def test_generate_requests_gives_exact_lengths_and_a_shared_prefix(qwen):
    requests = batchbench.generate_requests(
        {
            "count": 16,
            "prefix_overlap": 0.2,
            "target_tokens": 128,
            "tokenizer_model": qwen,
            "dist_mode": "fixed",
        },
        model="Qwen/Qwen3-VL-235B-A22B-Instruct-FP8",
    )
    assert len(requests) == 16
    for i, r in enumerate(requests):
        assert r["line_idx"] == i
        assert r["input_tokens"] == 128
        assert r["body"]["model"] == "Qwen/Qwen3-VL-235B-A22B-Instruct-FP8"
    ids = batchbench.count_tokens(qwen, [r["body"]["messages"][0]["content"] for r in requests])
    shared = round(0.2 * 128)
    for t in ids:
        assert len(t) == 128
        assert t[:shared] == ids[0][:shared]
    # After the shared prefix the prompts differ.
    assert len({tuple(t[shared:]) for t in ids}) == 16


def test_generate_requests_log_normal_lengths_are_exact(qwen):
    requests = batchbench.generate_requests(
        {
            "count": 8,
            "target_tokens": 64,
            "tokenizer_model": qwen,
            "dist_mode": "lognormal",
            "dist_median": 64,
            "dist_sigma": 0.5,
            "dist_max": 200,
            "seed": 3,
        }
    )
    lengths = [r["input_tokens"] for r in requests]
    assert len(set(lengths)) > 1 and max(lengths) <= 200
    ids = batchbench.count_tokens(qwen, [r["body"]["messages"][0]["content"] for r in requests])
    assert [len(t) for t in ids] == lengths
    # Same seed, same requests.
    again = batchbench.generate_requests(
        {
            "count": 8,
            "target_tokens": 64,
            "tokenizer_model": qwen,
            "dist_mode": "log_normal",
            "dist_median": 64,
            "dist_sigma": 0.5,
            "dist_max": 200,
            "seed": 3,
        }
    )
    assert [r["body"] for r in again] == [r["body"] for r in requests]
