"""``python -m batchbench.export_plans``: the same as ``batchbench export-plans``.

Turns a window of ClickHouse prompt-chain records (``CLICKHOUSE_URL``) into a
version-2 replay manifest, or re-exports offline with ``--rows-jsonl``. The exporter
is part of the Rust core: the ``export`` extra needs nothing more.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from ._cli import _run


def main(args: Optional[List[str]] = None) -> None:
    """Runs the exporter with ``args`` (default: the command line)."""
    sys.exit(_run("batchbench", ["export-plans", *(sys.argv[1:] if args is None else args)]))


if __name__ == "__main__":
    main()
