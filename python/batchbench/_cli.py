"""The ``batchbench`` and ``batchbench-agent`` console scripts: the Rust command
lines, run in process with the same flags, output and exit codes.

Ctrl+C cancels in-flight requests and prints the partial summary (exit code 130);
a second Ctrl+C quits at once, as with the native binaries.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from . import _core

_INTERRUPTED = "\ninterrupted: cancelling in-flight requests (Ctrl+C again to quit now)"


def _run(program: str, args: Optional[List[str]] = None) -> int:
    argv = [program] + (sys.argv[1:] if args is None else list(args))
    sys.stdout.flush()
    sys.stderr.flush()
    run = _core.start_cli(program, argv)
    interrupted = False
    while True:
        try:
            code = run.wait(0.1)
        except KeyboardInterrupt:
            if interrupted:
                os._exit(130)
            interrupted = True
            if argv[1:2] != ["export-plans"]:  # the exporter reports for itself
                print(_INTERRUPTED, file=sys.stderr, flush=True)
            run.cancel()
            continue
        if code is not None:
            return int(code)


def batchbench() -> None:
    """Entry point of the ``batchbench`` console script."""
    sys.exit(_run("batchbench"))


def batchbench_agent() -> None:
    """Entry point of the ``batchbench-agent`` console script."""
    sys.exit(_run("batchbench-agent"))
