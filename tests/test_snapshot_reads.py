"""Readers during a run, one writer at a time, crashes, and the demo's safety (pipelines/warehouse/publish.py)."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import duckdb
import pytest

from pipelines.lake.layout import copy_warehouse
from pipelines.orchestration.definitions import warehouse_resource
from pipelines.warehouse.connection import connect
from pipelines.warehouse.publish import EX_TEMPFAIL, holder_path
from tests.conftest import REPO, SAMPLES, run_pipeline
from tests.test_daily_report import focus_rows

FINOPS = Path(sys.executable).parent / "finops"
SMALL = "billing/focus10_sample_multicloud_1000.csv"  # the "before" state: one file


def counts(warehouse: Path) -> tuple[int, int]:
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        return (conn.execute("SELECT count(*) FROM core.cost_lines").fetchone()[0],
                conn.execute("SELECT count(*) FROM raw.files").fetchone()[0])
    finally:
        conn.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def staging_files(warehouse: Path) -> list[Path]:
    return sorted(warehouse.parent.glob(warehouse.name + ".staging-*"))


NOT_LOADING = ("nvidia_smi_dmon_h100_load.txt", "azure_ea_export_v2_koku.csv", "BOM.csv")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A published warehouse built from one billing file, and a landing folder with all the samples."""
    root = tmp_path_factory.mktemp("snapshot")
    small = root / "small"
    (small / Path(SMALL).parent).mkdir(parents=True)
    shutil.copy(SAMPLES / SMALL, small / SMALL)
    warehouse = root / "base.duckdb"
    assert run_pipeline(small, warehouse, as_of=date(2026, 10, 2)).published
    full = root / "landing"
    # The samples that do not load (a ragged CUR, dmon without timestamps, wholly quarantined Azure files)
    # make a run exit 1 by design; these tests want a run that succeeds.
    shutil.copytree(SAMPLES, full, ignore=shutil.ignore_patterns(*NOT_LOADING))
    return warehouse, full


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home"), "PYTHONPATH": str(REPO)}


def start_run(landing: Path, warehouse: Path, env: dict, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([str(FINOPS), "run", "--landing", str(landing), "--warehouse", str(warehouse), "--as-of", "2026-10-02",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def wait_for_staging(warehouse: Path, proc: subprocess.Popen, timeout: float = 60) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = staging_files(warehouse)
        if found:
            return found[0]
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.02)
    raise AssertionError("the run never started its staging file")


def test_readers_during_a_run_see_the_old_or_the_new_state_and_never_a_lock_error(tmp_path, base, env):
    warehouse = tmp_path / "wh.duckdb"
    copy_warehouse(base[0], warehouse)
    old = counts(warehouse)
    proc = start_run(base[1], warehouse, env)
    seen, during, errors, busy = [], 0, [], None
    try:
        while proc.poll() is None:
            building = bool(staging_files(warehouse))
            try:
                seen.append(counts(warehouse))
                during += building
            except duckdb.Error as exc:  # what analysts hit before: "Could not set lock"
                errors.append(str(exc))
            if building and busy is None:
                # A second run meanwhile, told not to wait: exit 75, one line, naming the holder.
                busy = subprocess.run([str(FINOPS), "run", "--landing", str(base[1]), "--warehouse", str(warehouse), "--no-wait"],
                                      capture_output=True, text=True, env=env, timeout=60)
            time.sleep(0.05)  # an analyst's pace; leaves the run its CPU
        output = proc.stdout.read()
    finally:
        proc.kill()
    assert proc.returncode == 0, output
    new = counts(warehouse)
    assert new != old and new[1] > old[1]
    assert errors == []
    assert during >= 3, f"only {during} reads while the run was building"
    assert set(seen) <= {old, new}, set(seen)
    assert busy is not None and busy.returncode == EX_TEMPFAIL
    lines = (busy.stdout + busy.stderr).strip().splitlines()
    assert len(lines) == 1 and f"pid {proc.pid}" in lines[0] and "Traceback" not in lines[0], lines
    # Published whole: no WAL, no staging file, no holder note left behind.
    assert not staging_files(warehouse) and not Path(f"{warehouse}.wal").exists() and not holder_path(warehouse).exists()
    print(f"{len(seen)} read_only opens during the run ({during} while it was building), none failed")


def test_a_second_run_waits_for_the_holder_then_succeeds(tmp_path, base, env):
    warehouse = tmp_path / "wh.duckdb"
    copy_warehouse(base[0], warehouse)
    released, release = tmp_path / "released", tmp_path / "release"
    # The holder lets go only once the waiting run has said it waits: no race with a slow machine.
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from pathlib import Path
from pipelines.warehouse.publish import writer_lock
with writer_lock(Path({str(warehouse)!r})):
    print("held", flush=True)
    deadline = time.monotonic() + 240
    while not Path({str(release)!r}).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    Path({str(released)!r}).write_text(repr(time.time()))
"""], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = counts(warehouse)
        refused = subprocess.run([str(FINOPS), "run", "--landing", str(base[1]), "--warehouse", str(warehouse), "--no-wait"],
                                 capture_output=True, text=True, env=env, timeout=60)
        assert refused.returncode == EX_TEMPFAIL
        lines = (refused.stdout + refused.stderr).strip().splitlines()
        assert len(lines) == 1 and f"pid {holder.pid}" in lines[0], lines
        # Nothing was touched: no file registered (or marked failed), the landing folder intact.
        assert counts(warehouse) == before and not staging_files(warehouse)
        assert (base[1] / SMALL).exists()
        waiter = subprocess.Popen([str(FINOPS), "run", "--landing", str(base[1]), "--warehouse", str(warehouse), "--as-of", "2026-10-02"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        first = waiter.stdout.readline()
        release.touch()
        output = first + waiter.stdout.read()
        waiter.wait(timeout=300)
    finally:
        release.touch()
        holder.kill()
    assert waiter.returncode == 0, output
    waiting = [line for line in output.splitlines() if line.startswith("waiting for")]
    assert len(waiting) == 1 and f"pid {holder.pid}" in waiting[0], output
    assert warehouse.stat().st_mtime >= float(released.read_text())  # published after the holder let go
    assert counts(warehouse)[1] > before[1]


def test_a_killed_run_leaves_the_published_warehouse_as_it_was(tmp_path, base, env):
    warehouse = tmp_path / "wh.duckdb"
    copy_warehouse(base[0], warehouse)
    before, before_digest = counts(warehouse), digest(warehouse)
    proc = start_run(base[1], warehouse, env)
    try:
        staging = wait_for_staging(warehouse, proc)
        time.sleep(1.0)  # into the ingest
        assert proc.poll() is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert digest(warehouse) == before_digest and counts(warehouse) == before
    assert staging.exists()  # the dead run's copy, left behind
    # The next run removes it, and publishes.
    outcome = run_pipeline(base[1], warehouse, as_of=date(2026, 10, 2))
    assert outcome.published
    assert not staging_files(warehouse)
    assert counts(warehouse)[1] > before[1]


def test_a_run_with_a_failed_step_publishes_nothing_but_a_failed_delivery_does_not_hold_it_back(tmp_path, base):
    warehouse = tmp_path / "wh.duckdb"
    copy_warehouse(base[0], warehouse)
    before = digest(warehouse)
    broken = tmp_path / "planned.yaml"
    broken.write_text("planned_runs: [{name: x, start: not-a-date}]\n")  # the anomaly step fails on it
    outcome = run_pipeline(base[1], warehouse, as_of=date(2026, 10, 2), planned_runs_file=str(broken))
    assert not outcome.success and not outcome.published
    # The step and its own error, on one line (the CLI prints it after Dagster's tracebacks).
    assert outcome.failed_steps == [f"anomalies: ValueError: {broken}: planned run 1 ({{'name': 'x', 'start': 'not-a-date'}}) "
                                    "needs start and end dates (YYYY-MM-DD): Invalid isoformat string: 'not-a-date'"]
    assert digest(warehouse) == before and not staging_files(warehouse)
    # A chat server that is down fails only the webhook step, which writes nothing: the run publishes.
    outcome = run_pipeline(base[1], warehouse, as_of=date(2026, 10, 2), webhook_url="http://127.0.0.1:9/hook",
                           webhook_retries=0, webhook_timeout_s=1.0)
    assert not outcome.success and outcome.published
    assert outcome.failed_steps == ["reports__webhook: pipelines.report.webhook.DeliveryError: webhook at 127.0.0.1:9 could "
                                    "not be reached: HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new "
                                    "connection: [Errno 111] Connection refused"]
    assert digest(warehouse) != before and not staging_files(warehouse)


def test_the_demo_deployment_starts_its_schedule_stopped(tmp_path):
    from dagster import DefaultScheduleStatus, DefaultSensorStatus

    from pipelines.orchestration.definitions import build_definitions
    from pipelines.settings import DEMO_DIR, FinopsSettings

    demo = build_definitions(FinopsSettings(landing_dir=str(DEMO_DIR / "landing")), str(DEMO_DIR / "warehouse.duckdb"))
    assert demo.resolve_schedule_def("daily_report_schedule").default_status == DefaultScheduleStatus.STOPPED
    assert demo.resolve_sensor_def("landing_sensor").default_status == DefaultSensorStatus.STOPPED
    prod = build_definitions(FinopsSettings(landing_dir=str(tmp_path / "exports")), str(tmp_path / "finops.duckdb"))
    assert prod.resolve_schedule_def("daily_report_schedule").default_status == DefaultScheduleStatus.RUNNING


def test_a_run_without_a_date_keeps_the_demos_dated_anomaly_state(tmp_path, monkeypatch):
    from pipelines.orchestration import definitions

    out = tmp_path / "demo"
    landing = out / "landing"
    landing.mkdir(parents=True)
    spiky = [f"{100 + ((i + 31) % 7):.2f}" for i in range(30)]
    spiky[29] = "900.00"  # 2026-09-30, the day the demo's report date scores: open as of then, "no data" later
    (landing / "focus-2026-08.csv").write_text(focus_rows(date(2026, 8, 1), [f"{100 + (i % 7):.2f}" for i in range(31)], "2026-08"))
    (landing / "focus-2026-09.csv").write_text(focus_rows(date(2026, 9, 1), spiky, "2026-09"))
    (out / "truths.json").write_text(json.dumps({"report_date": "2026-10-02"}))
    warehouse = out / "warehouse.duckdb"
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 2)).success
    read = "SELECT anomaly_id, status, resolution, resolved_at, last_day FROM findings.anomalies ORDER BY ALL"
    conn = duckdb.connect(str(warehouse), read_only=True)
    before = conn.execute(read).fetchall()
    conn.close()
    assert [row[1] for row in before] == ["open"]

    # The resource is set up once and torn down once per Dagster run (the ingest's, then the models'),
    # both on the one staging file `run_graph` began.
    calls = []
    setup, teardown = definitions.WarehouseResource.setup_for_execution, definitions.WarehouseResource.teardown_after_execution
    monkeypatch.setattr(definitions.WarehouseResource, "setup_for_execution", lambda self, c: (calls.append("setup"), setup(self, c))[1])
    monkeypatch.setattr(definitions.WarehouseResource, "teardown_after_execution",
                        lambda self, c: (calls.append("teardown"), teardown(self, c))[1])
    assert run_pipeline(landing, warehouse).success  # no date: the demo's own, not today's
    assert calls == ["setup", "teardown", "setup", "teardown"]
    conn = duckdb.connect(str(warehouse), read_only=True)
    assert conn.execute(read).fetchall() == before
    conn.close()
    assert not (out / "reports" / date.today().isoformat()).exists()


def test_every_connection_the_pipeline_opens_is_held_to_the_memory_limit(tmp_path, monkeypatch):
    """The run's, the readers' (the summary's 10M-line joins) and the publishing checkpoint's alike:
    left at DuckDB's default (80 % of the machine), a reader alone outgrew the whole run. Each keeps
    its blocks' memory for reuse up to that limit (`keep_block_memory`), not beyond it."""
    monkeypatch.setenv("FINOPS_DUCKDB_MEMORY_LIMIT", "300MB")
    reference = duckdb.connect(config={"memory_limit": "300MB"})
    expected = reference.execute("SELECT current_setting('memory_limit')").fetchall()
    reference.close()
    settings = "SELECT current_setting('memory_limit'), current_setting('block_allocator_memory')"
    path = tmp_path / "warehouse.duckdb"
    for read_only in (False, True):
        conn = connect(path, read_only=read_only)
        try:
            assert conn.execute(settings).fetchall() == [expected[0] * 2]
        finally:
            conn.close()
    with warehouse_resource(str(path)).get_connection() as conn:
        assert conn.execute(settings).fetchall() == [expected[0] * 2]


def test_a_connection_opened_while_a_write_holds_a_share_keeps_the_block_memory(tmp_path):
    """The block memory belongs to the database, which connections to one file share, and DuckDB
    refuses to lower it: a connection opened under a lowered limit leaves it as it is."""
    from pipelines.warehouse.connection import keep_block_memory, memory_share

    conn = connect(tmp_path / "warehouse.duckdb")
    block = "SELECT current_setting('block_allocator_memory')"
    before = conn.execute(block).fetchall()
    with memory_share(conn, 0.5):
        keep_block_memory(conn)  # no error: the limit is lower now, the block memory stays
        assert conn.execute(block).fetchall() == before
    conn.close()


def test_a_memory_limit_beyond_what_the_block_allocator_may_have_still_connects(tmp_path, monkeypatch):
    """DuckDB lets the block allocator have at most 80 % of the machine's memory, and a memory limit
    may be set above that: the connection then works without the reuse instead of failing."""
    monkeypatch.setenv("FINOPS_DUCKDB_MEMORY_LIMIT", "1000TB")
    conn = connect(tmp_path / "warehouse.duckdb")
    try:
        assert conn.execute("SELECT current_setting('block_allocator_memory'), 42").fetchall() == [("0 bytes", 42)]
    finally:
        conn.close()
