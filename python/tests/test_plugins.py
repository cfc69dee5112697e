"""External plugins from Python: load_plugin registers a WebAssembly component or a
native library for the process; run_agent selects them by name. The plugins are
built by examples/plugins/build.sh (.ci/run does it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import batchbench


def _native(bin_dir: Path, crate: str) -> Path:
    prefix, suffix = ("", ".dll") if sys.platform == "win32" else (
        "lib", ".dylib" if sys.platform == "darwin" else ".so")
    path = bin_dir / f"{prefix}{crate}{suffix}"
    assert path.is_file(), f"{path} is missing: run examples/plugins/build.sh first"
    return path


def _component(bin_dir: Path, name: str) -> Path:
    path = bin_dir.parent / "wasm32-wasip2" / "release" / f"{name}.wasm"
    assert path.is_file(), f"{path} is missing: run examples/plugins/build.sh first"
    return path


def test_loaded_plugins_are_listed_and_selected_by_name(sim, bin_dir, tmp_path, target):
    wasm = _component(bin_dir, "header_router")
    lib = _native(bin_dir, "jsonl_reporter")
    loaded = batchbench.load_plugin(wasm)
    assert loaded == [{"kind": "router", "name": "header_router"}]
    assert batchbench.load_plugin(str(wasm)) == loaded  # loading again is a no-op
    assert {p["name"] for p in batchbench.load_plugin(lib)} == {"jsonl_requests", "static_header"}
    origins = {(p["kind"], p["name"]): p["origin"] for p in batchbench.plugins()}
    assert origins[("router", "header_router")] == str(wasm)
    assert origins[("reporter", "jsonl_requests")] == str(lib)
    assert origins[("router", "user_tag")] == "built-in"

    records = tmp_path / "requests.jsonl"
    result = batchbench.run_agent(
        **target,
        agents=2,
        tool_invocations=1,
        input_tokens=32,
        output_tokens=4,
        disable_user_tagging=True,
        router=["header_router"],
        router_config=[json.dumps({"header": "X-SMG-Routing-Key", "value": "py-{agent_id}"})],
        reporter=["jsonl_requests"],
        reporter_config=[json.dumps({"path": str(records)})],
    )
    assert result["exit_code"] == 0
    log = sim.requests()
    assert {e["routing_key"] for e in log} == {"py-0", "py-1"}
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(lines) == len(log) == result["summary"]["total_requests"]
    assert result["run"]["config"]["plugins"]["routers"][0]["name"] == "header_router"


def test_missing_and_foreign_plugins_raise(bin_dir):
    with pytest.raises(batchbench.ConfigurationError, match="no such file"):
        batchbench.load_plugin("/nonexistent/plugin.wasm")
    with pytest.raises(batchbench.PluginError, match="ABI version 999"):
        batchbench.load_plugin(_native(bin_dir, "other_abi"))


def test_a_native_codec_is_selected_by_name_in_both_apis(sim, bin_dir, target):
    lib = _native(bin_dir, "native_codec")
    assert batchbench.load_plugin(lib) == [{"kind": "codec", "name": "openai_chat_native"}]
    body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}
    report = batchbench.run_benchmark({
        "endpoint": sim.url + "/v1/chat/completions",
        "user_count": 2,
        "mode": batchbench.finite_mode(2),
        "request_body": batchbench.request_entry(body),
        "codec": "openai_chat_native",
        "seed": 3,
    })
    assert report["successful_requests"] == 4
    assert report["run"]["spec"]["codec"]["name"] == "openai_chat_native"
    result = batchbench.run_agent(
        **target,
        agents=2,
        tool_invocations=2,
        input_tokens=24,
        output_tokens=4,
        codec="openai_chat_native",
        codec_config=json.dumps({"sglang": True}),
    )
    assert result["exit_code"] == 0
    assert result["run"]["spec"]["codec"] == {"name": "openai_chat_native", "config": {"sglang": True}}
    # `sglang` sets the codec's own option of that name, which this codec has...
    report = batchbench.run_benchmark({
        "endpoint": sim.url + "/v1/chat/completions",
        "user_count": 1,
        "mode": batchbench.finite_mode(1),
        "request_body": batchbench.request_entry(body),
        "codec": "openai_chat_native",
        "sglang": True,
    })
    assert report["run"]["spec"]["codec"]["config"] == {"sglang": True}
    # ... and a codec without it refuses, naming the field.
    with pytest.raises((batchbench.ConfigurationError, batchbench.BatchbenchError), match="sglang"):
        batchbench.run_benchmark({
            "endpoint": sim.url + "/v1/messages",
            "user_count": 1,
            "mode": batchbench.finite_mode(1),
            "request_body": batchbench.request_entry(body),
            "codec": "anthropic_messages",
            "sglang": True,
        })
