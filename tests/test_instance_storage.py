"""The Dagster instance storage of dagster.yaml: the event log keeps its SQLite connections open.

What must hold: the repo's dagster.yaml selects it; runs' events land where Dagster's own SQLite
storage finds them (a stock instance over the same folder reads them); a process leaves no WAL
file behind; a webserver watching a run sees each new event; wiping the event log closes what it
kept open; and only a few engines are kept.
"""
import inspect
import shutil
import time
from pathlib import Path

import yaml
from dagster import AssetKey, DagsterInstance, asset, materialize
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from pipelines.orchestration.instance_storage import (
    KEPT_ENGINES,
    KeptOpenSqliteEventLogStorage,
    KeptOpenSqliteStorage,
)
from pipelines.settings import REPO_ROOT


@asset
def tiny() -> int:
    return 1


def instance_from_repo_yaml(home: Path, monkeypatch) -> DagsterInstance:
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("DAGSTER_HOME", str(home))  # dagster.yaml's base_dir
    shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    return DagsterInstance.from_config(str(home))


def test_the_repo_dagster_yaml_selects_the_kept_open_event_log(tmp_path, monkeypatch):
    instance = instance_from_repo_yaml(tmp_path / "home", monkeypatch)
    try:
        assert isinstance(instance.event_log_storage, KeptOpenSqliteEventLogStorage)
        assert isinstance(instance.get_ref().storage, KeptOpenSqliteStorage)
    finally:
        instance.dispose()


def test_dagsters_connect_is_still_the_method_replaced():
    # Pinned Dagster: every read and write of the SQLite event log goes through _connect(shard).
    assert list(inspect.signature(SqliteEventLogStorage._connect).parameters) == ["self", "shard"]
    source = inspect.getsource(SqliteEventLogStorage)
    assert "return self._connect(run_id)" in source
    assert "return self._connect(INDEX_SHARD_NAME)" in source


def test_runs_recorded_through_it_read_back_through_dagsters_own_storage(tmp_path, monkeypatch):
    home = tmp_path / "home"
    instance = instance_from_repo_yaml(home, monkeypatch)
    try:
        for _ in range(2):
            assert materialize([tiny], instance=instance).success
        kept = instance.event_log_storage
        assert 1 <= len(kept._engines) <= KEPT_ENGINES
    finally:
        instance.dispose()
    assert kept._engines == {}
    assert not list((home / "history" / "runs").glob("*.db-wal"))

    # A Dagster without this module (the stock SQLite storage) reads the same files.
    (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"sqlite": {"base_dir": str(home)}}}))
    stock = DagsterInstance.from_config(str(home))
    try:
        assert type(stock.event_log_storage) is SqliteEventLogStorage
        runs = stock.get_runs()
        assert len(runs) == 2 and all(run.is_success for run in runs)
        records = stock.fetch_materializations(AssetKey("tiny"), limit=10).records
        assert len(records) == 2
        assert {record.run_id for record in records} == {run.run_id for run in runs}
    finally:
        stock.dispose()


def test_wipe_closes_the_engines_and_the_log_goes_on(tmp_path, monkeypatch):
    instance = instance_from_repo_yaml(tmp_path / "home", monkeypatch)
    try:
        assert materialize([tiny], instance=instance).success
        instance.wipe()
        # Only the index (emptied, not deleted) is open again; no run shard's deleted file is.
        assert set(instance.event_log_storage._engines) <= {"index"}
        assert instance.fetch_materializations(AssetKey("tiny"), limit=10).records == []
        assert materialize([tiny], instance=instance).success
        assert len(instance.fetch_materializations(AssetKey("tiny"), limit=10).records) == 1
    finally:
        instance.dispose()


def test_only_a_few_engines_are_kept_however_many_runs_are_read(tmp_path):
    storage = KeptOpenSqliteEventLogStorage(str(tmp_path / "runs"))
    try:
        for n in range(KEPT_ENGINES + 3):
            with storage.run_connection(f"run-{n}") as conn:
                conn.exec_driver_sql("SELECT 1")
        assert list(storage._engines) == [f"run-{n}" for n in range(3, KEPT_ENGINES + 3)]
        with storage.run_connection("run-3"):
            pass
        assert list(storage._engines)[-1] == "run-3"
    finally:
        storage.dispose()


def test_a_watcher_in_another_process_sees_each_new_event_of_a_run(tmp_path):
    # The webserver follows a running run through Dagster's watchdog on the run's .db file; events
    # held in the WAL file alone would reach it only at the next checkpoint.
    base = str(tmp_path / "runs")
    writer = KeptOpenSqliteEventLogStorage(base)
    webserver = SqliteEventLogStorage(base)  # Dagster's own, as a webserver without this module
    seen: list[str] = []
    try:
        writer.store_event(log_entry("run-1", "first"))
        webserver.watch("run-1", None, lambda entry, _cursor: seen.append(entry.user_message))
        time.sleep(0.5)  # the observer thread starts watching
        writer.store_event(log_entry("run-1", "second"))
        deadline = time.monotonic() + 10
        while "second" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "second" in seen
    finally:
        webserver.dispose()
        writer.dispose()


def log_entry(run_id: str, message: str) -> EventLogEntry:
    return EventLogEntry(error_info=None, level="INFO", user_message=message, run_id=run_id, timestamp=time.time())
