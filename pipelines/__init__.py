"""The Dagster code location of gpu-finops and its `finops` command line."""

from pipelines.memory import use_lean_allocators

# Before Arrow allocates anything (pipelines/memory.py).
use_lean_allocators()
