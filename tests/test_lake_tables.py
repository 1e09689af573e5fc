"""core.cost_lines lives in the lake (pipelines/warehouse/lake_tables.py): one build folder per billing
month, a view over the current ones, superseded and orphaned builds removed, and any Parquet reader
sees what the warehouse sees."""

import shutil
import subprocess
import sys
from decimal import Decimal

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli.main import app
from pipelines.lake.layout import lake_of
from tests.bench_lake import write_cur_month
from tests.conftest import sample

CUR = "billing/aws_cur_legacy_csv_focusconverters_fixture.csv"
FOCUS = "billing/focus10_sample_multicloud_1000.csv"


def run(tmp_path, landing, warehouse):
    result = CliRunner().invoke(app, ["run", "--landing", str(landing), "--warehouse", str(warehouse),
                                      "--reports", str(tmp_path / "reports"), "--as-of", "2026-10-02"], terminal_width=200)
    assert result.exit_code in (0, 1), result.output  # 1: findings to act on, published all the same
    return result


def builds(warehouse) -> dict[str, str]:
    """period -> build folder (relative to the lake) that the published warehouse reads."""
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        return dict(conn.execute("SELECT period, folder FROM core.lake_builds WHERE model = 'core.cost_lines'").fetchall())


def folders_on_disk(warehouse) -> set[str]:
    lake = lake_of(warehouse)
    return {p.relative_to(lake).as_posix() for p in (lake / "core" / "cost_lines").glob("*/build=*")}


def totals(warehouse) -> tuple[int, Decimal]:
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        return conn.execute("SELECT count(*), sum(EffectiveCost) FROM core.cost_lines").fetchone()


@pytest.fixture
def landing(tmp_path):
    folder = tmp_path / "landing"
    (folder / "billing").mkdir(parents=True)
    shutil.copy(sample(CUR), folder / "billing" / "cur.csv")
    shutil.copy(sample(FOCUS), folder / "billing" / "focus.csv")
    return folder


def test_cost_lines_is_a_view_over_a_build_folder_per_billing_month(tmp_path, landing):
    warehouse = tmp_path / "wh.duckdb"
    run(tmp_path, landing, warehouse)
    current = builds(warehouse)
    assert sorted(current) == ["2023-11", "2024-09", "2024-10", "_schema"]
    assert all(folder.startswith(f"core/cost_lines/billing_period={period}/build=") for period, folder in current.items()
               if period != "_schema")
    assert folders_on_disk(warehouse) == set(current.values())
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        assert conn.execute("SELECT table_type FROM information_schema.tables WHERE table_schema = 'core' "
                            "AND table_name = 'cost_lines'").fetchall() == [("VIEW",)]
        # Described like any table.
        assert "lake" in conn.execute("SELECT comment FROM duckdb_views() WHERE view_name = 'cost_lines' "
                                      "AND schema_name = 'core'").fetchone()[0]
    # Any Parquet reader sees the same lines, to the cent, from the folders the registry names.
    files = [str(lake_of(warehouse) / folder / "data_0.parquet") for folder in current.values()]
    outside = duckdb.connect().execute("SELECT count(*), sum(EffectiveCost) FROM read_parquet(?)", [files]).fetchone()
    assert outside == totals(warehouse)
    assert outside[0] == 1281 + 1000


def test_a_new_month_adds_a_folder_and_a_restated_month_replaces_only_its_own(tmp_path, landing):
    warehouse = tmp_path / "wh.duckdb"
    run(tmp_path, landing, warehouse)
    first = builds(warehouse)
    lines, cost = totals(warehouse)
    # A second CUR delivery, for December: November's and the FOCUS months' builds stay as they were.
    write_cur_month(sample(CUR), landing / "billing" / "2023-12" / "cur.csv", "2023-12")
    run(tmp_path, landing, warehouse)
    second = builds(warehouse)
    assert {p: f for p, f in second.items() if p != "2023-12"} == first
    assert totals(warehouse) == (lines + 1281, cost + Decimal(cost_of_cur(warehouse, "2023-11")))
    # December restated (a line's cost changed, the same export path): December gets a new build, and
    # nothing else moves. The build it replaces stays one run longer: a connection opened before the
    # swap (a notebook left open over the daily run) still reads the state it opened.
    december = landing / "billing" / "2023-12" / "cur.csv"
    text = december.read_text()
    december.write_text(text + text.splitlines()[1] + "\n")
    # A reader in another process (DuckDB shares one instance per file within a process).
    reader = subprocess.Popen([sys.executable, "-c", READER, str(warehouse)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        run(tmp_path, landing, warehouse)
        out, err = reader.communicate("query\n", timeout=60)
    finally:
        reader.kill()
    assert out.split() == [str(lines + 1281), str(cost + Decimal(cost_of_cur(warehouse, "2023-11")))], err
    third = builds(warehouse)
    assert third["2023-12"] != second["2023-12"]
    assert {p: f for p, f in third.items() if p != "2023-12"} == first
    assert folders_on_disk(warehouse) == set(third.values()) | {second["2023-12"]}
    # The next run that publishes removes it, and keeps what it replaces itself one run.
    write_cur_month(sample(CUR), landing / "billing" / "2024-01" / "cur.csv", "2024-01")
    run(tmp_path, landing, warehouse)
    assert second["2023-12"] not in folders_on_disk(warehouse)
    assert folders_on_disk(warehouse) == set(builds(warehouse).values()) | set(third.values())


READER = """
import sys, duckdb
conn = duckdb.connect(sys.argv[1], read_only=True)
print("open", flush=True)
sys.stdin.readline()
print(*conn.execute("SELECT count(*), sum(EffectiveCost) FROM core.cost_lines").fetchone())
"""


def cost_of_cur(warehouse, month: str) -> Decimal:
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        return conn.execute("SELECT sum(EffectiveCost) FROM core.cost_lines WHERE ProviderName = 'AWS' "
                            "AND strftime(BillingPeriodStart, '%Y-%m') = ?", [month]).fetchone()[0]


def test_a_killed_runs_build_is_invisible_and_removed_by_the_next_run(tmp_path, landing):
    warehouse = tmp_path / "wh.duckdb"
    run(tmp_path, landing, warehouse)
    before = totals(warehouse)
    # What a run killed after writing a month's folder, before publishing, leaves behind.
    published = builds(warehouse)
    orphan = lake_of(warehouse) / "core" / "cost_lines" / "billing_period=2023-11" / "build=killed"
    orphan.mkdir()
    shutil.copy(lake_of(warehouse) / published["2023-11"] / "data_0.parquet", orphan / "data_0.parquet")
    assert totals(warehouse) == before  # the view reads the registry's folders only
    write_cur_month(sample(CUR), landing / "billing" / "2023-12" / "cur.csv", "2023-12")
    run(tmp_path, landing, warehouse)
    assert not orphan.exists()
    assert folders_on_disk(warehouse) == set(builds(warehouse).values())


def test_a_warehouse_holding_cost_lines_as_a_table_moves_them_into_the_lake(tmp_path, landing):
    """A warehouse made before core.cost_lines lived in the lake (or built by Spark) has it as a table:
    the next run builds it into the lake and the view takes the table's place, the same lines."""
    warehouse = tmp_path / "wh.duckdb"
    run(tmp_path, landing, warehouse)
    before = totals(warehouse)
    with duckdb.connect(str(warehouse)) as conn:
        conn.execute("CREATE TABLE main.lines AS SELECT * FROM core.cost_lines")
        conn.execute("DROP VIEW core.cost_lines")
        conn.execute("CREATE TABLE core.cost_lines AS SELECT * FROM main.lines")
        conn.execute("DROP TABLE main.lines")
        conn.execute("DELETE FROM core.lake_builds")
    shutil.rmtree(lake_of(warehouse) / "core")
    write_cur_month(sample(CUR), landing / "billing" / "2023-12" / "cur.csv", "2023-12")
    run(tmp_path, landing, warehouse)
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        assert conn.execute("SELECT table_type FROM information_schema.tables WHERE table_schema = 'core' "
                            "AND table_name = 'cost_lines'").fetchall() == [("VIEW",)]
    assert totals(warehouse)[0] == before[0] + 1281
    assert sorted(builds(warehouse)) == ["2023-11", "2023-12", "2024-09", "2024-10", "_schema"]


def test_a_column_parquet_cannot_hold_exactly_is_refused(tmp_path, monkeypatch):
    """DuckDB writes HUGEINT to Parquet as DOUBLE: a lake table with one would come back rounded."""
    from pipelines.settings import FinopsSettings
    from pipelines.warehouse import periods
    from pipelines.warehouse.connection import connect, prepare

    conn = connect(tmp_path / "wh.duckdb")
    prepare(conn, always_set_up=True)
    text = ("CREATE OR REPLACE TABLE core.cost_lines AS SELECT CAST(1 AS HUGEINT) AS weight, "
            "DATE '2026-09-01' AS BillingPeriodStart WHERE list_contains($billing_months, '2026-09')")
    monkeypatch.setattr(periods, "sql_text", lambda table: text)
    params = FinopsSettings(landing_dir=str(tmp_path)).sql_params()
    with pytest.raises(TypeError, match=r"core.cost_lines is kept in the lake.*weight.*HUGEINT"):
        periods.build_fresh(conn, "core.cost_lines", params, [["2026-09"]])


def test_a_lake_write_holds_to_its_share_of_the_memory_limit_and_gives_it_back(tmp_path, monkeypatch):
    """The write streams to Parquet and may spill what it holds: at the full limit DuckDB filled it
    anyway, a 1M-line run's peak. The connection's own limit is back after it, even when it fails."""
    from pipelines.settings import FinopsSettings
    from pipelines.warehouse import periods
    from pipelines.warehouse.connection import connect, memory_limit_bytes, prepare

    monkeypatch.setenv("FINOPS_DUCKDB_MEMORY_LIMIT", "500MB")
    conn = connect(tmp_path / "wh.duckdb")
    prepare(conn, always_set_up=True)
    before = conn.execute("SELECT current_setting('memory_limit')").fetchall()
    text = ("CREATE OR REPLACE TABLE core.cost_lines AS SELECT current_setting('memory_limit') AS limit_seen, "
            "DATE '2026-09-01' AS BillingPeriodStart WHERE list_contains($billing_months, '2026-09')")
    monkeypatch.setattr(periods, "sql_text", lambda table: text)
    params = FinopsSettings(landing_dir=str(tmp_path)).sql_params()
    periods.build_fresh(conn, "core.cost_lines", params, [["2026-09"]])
    assert conn.execute("SELECT limit_seen FROM core.cost_lines").fetchall() == [("286.1 MiB",)]  # 60 % of 476.8 MiB
    assert conn.execute("SELECT current_setting('memory_limit')").fetchall() == before
    assert memory_limit_bytes(conn) // 10**6 == 500

    monkeypatch.setattr(periods, "sql_text", lambda table: text.replace("current_setting('memory_limit')", "error('boom')"))
    with pytest.raises(duckdb.Error, match="boom"):
        periods.build_periods(conn, "core.cost_lines", params, [["2026-09"]])
    assert conn.execute("SELECT current_setting('memory_limit')").fetchall() == before


def test_the_per_charge_marts_live_in_the_lake_and_a_new_month_attributes_only_its_own(tmp_path, landing):
    """marts.cost_attribution and marts.egress_lines_by_billing_month grow with the lines: a build folder
    per billing month too. Read from the Parquet alone, each month's parts add up to its charges, and
    the GPU-second weights are whole numbers (BIGINT; Parquet would round a HUGEINT)."""
    warehouse = tmp_path / "wh.duckdb"
    run(tmp_path, landing, warehouse)

    def mart_builds(model: str) -> dict[str, str]:
        with duckdb.connect(str(warehouse), read_only=True) as conn:
            return dict(conn.execute("SELECT period, folder FROM core.lake_builds WHERE model = ?", [model]).fetchall())

    first = mart_builds("marts.cost_attribution")
    assert sorted(first) == ["2023-11", "2024-09", "2024-10", "_schema"]
    assert sorted(mart_builds("marts.egress_lines_by_billing_month"))[-1] == "_schema"
    lake = lake_of(warehouse)
    parts = duckdb.connect().execute(
        "SELECT strftime(billing_period_start, '%Y-%m'), sum(amount_billing) FROM read_parquet(?) GROUP BY ALL ORDER BY 1",
        [[str(lake / f / "data_0.parquet") for f in first.values()]]).fetchall()
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        charges = conn.execute("SELECT strftime(BillingPeriodStart, '%Y-%m'), sum(EffectiveCost) FROM core.cost_lines "
                               "GROUP BY ALL ORDER BY 1").fetchall()
        assert conn.execute("SELECT table_type FROM information_schema.tables WHERE table_schema = 'marts' "
                            "AND table_name IN ('cost_attribution', 'egress_lines_by_billing_month')").fetchall() == [("VIEW",)] * 2
        assert conn.execute("SELECT DISTINCT data_type FROM duckdb_columns() WHERE table_name = 'cost_attribution' "
                            "AND column_name IN ('gpu_seconds', 'weight', 'total_weight')").fetchall() == [("BIGINT",)]
    assert parts == charges
    # A new month: its own attribution folder, the others' as they were.
    write_cur_month(sample(CUR), landing / "billing" / "2023-12" / "cur.csv", "2023-12")
    run(tmp_path, landing, warehouse)
    second = mart_builds("marts.cost_attribution")
    assert {p: f for p, f in second.items() if p != "2023-12"} == first
    assert second["2023-12"].startswith("marts/cost_attribution/billing_period=2023-12/build=")
