"""analyze(): a workload described without sending anything, and the shared
prefix-cache estimate of a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import batchbench

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _manifest(tmp_path: Path) -> Path:
    """Four sessions of one request, all opening with the same 64-token system
    block, then a 32-token user block of their own."""
    lines = []
    for s in range(4):
        blocks = [
            {"seed": "system-shared", "tokens": 64, "role": "system"},
            {"seed": f"u{s}", "tokens": 32, "role": "user"},
        ]
        lines.append(
            json.dumps(
                {
                    "schema_version": 2,
                    "trajectory_id": f"s{s}",
                    "requests": [{"prompt_tokens": 96, "output_tokens": 4, "overhead_tokens": 0, "blocks": blocks}],
                }
            )
        )
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_analyze_returns_the_sharing_a_manifest_has_by_construction(tmp_path):
    a = batchbench.analyze(_manifest(tmp_path), cache_tokens=[64, "1M"], ranks=2)
    assert a["requests"] == 4 and a["sessions"] == 4
    # Sessions 1-3 each find the four shared blocks of 16 tokens.
    assert a["global"]["cached_tokens"] == 3 * 64
    assert a["global"]["prompt_tokens"] == 4 * 96
    ideal, small, large = a["caches"]
    assert ideal["capacity_tokens"] is None and small["capacity_tokens"] == 64
    # Two ranks with affinity: sessions 2 and 3 find what 0 and 1 stored.
    assert ideal["total"]["cached_tokens"] == 2 * 64
    assert [r["cached_tokens"] for r in ideal["ranks"]] == [64, 64]
    # Four blocks of room: a session's own two blocks push two shared ones out.
    assert small["total"]["cached_tokens"] < ideal["total"]["cached_tokens"]
    assert large["total"]["cached_tokens"] == ideal["total"]["cached_tokens"]
    assert a["sharing"]["longest_shared_prefixes"][0] == {
        "tokens": 64,
        "sessions": 4,
        "first_session": 0,
        "first_trajectory_id": "s0",
    }


def test_analyze_reads_the_synthetic_workload_and_the_example_manifests():
    a = batchbench.analyze(command="batchbench", users=3, requests_per_user=2, input_tokens=40)
    assert a["requests"] == 6 and a["sessions"] == 3
    a = batchbench.analyze(EXAMPLES / "trajectory-replay" / "plans-v2.jsonl")
    assert a["global"]["cached_tokens"] > 0


def test_bad_input_raises_a_configuration_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema_version": 2, "trajectory_id": "x", "requests": [{"prompt_tokens": "many"}]}\n')
    with pytest.raises(batchbench.ConfigurationError):
        batchbench.analyze(bad)
    with pytest.raises(batchbench.ConfigurationError):
        batchbench.analyze(_manifest(tmp_path), routing="sideways")
    with pytest.raises(batchbench.ConfigurationError):
        batchbench.analyze(_manifest(tmp_path), json="out.json")


def test_a_run_reports_the_shared_estimate_beside_the_per_trajectory_one(qwen, tmp_path):
    r = batchbench.run_agent(host="sim://", tokenizer_model=qwen, agent_plans_jsonl=str(_manifest(tmp_path)))
    s = r["summary"]
    assert s["global_estimated_cached_input_tokens"] == 3 * 64
    assert s["estimated_cached_input_tokens"] == 0
    assert sum(rec["global_estimated_cached_tokens"] for rec in r["records"]) == 3 * 64
