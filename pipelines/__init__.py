"""The Dagster code location of gpu-finops and its `finops` command line."""

from pipelines.memory import choose_arrow_allocator

# Before Arrow allocates anything (pipelines/memory.py).
choose_arrow_allocator()
