"""Shared fixtures: real tokenizer files (fetched by examples/fetch-tokenizers.sh)
and the built-in simulator."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import batchbench


def _tokenizer_dir() -> Path:
    if os.environ.get("BATCHBENCH_TOKENIZERS"):
        return Path(os.environ["BATCHBENCH_TOKENIZERS"])
    cache = os.environ.get("BATCHBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "batchbench"
    )
    return Path(cache) / "tokenizers"


@pytest.fixture(scope="session")
def qwen() -> str:
    path = _tokenizer_dir() / "qwen" / "tokenizer.json"
    assert path.is_file(), f"{path} is missing: run examples/fetch-tokenizers.sh first"
    return str(path)


@pytest.fixture()
def sim(qwen: str):
    with batchbench.Simulator(qwen, record_requests=True) as s:
        yield s


@pytest.fixture()
def target(sim, qwen: str) -> dict:
    """The options every run against the simulator starts with: its URL and
    the tokenizer it counts with."""
    return {"host": sim.url, "tokenizer_model": qwen}


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    d = os.environ.get("BATCHBENCH_BIN_DIR")
    assert d, "BATCHBENCH_BIN_DIR must name the directory of the cargo-built binaries (.ci/run sets it)"
    return Path(d)
