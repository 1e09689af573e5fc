"""Packaging guards that a run cannot show by itself.

With pyspark installed but not its Connect dependencies, `import great_expectations` imports
pyspark.testing, which calls sys.exit(0) ("Skipping doctests: No module named 'google.rpc'"):
the process ends with status 0 in the middle of the checks, and the run looks finished. The spark
extra therefore asks for pyspark[connect], and constraints.txt pins what that brings.
"""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONNECT_DEPENDENCIES = ("googleapis-common-protos", "grpcio", "grpcio-status", "zstandard", "pandas", "pyarrow", "numpy")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_great_expectations_imports_without_exiting():
    # sys.exit(0) leaves status 0: only the line printed after the import tells it apart.
    done = subprocess.run([sys.executable, "-c", "import great_expectations; print('imported')"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "imported" in done.stdout, done.stdout + done.stderr


def test_spark_extra_brings_connect_dependencies_pinned():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("spark", "dev"):
        assert any(re.match(r"pyspark\[connect\]", r) for r in extras[extra]), extra
    pins = {_norm(line.split("==")[0]) for line in (ROOT / "constraints.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    missing = [name for name in ("pyspark", "py4j", *CONNECT_DEPENDENCIES) if _norm(name) not in pins]
    assert not missing, f"constraints.txt lacks pins for {missing}"
