"""load_results() and report(): results directories read back, and their HTML report."""

from __future__ import annotations

import json

import pytest

import batchbench


def test_a_run_directory_loads_as_records_that_match_its_summary(qwen, tmp_path):
    out = tmp_path / "run"
    r = batchbench.run_agent(
        host="sim://?decode-ms-per-token=1",
        tokenizer_model=qwen,
        agents=3,
        tool_invocations=2,
        input_tokens=32,
        environment_tokens=8,
        output_tokens=4,
        stream=True,
        output_dir=out,
    )
    assert r["exit_code"] == 0
    res = batchbench.load_results(out)
    assert res["kind"] == "run" and res["format_version"] == 1
    assert res["summary"] == r["summary"]
    assert len(res["requests"]) == res["summary"]["total_requests"] == 6
    assert len(res["trajectories"]) == 3
    buckets = res["histograms"]["families"]["latency"]
    assert sum(c for _, c in buckets) == res["summary"]["successful_requests"]
    ts = res["timeseries"]
    columns = {k: v for k, v in ts.items() if isinstance(v, list)}
    assert len({len(v) for v in columns.values()}) == 1
    assert sum(ts["send_rate"]) * ts["interval_secs"] == pytest.approx(6)


def test_a_sweep_loads_with_its_runs_and_reports(qwen, tmp_path):
    batchbench.sweep(
        "users",
        [1, 2],
        output_dir=tmp_path / "sw",
        host="sim://",
        tokenizer_model=qwen,
        requests_per_user=2,
        input_tokens=16,
        output_tokens=4,
        stream=True,
    )
    res = batchbench.load_results(tmp_path / "sw")
    assert res["kind"] == "sweep"
    assert sorted(res["runs"]) == ["run-000", "run-001"]
    assert [len(r["requests"]) for r in res["runs"].values()] == [2, 4]
    path = batchbench.report([tmp_path / "sw"], tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert path == str(tmp_path / "r.html")
    assert 'id="series-throughput"' in html and 'id="cdf-latency"' in html


def test_bad_directories_are_configuration_errors_naming_the_file(tmp_path):
    with pytest.raises(batchbench.ConfigurationError, match="no such directory"):
        batchbench.load_results(tmp_path / "missing")
    d = tmp_path / "half"
    d.mkdir()
    (d / "requests.jsonl").write_text("{}\n")
    with pytest.raises(batchbench.ConfigurationError, match="incomplete results"):
        batchbench.load_results(d)
    (d / "run.json").write_text(json.dumps({"format": "batchbench-results", "version": 9}))
    with pytest.raises(batchbench.ConfigurationError, match="run.json: format version 9"):
        batchbench.report(d, tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()
