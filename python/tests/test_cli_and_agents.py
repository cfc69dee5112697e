"""The console scripts and run_agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import batchbench

SCRIPTS = Path(sys.executable).parent


@pytest.mark.parametrize("program", ["batchbench", "batchbench-agent"])
def test_help_from_the_console_scripts_matches_the_binaries(program, bin_dir):
    script = subprocess.run([str(SCRIPTS / program), "--help"], capture_output=True, text=True)
    native = subprocess.run([str(bin_dir / program), "--help"], capture_output=True, text=True)
    assert script.returncode == native.returncode == 0
    assert script.stdout == native.stdout
    assert "Usage: " + program in script.stdout


def test_bad_flags_exit_2_like_the_binary(bin_dir):
    script = subprocess.run([str(SCRIPTS / "batchbench"), "--users", "0"], capture_output=True, text=True)
    native = subprocess.run([str(bin_dir / "batchbench"), "--users", "0"], capture_output=True, text=True)
    assert script.returncode == native.returncode == 2
    assert script.stderr == native.stderr


def test_a_run_through_the_console_script(qwen, tmp_path):
    out = tmp_path / "summary.json"
    p = subprocess.run(
        [
            str(SCRIPTS / "batchbench"),
            "--host", "sim://",
            "--tokenizer-model", qwen,
            "--users", "2", "--requests-per-user", "2",
            "--input-tokens", "32", "--output-tokens", "4",
            "--summary-json", str(out), "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert "batchbench summary" in p.stdout
    assert json.loads(out.read_text())["summary"]["successful_requests"] == 4


def test_ctrl_c_prints_a_partial_summary_and_exits_130(qwen):
    with batchbench.Simulator(qwen, decode_ms_per_token=20) as slow:
        p = subprocess.Popen(
            [
                str(SCRIPTS / "batchbench"),
                "--host", slow.url,
                "--tokenizer-model", qwen,
                "--users", "2", "--requests-per-user", "100",
                "--input-tokens", "16", "--output-tokens", "50", "-q",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # A harness that starts the suite in the background leaves SIGINT ignored,
            # and a child inherits that: give it the default, as a terminal would.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        # Interrupt once the run is under way: its handler is registered before
        # the first request reaches the server.
        deadline = time.monotonic() + 60
        while slow.stats()["requests"] < 1:
            assert time.monotonic() < deadline, "no request reached the simulator in a minute"
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=30)
    assert p.returncode == 130, stderr
    assert "interrupted" in stderr
    assert "batchbench summary" in stdout
    assert "Traceback" not in stderr


def test_python_dash_m_runs_the_cli():
    p = subprocess.run([sys.executable, "-m", "batchbench", "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("batchbench ")


def test_run_agent_with_keyword_options(sim, target):
    result = batchbench.run_agent(
        **target,
        agents=2,
        tool_invocations=3,
        input_tokens=64,
        output_tokens=8,
        environment_tokens=16,
        tool_call_latency_ms=0,
        seed=4,
    )
    assert result["exit_code"] == 0
    assert result["summary"]["successful_requests"] == 6 == sim.stats()["requests"]
    records = result["records"]
    assert len(records) == 6
    # Later turns resend the conversation: the simulator's cache reports it.
    later = [r for r in records if r["request_index"] > 0]
    assert all(r["server_cached_tokens"] > 0 for r in later)
    assert result["run"]["config"]["agents"] == 2


def test_run_agent_replays_a_manifest_from_a_dict(sim, qwen):
    manifest = Path(__file__).resolve().parents[2] / "examples" / "trajectory-replay" / "plans-v2.jsonl"
    result = batchbench.run_agent(
        {"host": sim.url, "tokenizer_model": qwen, "agent_plans_jsonl": manifest, "time_scale": 50}
    )
    assert result["exit_code"] == 0
    assert result["summary"]["failed_requests"] == 0
    assert len(result["records"]) == result["summary"]["total_requests"] == sim.stats()["requests"]
    assert len(result["run"]["workload"]["manifest_sha256"]) == 64


def test_run_agent_rejects_unknown_and_mistyped_options(qwen):
    with pytest.raises(ValueError, match="unknown batchbench-agent option 'agentz'"):
        batchbench.run_agent(agentz=2)
    with pytest.raises(ValueError, match="'ignore_eos' is a switch"):
        batchbench.run_agent(ignore_eos="yes")
    with pytest.raises(batchbench.ConfigurationError, match="exit code 2"):
        batchbench.run_agent(host="sim://", tokenizer_model=qwen, agents=0)


def test_plugins_lists_the_builtins():
    names = {(p["kind"], p["name"]) for p in batchbench.plugins()}
    assert ("workload", "request_bodies") in names
    assert ("reporter", "requests_jsonl") in names


def test_python_dash_m_export_plans_re_exports_a_rows_file(tmp_path):
    # Two requests of one session, as `--dump-rows-jsonl` writes them.
    def row(ts, corr, chain, roles, tokens):
        return {
            "ts": ts, "instance_id": "aaaaaaaa-0000-4000-8000-000000000001", "correlation_id": corr,
            "principal_id": "11111111-1111-4111-8111-111111111111", "model": "m",
            "chain": chain, "block_roles": roles, "block_tokens": tokens,
            "prompt_tokens": sum(tokens) + 9, "completion_tokens": 12, "stream": True,
            "max_tokens": 64, "finish_reason": "stop", "served_by": "b", "request_origin": "api",
            "user_id": "u", "api_key_id": "k", "duration_ms": 1000, "duration_to_first_byte_ms": 100,
        }

    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps(row("2026-09-01T09:00:00.000Z", 1, ["aa", "bb"], ["system", "user"], [50, 10])) + "\n"
        + json.dumps(row("2026-09-01 09:00:30.000", 2, ["aa", "bb", "cc", "dd"],
                         ["system", "user", "assistant", "tool"], [50, 10, 12, 20])) + "\n"
    )
    out = tmp_path / "plans.jsonl"
    p = subprocess.run(
        [sys.executable, "-m", "batchbench.export_plans", "--start", "2026-09-01T09:00:00Z",
         "--end", "2026-09-01T10:00:00Z", "--rows-jsonl", str(rows), "--output", str(out)],
        capture_output=True, text=True,
    )
    assert p.returncode == 0, p.stderr
    assert "trajectories: 1" in p.stderr
    plan = json.loads(out.read_text())
    assert plan["trajectory_id"] == "bb-0"
    assert plan["requests"][1]["blocks"][2]["live"] is True
    assert plan["requests"][0]["delay_after_ms"] == 29_000
    # Bad flags: exit 2, like the command line.
    p = subprocess.run([sys.executable, "-m", "batchbench.export_plans", "--start", "x"],
                       capture_output=True, text=True)
    assert p.returncode == 2


def test_run_agent_takes_a_session_rate(sim, target):
    result = batchbench.run_agent(
        **target,
        agents=4,
        tool_invocations=2,
        input_tokens=32,
        output_tokens=4,
        session_rate=20,
        arrival="constant",
    )
    assert result["exit_code"] == 0
    load = result["summary"]["load"]
    assert load["release"] == "sessions" and load["arrivals"] == 4
    assert sim.stats()["requests"] == 8
    assert all("intended_ms" in r for r in result["records"])
