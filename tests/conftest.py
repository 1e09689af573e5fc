import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dagster import DagsterInstance

from connectors.base import ReadContext
from pipelines.orchestration.runner import run_graph
from pipelines.settings import FinopsSettings
from pipelines.warehouse.connection import connect

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The public samples the tests read travel with the repository (tests/fixtures/samples, see its
# SOURCES.md files); FINOPS_SAMPLES points the suite at another copy of the same layout.
SAMPLES = Path(os.environ.get("FINOPS_SAMPLES", FIXTURES / "samples"))


def sample(relative: str) -> Path:
    path = SAMPLES / relative
    if not path.exists():
        pytest.fail(f"sample {path} is missing: tests read tests/fixtures/samples (or $FINOPS_SAMPLES)")
    return path


def read_context(source_file: str = "test.csv", timezone: str = "UTC") -> ReadContext:
    return ReadContext(source_file=source_file, ingested_at=datetime(2026, 11, 29, tzinfo=UTC), timezone=timezone,
                       source_sha256="0" * 64)


SMI_HEADER = "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"


def smi_minutes(start: datetime, minutes: int, gpus: int, util, uuid_prefix: str,
                model: str = "NVIDIA H100 80GB HBM3", power: str = "300.00 W") -> str:
    """nvidia-smi `--query-gpu` CSV text: a sample per GPU per minute from `start`, at
    `util(minute, gpu)` percent; GPU g's uuid is `uuid_prefix` followed by g."""
    lines = [SMI_HEADER]
    for minute in range(minutes):
        stamp = (start + timedelta(minutes=minute)).strftime("%Y/%m/%d %H:%M:%S.000")
        lines += [f"{stamp}, {g}, {uuid_prefix}{g}, {model}, {util(minute, g)} %, 1000 MiB, {power}" for g in range(gpus)]
    return "\n".join(lines) + "\n"


def run_pipeline(landing: Path, warehouse: Path, as_of=None, **settings):
    """Materialize the whole asset graph on an ephemeral Dagster instance (`as_of`: the run's date)."""
    with DagsterInstance.ephemeral() as instance:
        return run_graph(FinopsSettings(landing_dir=str(landing), **settings), warehouse, instance=instance, as_of=as_of)


def warehouse_from_files(root: Path, files: dict[str, str], **settings) -> Path:
    """`root/wh.duckdb`, built by one whole-graph run over `root/landing` holding `files` (name → text)."""
    landing = root / "landing"
    landing.mkdir()
    for name, text in files.items():
        (landing / name).write_text(text)
    assert run_pipeline(landing, root / "wh.duckdb", **settings).success
    return root / "wh.duckdb"


@dataclass
class DemoRun:
    out: Path
    truths: dict
    returncode: int
    output: str


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> DemoRun:
    """`finops demo --out DIR`, run once for the whole session as a user would run it."""
    out = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path_factory.mktemp("dagster_home"))}
    finops = Path(sys.executable).parent / "finops"
    done = subprocess.run([str(finops), "demo", "--out", str(out)], capture_output=True, text=True, env=env, timeout=900)
    truths = json.loads((out / "truths.json").read_text())
    return DemoRun(out, truths, done.returncode, done.stdout + done.stderr)


@pytest.fixture
def demo_db(demo_run):
    conn = connect(demo_run.out / "warehouse.duckdb", read_only=True)
    yield conn
    conn.close()


def unbalanced_days(conn) -> list[tuple]:
    """Days and currencies whose phase amounts in marts.daily_cost differ from their cost lines."""
    return conn.execute("""
        SELECT d.day, d.billing_currency, sum(d.cost_billing) AS phases,
               (SELECT sum(EffectiveCost) FROM core.cost_lines c
                WHERE utc_day(c.ChargePeriodStart) = d.day AND c.BillingCurrency = d.billing_currency) AS lines
        FROM marts.daily_cost d GROUP BY ALL HAVING phases <> lines""").fetchall()


# The longest test files, started first: `make test` hands whole files to its worker processes in
# the order they were collected (pytest-xdist --dist loadfile --no-loadscope-reorder), so the Spark
# engine's (6 of 24 minutes on 2 cores) must not be the last one a worker picks up.
SLOWEST_FIRST = ("test_spark_engine.py",)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.path.name not in SLOWEST_FIRST)


@pytest.fixture(scope="session", autouse=True)
def reference_cache_of_this_session(tmp_path_factory):
    """The suite's new warehouses copy core.fx_rates from one folder shared by this session's
    processes (pipelines/warehouse/reference_cache.py), not the user's ~/.cache: most tests build a
    new warehouse, and each derived it again (0.7-1.8 s); no test may read what an earlier session or
    a developer's own runs left there. A test of the cache sets its own folder."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if base.name.startswith("popen-gw") else base) / "finops-reference-cache"
    before = os.environ.get("FINOPS_CACHE_DIR")
    os.environ["FINOPS_CACHE_DIR"] = str(shared)
    yield
    if before is None:
        os.environ.pop("FINOPS_CACHE_DIR", None)
    else:
        os.environ["FINOPS_CACHE_DIR"] = before


@pytest.fixture(scope="session", autouse=True)
def great_expectations_imported_once():
    """Great Expectations imported once in each test process, so the many runs of the suite judge
    their tables here. Otherwise every run starts a worker process that imports it again (3-4 s of
    CPU a run, on the two cores the test processes share; pipelines/orchestration/expectations.py),
    which is what a one-run `finops` process wants and the suite does not. The worker itself is
    tested in tests/test_expectations_worker.py."""
    from pipelines.orchestration.expectations import import_great_expectations

    import_great_expectations()
