"""The lake (pipelines/lake): raw rows as partitioned Parquet beside the warehouse, read through
raw.* views that name only registered file versions; runs with nothing new stop before the graph."""

import os
import shutil

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli.main import app
from pipelines.ingest.landing import ingest_landing
from pipelines.lake.layout import lake_of
from pipelines.lake.writer import LakeIncomplete
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import sample

CUR = "billing/aws_cur_legacy_csv_focusconverters_fixture.csv"
FOCUS = "billing/focus10_sample_multicloud_1000.csv"


@pytest.fixture
def loaded(tmp_path):
    landing = tmp_path / "landing"
    (landing / "billing").mkdir(parents=True)
    shutil.copy(sample(CUR), landing / "billing" / "cur.csv")
    shutil.copy(sample(FOCUS), landing / "billing" / "focus.csv")
    warehouse = tmp_path / "wh.duckdb"
    conn = connect(warehouse)
    summary = ingest_landing(conn, landing)
    assert {o.status for o in summary.outcomes} == {"loaded"}
    return landing, warehouse, conn


def test_rows_land_partitioned_by_provider_period_and_file_version(loaded):
    landing, warehouse, conn = loaded
    lake = lake_of(warehouse)
    assert lake == warehouse.parent / "wh.lake"
    cur_sha = fetch_all(conn, "SELECT sha256 FROM raw.files WHERE path = 'billing/cur.csv'")[0][0]
    folders = sorted(p.relative_to(lake).as_posix() for p in lake.rglob(f"file={cur_sha}"))
    assert folders == [f"raw/cost_lines/provider=AWS/billing_period=2023-11/file={cur_sha}"]
    # The warehouse holds no raw rows: raw.cost_lines is a view, and any Parquet reader sees the same rows.
    assert fetch_all(conn, "SELECT table_type FROM information_schema.tables WHERE table_schema = 'raw' "
                           "AND table_name = 'cost_lines'") == [("VIEW",)]
    outside = duckdb.connect().execute(
        "SELECT count(*), count(DISTINCT provider) FROM read_parquet(?, hive_partitioning = true) WHERE file <> 'schema'",
        [str(lake / "raw" / "cost_lines" / "**" / "*.parquet")]).fetchone()
    inside = fetch_all(conn, "SELECT count(*), count(DISTINCT ProviderName) FROM raw.cost_lines")[0]
    assert outside[0] == inside[0] == 1281 + 1000 and outside[1] >= 2  # the CUR fixture has 1,281 lines
    # The ledger's facts of each billing file, computed once when it was read: its lines by slice.
    assert fetch_all(conn, "SELECT sum(lines) FROM raw.file_slices")[0][0] == inside[0]


def test_partition_keys_from_arrow_batches_equal_their_sql_twins():
    """The streaming writer computes each partition key from an Arrow batch, an older warehouse's
    move into the lake in SQL: the same folder for the same row, at the edges of days, of the epoch
    and of the calendar, a null time, and a batch of one day (written as one repeated value)."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from pipelines.lake.layout import PARTITIONING

    times = [datetime(2026, 3, 31, 23, 59, 59, 999999, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC),
             datetime(1969, 12, 31, 23, 0, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC),
             datetime(9999, 12, 31, 23, 59, tzinfo=UTC), None]
    utc = pa.timestamp("us", tz="UTC")
    batches = {
        "mixed": pa.RecordBatch.from_pydict({"ts": pa.array(times, utc), "BillingPeriodStart": pa.array(times[::-1], utc),
                                             "ChargePeriodStart": pa.array(times, utc),
                                             "ProviderName": ["AWS", "Microsoft Azure", "", None, "a/b", "GCP"]}),
        "one day": pa.RecordBatch.from_pydict({"ts": pa.array(times[:1] * 3, utc), "BillingPeriodStart": pa.array([None] * 3, utc),
                                               "ChargePeriodStart": pa.array(times[:1] * 3, utc), "ProviderName": ["AWS"] * 3}),
    }
    conn = duckdb.connect()
    conn.execute("SET TimeZone = 'UTC'")  # as every warehouse session speaks
    for label, batch in batches.items():
        conn.register("batch", pa.Table.from_batches([batch]))
        for kind in ("billing", "telemetry"):
            for name, sql, compute in PARTITIONING[kind].columns:
                from_sql = [row[0] for row in conn.execute(f"SELECT {sql} FROM batch").fetchall()]
                assert compute(batch).to_pylist() == from_sql, (label, name)
        conn.unregister("batch")


def test_folders_no_registry_names_are_invisible_and_swept(loaded):
    landing, warehouse, conn = loaded
    lake = lake_of(warehouse)
    before = fetch_all(conn, "SELECT count(*), sum(x_SourceCost) FROM raw.cost_lines")
    # What a run killed after writing its rows and before registering them leaves behind.
    real = next(p for p in lake.rglob("file=*") if p.name != "file=schema")
    orphan = real.with_name("file=" + "f" * 64)
    shutil.copytree(real, orphan)
    (lake / "_staging" / "deadbeef-1").mkdir(parents=True)
    assert fetch_all(conn, "SELECT count(*), sum(x_SourceCost) FROM raw.cost_lines") == before
    ingest_landing(conn, landing)  # the next run sweeps them
    assert not orphan.exists() and not any((lake / "_staging").iterdir())
    assert fetch_all(conn, "SELECT count(*), sum(x_SourceCost) FROM raw.cost_lines") == before


def test_a_warehouse_copied_without_its_lake_is_refused_not_emptied(loaded, tmp_path):
    landing, warehouse, conn = loaded
    conn.close()
    copy = tmp_path / "elsewhere" / "copy.duckdb"
    copy.parent.mkdir()
    shutil.copyfile(warehouse, copy)
    with pytest.raises(LakeIncomplete, match=r"lacks the rows of 2 file\(s\).*copy\.lake"):
        ingest_landing(connect(copy), landing)


def test_a_run_with_nothing_new_stops_before_the_graph(tmp_path):
    landing = tmp_path / "landing"
    (landing / "billing").mkdir(parents=True)
    target = landing / "billing" / "focus.csv"
    shutil.copy(sample(FOCUS), target)
    warehouse = tmp_path / "wh.duckdb"
    args = ["run", "--landing", str(landing), "--warehouse", str(warehouse), "--reports", str(tmp_path / "reports"),
            "--as-of", "2026-10-02"]
    first = CliRunner().invoke(app, args, terminal_width=200)
    assert first.exit_code == 0, first.output
    published = warehouse.stat().st_mtime_ns
    second = CliRunner().invoke(app, args, terminal_width=200)
    assert second.exit_code == 0 and "nothing new since the last run: all 1 files already read" in second.output
    assert warehouse.stat().st_mtime_ns == published  # not even republished
    # Moved with its lake to another folder: the graph runs, so the raw views read the lake's new place.
    moved = tmp_path / "moved"
    moved.mkdir()
    warehouse.rename(moved / "wh.duckdb")
    lake_of(warehouse).rename(lake_of(moved / "wh.duckdb"))
    relocated = CliRunner().invoke(app, [*args[:3], "--warehouse", str(moved / "wh.duckdb"), *args[5:]], terminal_width=200)
    # (the same settings, reports folder included: only the warehouse's place changed)
    assert relocated.exit_code == 0 and "nothing new" not in relocated.output, relocated.output
    with duckdb.connect(str(moved / "wh.duckdb"), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM raw.cost_lines").fetchone()[0] == 1000
        assert conn.execute("SELECT count(*) FROM core.cost_lines").fetchone()[0] == 1000  # its view re-pointed too
    (moved / "wh.duckdb").rename(warehouse)
    lake_of(moved / "wh.duckdb").rename(lake_of(warehouse))
    published = warehouse.stat().st_mtime_ns
    # Another date is another report: the graph runs.
    other_day = CliRunner().invoke(app, [*args[:-1], "2026-10-03"], terminal_width=200)
    assert other_day.exit_code == 0 and "nothing new" not in other_day.output
    # A file rewritten in place (new content, new time) is read again.
    target.write_text(target.read_text().replace("\n", "\r\n", 1))
    os.utime(target, ns=(published + 10**9, published + 10**9))
    changed = CliRunner().invoke(app, [*args[:-1], "2026-10-03"], terminal_width=200)
    assert changed.exit_code == 0 and "nothing new" not in changed.output
