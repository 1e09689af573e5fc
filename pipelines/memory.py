"""Which allocator Arrow's C++ library takes, chosen before anything allocates.

pyarrow's wheels default to mimalloc, which kept what a telemetry ingest had freed (reading two
files at once, Arrow's CSV blocks and Parquet writer buffers) until the process ended; the run's
peak came when DuckDB's rollup took its own share on top. Measured on the 2-core development
machine, 2M nvidia-smi samples, `finops run`, peak RSS: mimalloc 1,213-1,238 MiB (five runs),
jemalloc 1,025-1,045 MiB (six runs; the RSS after the ingest falls to ~340 MiB before the models),
the C heap (`system`) 1,017-1,079 MiB but 1.95-2.14 GiB on a 1M-row CUR, where jemalloc and
mimalloc both peak at 1.36-1.37 GiB. Capping glibc's arenas or jemalloc's decay changed nothing
measurable, so neither is set.

Arrow reads ARROW_DEFAULT_MEMORY_POOL once, when pyarrow is imported (set afterwards, it was
ignored; `pyarrow.set_memory_pool` changes only what Python calls use), so `pipelines` sets it
when it is first imported, before anything imports pyarrow. A value already in the environment wins. Linux only: the macOS wheels have no
jemalloc, and an unknown backend makes Arrow print a warning.
"""

from __future__ import annotations

import os
import sys


def choose_arrow_allocator() -> None:
    if sys.platform.startswith("linux"):
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
