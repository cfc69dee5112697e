"""The Python chapter of the book: every ```python block runs, in order, in one
namespace, as a reader would paste them."""

from __future__ import annotations

import os
import re
from pathlib import Path

CHAPTER = Path(__file__).resolve().parents[2] / "book" / "src" / "python.md"


def test_every_example_of_the_python_chapter_runs(qwen, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", CHAPTER.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 6, "the chapter's examples were not found"
    monkeypatch.setenv("BATCHBENCH_EXAMPLE_TOKENIZER", qwen)
    namespace: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{CHAPTER.name} example {i + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "config key 'user_count' must be >= 1, got -1" in out
