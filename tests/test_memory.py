"""Arrow takes jemalloc in every process that imports `pipelines` (pipelines/memory.py), unless the
environment names another pool."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

PROBE = "import pipelines, pyarrow as pa; print(pa.default_memory_pool().backend_name)"


def backend(**env) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO, env={**clean, **env},
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="jemalloc is chosen on Linux only")
def test_arrow_allocates_with_jemalloc_unless_told_otherwise():
    assert backend() == "jemalloc"
    assert backend(ARROW_DEFAULT_MEMORY_POOL="system") == "system"
