"""`finops new-connector` writes a package that works as written: installed (offline, into a throwaway
target folder, never into the project's environment), its entry point is found, its own tests (the
connector contract) pass, and `finops run` loads its fixture and reconciles it to the cent."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli.main import app
from pipelines.cli.connector_template import FIXTURE_ROWS, FIXTURE_TOTAL

ROOT = Path(__file__).resolve().parent.parent


def install(package: Path, target: Path) -> None:
    """pip install --target, offline, no dependencies (gpu-finops is already there). Where the
    environment has no `wheel` (a bare venv's setuptools 65 cannot build one), setuptools writes the
    package's metadata into the target and the source folder goes on the path: what `pip install -e`
    amounts to."""
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(target), str(package)], capture_output=True, text=True)
    if pip.returncode == 0:
        return
    assert "bdist_wheel" in pip.stdout + pip.stderr, pip.stdout + pip.stderr
    target.mkdir(parents=True, exist_ok=True)
    # The package's own setuptools metadata, entry points included, written by the build backend's
    # egg_info step (importlib.metadata reads an .egg-info on the path as it reads a .dist-info).
    subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "egg_info", "--egg-base", str(target)],
                   cwd=package, check=True, capture_output=True)
    (target / ".source").write_text(str(package))


def env_with(target: Path) -> dict[str, str]:
    extra = [str(target)] + ([(target / ".source").read_text()] if (target / ".source").exists() else [])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(extra + [str(ROOT)]), "FINOPS_FUZZ_PROFILE": "ci"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("connector-template")
    package = base / "finops-connector-acme-gpu"
    result = CliRunner().invoke(app, ["new-connector", "acme_gpu", "--kind", "billing", "--out", str(package)])
    assert result.exit_code == 0, result.output
    target = base / "site"
    install(package, target)
    return package, target


def test_new_connector_refuses_in_one_line(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("")
    for args in (["new-connector", "Bad-Name"], ["new-connector", "ok_name", "--kind", "telemetry"],
                 ["new-connector", "focus"], ["new-connector", "ok_name", "--out", str(tmp_path / "x")]):
        result = subprocess.run([sys.executable, "-m", "pipelines.cli.main", *args], capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)


def test_installed_package_registers_passes_its_tests_and_loads_its_fixture(installed, tmp_path):
    package, target = installed
    env = env_with(target)
    listed = subprocess.run([sys.executable, "-c", "from connectors.registry import all_connectors; "
                             "print([c.name for c in all_connectors()])"], env=env, capture_output=True, text=True)
    assert "'acme_gpu'" in listed.stdout, listed.stderr

    tests = subprocess.run([sys.executable, "-m", "pytest", str(package), "-q", "-p", "no:cacheprovider"],
                           env=env, capture_output=True, text=True, cwd=package)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert "11 passed" in tests.stdout, tests.stdout[-500:]

    warehouse = tmp_path / "wh.duckdb"
    run = subprocess.run([sys.executable, "-m", "pipelines.cli.main", "run", "--landing", str(package / "fixtures"),
                          "--warehouse", str(warehouse)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        rows, loaded, stated, quarantined = conn.execute(
            "SELECT count(*), sum(x_SourceCost) FROM raw.cost_lines WHERE x_Connector = 'acme_gpu'").fetchone() + \
            conn.execute("SELECT sum(source_total), sum(quarantined_total) FROM raw.files").fetchone()
    finally:
        conn.close()
    assert rows == FIXTURE_ROWS
    assert loaded == stated == Decimal(FIXTURE_TOTAL) and quarantined == 0


def test_the_template_takes_the_billing_month_in_the_providers_zone_when_told(tmp_path):
    """An invoice starting at midnight in Tokyo is October's there and September's in UTC: the
    template's BILLING_TIMEZONE says which zone closes the provider's months."""
    import importlib.util

    import pyarrow as pa

    from pipelines.cli.connector_template import write_package
    from tests.conftest import read_context

    write_package("tokyo_gpu", "billing", tmp_path / "pkg")
    source = tmp_path / "pkg" / "finops_tokyo_gpu" / "connector.py"
    invoice = tmp_path / "invoice.csv"
    invoice.write_text("instance_id,gpu_model,gpu_count,hours,amount_usd,start,end\n"
                       "i-1,H100,8,1,10.00,2026-10-01T00:00:00+09:00,2026-10-01T01:00:00+09:00\n")

    def billing_period(zone: str | None):
        text = source.read_text().replace("BILLING_TIMEZONE: str | None = None", f"BILLING_TIMEZONE: str | None = {zone!r}")
        module_file = tmp_path / f"connector_{abs(hash(zone))}.py"
        module_file.write_text(text)
        spec = importlib.util.spec_from_file_location(module_file.stem, module_file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        connector = next(v for v in vars(module).values() if isinstance(v, type) and getattr(v, "name", None) == "tokyo_gpu")()
        rows = pa.Table.from_batches(list(connector.read(invoice, read_context("invoice.csv")))).to_pylist()
        return str(rows[0]["BillingPeriodStart"])

    assert billing_period(None) == "2026-09-01 00:00:00+00:00"
    assert billing_period("Asia/Tokyo") == "2026-09-30 15:00:00+00:00"


def test_a_mappings_name_is_refused_as_the_mappings_not_a_built_ins():
    result = subprocess.run([sys.executable, "-m", "pipelines.cli.main", "new-connector", "gpu_rental_generic"],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2
    assert "'gpu_rental_generic' is the mapping connectors/mappings/gpu_rental_generic.yaml's name" in result.stderr
