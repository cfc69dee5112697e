"""``python -m batchbench``: the ``batchbench`` command line."""

from ._cli import batchbench

batchbench()
