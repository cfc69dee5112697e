"""merge(): the shards of one run (shard="I/N") joined into the one run's
results, and the shards' bodies are the unsharded run's."""

from __future__ import annotations

import pytest

import batchbench


# Nine agents of two requests each.
AGENTS = dict(agents=9, tool_invocations=2, input_tokens=48, environment_tokens=16, output_tokens=4, seed=11)


def _shards(qwen, tmp_path, sim=None, n=3):
    dirs = []
    for i in range(n):
        d = tmp_path / f"shard-{i}"
        host = sim.url if sim else "sim://"
        batchbench.run_agent(host=host, tokenizer_model=qwen, shard=f"{i}/{n}", output_dir=str(d), **AGENTS)
        dirs.append(d)
    return dirs


def test_three_shards_send_the_unsharded_bodies_and_merge_into_its_counts(qwen, tmp_path):
    with batchbench.Simulator(qwen, record_requests=True) as whole:
        one = batchbench.run_agent(host=whole.url, tokenizer_model=qwen, **AGENTS)
        want = sorted(r["body_sha256"] for r in whole.requests())
    with batchbench.Simulator(qwen, record_requests=True) as sim:
        dirs = _shards(qwen, tmp_path, sim)
        got = sorted(r["body_sha256"] for r in sim.requests())
    assert got == want and len(got) == 18
    m = batchbench.merge(dirs, tmp_path / "merged", command="batchbench-agent", results_csv=tmp_path / "m.csv")
    assert m["summary"]["total_requests"] == one["summary"]["total_requests"] == 18
    assert m["summary"]["total_prompt_tokens"] == one["summary"]["total_prompt_tokens"]
    assert [s["index"] for s in m["run"]["merged_shards"]] == [0, 1, 2]
    assert (tmp_path / "m.csv").read_text().count("\n") == 2
    loaded = batchbench.load_results(m["path"])
    assert len(loaded["requests"]) == 18


def test_a_missing_shard_raises_a_configuration_error(qwen, tmp_path):
    dirs = _shards(qwen, tmp_path)
    with pytest.raises(batchbench.ConfigurationError):
        batchbench.merge(dirs[:2], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
    with pytest.raises(batchbench.ConfigurationError):
        batchbench.merge(str(dirs[0]), tmp_path / "merged")
