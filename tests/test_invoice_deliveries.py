"""A GPU cloud sends invoices, not month exports: each invoice id is a delivery of its own.

Two weekly invoices of one month, each in its own file, both count (before, the ledger kept one
plain upload per provider, account and month, and the first week's money vanished from
core.cost_lines with the run's exit code 0). A re-sent invoice replaces that invoice's lines
alone. A file whose lines carry no invoice id is the month to date, restated by the next one whose
days overlap it; files of disjoint days add up.
Through the bundled gpu_rental_generic mapping, two runs on one warehouse."""

from decimal import Decimal

import pytest

from pipelines.warehouse.connection import connect
from tests.conftest import run_pipeline

HEADER = ("Invoice ID,Account ID,Instance ID,Instance Name,Region,GPU Model,GPU Count,Billing Mode,"
          "Start Time,End Time,Hours,Unit Price (per GPU-hour),Amount,Currency\n")


def invoice(number: str, day: int, amounts: list[str], month: str = "2026-11") -> str:
    """One line per amount: an 8-GPU on-demand instance for a day of `month`, starting on `day`."""
    lines = [f"{number},acc-1,ins-{i},node-{i},eu-1,NVIDIA H100 80GB HBM3,8,On-Demand,{month}-{day + i:02d}T00:00:00Z,"
             f"{month}-{day + i:02d}T01:00:00Z,1,{Decimal(a) / 8},{a},USD\n" for i, a in enumerate(amounts)]
    return HEADER + "".join(lines)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("invoices")
    landing, warehouse = root / "landing", root / "wh.duckdb"
    landing.mkdir()
    (landing / "week45.csv").write_text(invoice("INV-45", 2, ["235.20", "235.20"]))
    (landing / "week46.csv").write_text(invoice("INV-46", 9, ["235.20", "235.20"]))
    (landing / "october-first.csv").write_text(invoice("", 5, ["100.00"], month="2026-10"))

    def totals():
        conn = connect(warehouse, read_only=True)
        try:
            # core.cost_lines names a line without an invoice id by its provisional month ('provisional:...').
            by_invoice = dict(conn.execute("""SELECT CASE WHEN InvoiceId LIKE 'provisional:%' THEN '(none)' ELSE InvoiceId END,
                                                     sum(BilledCost) FROM core.cost_lines GROUP BY ALL""").fetchall())
            status = dict(conn.execute("SELECT path, status FROM raw.files WHERE kind = 'billing'").fetchall())
        finally:
            conn.close()
        return by_invoice, status

    assert run_pipeline(landing, warehouse, reporting_currency="USD").success
    first = totals()
    # The next day: week 46 re-sent with a line corrected, and October sent again whole.
    (landing / "week46-corrected.csv").write_text(invoice("INV-46", 9, ["235.20", "200.00"]))
    (landing / "october-again.csv").write_text(invoice("", 5, ["120.00"], month="2026-10"))
    assert run_pipeline(landing, warehouse, reporting_currency="USD").success
    return first, totals()


def test_two_invoices_of_one_month_both_count(runs):
    (by_invoice, status), _ = runs
    assert by_invoice == {"INV-45": Decimal("470.40"), "INV-46": Decimal("470.40"), "(none)": Decimal("100.00")}
    assert status == {"week45.csv": "loaded", "week46.csv": "loaded", "october-first.csv": "loaded"}


def test_a_re_sent_invoice_replaces_its_own_lines_and_a_month_without_invoice_ids_is_restated_whole(runs):
    _, (by_invoice, status) = runs
    assert by_invoice == {"INV-45": Decimal("470.40"), "INV-46": Decimal("435.20"), "(none)": Decimal("120.00")}
    assert status == {"week45.csv": "loaded", "week46.csv": "superseded", "week46-corrected.csv": "loaded",
                      "october-first.csv": "superseded", "october-again.csv": "loaded"}


def test_an_invoice_sent_again_without_its_last_day_replaces_it_whole(tmp_path):
    """The invoice re-sent with its second day's line withdrawn: the newer version counts, and the
    withdrawn day does not come back from the first (it won by reaching a later day)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    landing.mkdir()
    (landing / "week46.csv").write_text(invoice("INV-46", 9, ["235.20", "235.20"]))
    assert run_pipeline(landing, warehouse, reporting_currency="USD").success
    (landing / "week46-resent.csv").write_text(invoice("INV-46", 9, ["235.20"]))
    assert run_pipeline(landing, warehouse, reporting_currency="USD").success
    conn = connect(warehouse, read_only=True)
    try:
        assert conn.execute("SELECT sum(BilledCost), count(*) FROM core.cost_lines").fetchall() == [(Decimal("235.20"), 1)]
        assert dict(conn.execute("SELECT path, status FROM raw.files WHERE kind = 'billing'").fetchall()) == {
            "week46.csv": "superseded", "week46-resent.csv": "loaded"}
    finally:
        conn.close()
    # The run says why, without advising to map the invoice id it maps already.
    from datetime import UTC, datetime

    from pipelines.cli.summary import files_read_since, run_notices

    notices = run_notices(files_read_since(warehouse, datetime(2000, 1, 1, tzinfo=UTC)))
    assert [(n["path"], n["reason"]) for n in notices] == [(
        "week46.csv", "its lines no longer count: week46-resent.csv holds the same invoice again, and an invoice sent "
                      "again replaces its own lines (README: The ledger)")]


def test_a_run_names_the_plain_upload_another_one_replaced(tmp_path, monkeypatch):
    """Two files of one month without invoice ids whose charge dates overlap (the month to date,
    then restated) replace each other by the ledger's rule; the run says which no longer counts,
    and why."""
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "month-to-date.csv").write_text(invoice("", 1, ["100.00"]))
    run = ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--reports", str(tmp_path / "reports")]
    first = CliRunner().invoke(app, run, terminal_width=400)
    assert first.exit_code == 0 and "superseded" not in first.output, first.output[-2000:]
    (landing / "month-to-date-2.csv").write_text(invoice("", 1, ["90.00", "120.00"]))
    second = CliRunner().invoke(app, run, terminal_width=400)
    assert second.exit_code == 0, second.output[-2000:]
    assert ("superseded: month-to-date.csv — its lines no longer count: month-to-date-2.csv replaced it (plain uploads of "
            "one provider, billing account and month whose charge dates overlap replace each other") in second.output, \
        second.output[-2000:]


def test_plain_uploads_of_disjoint_days_add_up_and_a_month_to_date_file_replaces_them(tmp_path):
    """A GPU cloud that sends a file a day without invoice ids: each day's file covers days no
    other does, so the days add up (before, each file replaced the one before it and the month
    kept only its last day). A month-to-date file over those days then replaces all of them."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    landing.mkdir()
    for day, amount in ((1, "100.00"), (2, "110.00"), (3, "120.00")):
        (landing / f"usage-2026-11-{day:02d}.csv").write_text(invoice("", day, [amount]))

    def month() -> tuple[Decimal, dict]:
        conn = connect(warehouse, read_only=True)
        try:
            total = conn.execute("SELECT sum(BilledCost) FROM core.cost_lines").fetchall()[0][0]
            status = dict(conn.execute("SELECT path, status FROM raw.files WHERE kind = 'billing'").fetchall())
        finally:
            conn.close()
        return total, status

    assert run_pipeline(landing, warehouse, reporting_currency="USD").success
    total, status = month()
    assert total == Decimal("330.00") and set(status.values()) == {"loaded"}
    (landing / "november-to-date.csv").write_text(invoice("", 1, ["100.00", "110.00", "125.00"]))
    assert run_pipeline(landing, warehouse, reporting_currency="USD").success
    total, status = month()
    assert total == Decimal("335.00")
    assert status == {"usage-2026-11-01.csv": "superseded", "usage-2026-11-02.csv": "superseded",
                      "usage-2026-11-03.csv": "superseded", "november-to-date.csv": "loaded"}


def test_a_daily_file_beside_an_hourly_one_from_03_00_counts_each_hour_once_and_the_run_says_so(tmp_path, monkeypatch):
    """A download of days 1-8 in daily lines, then one in hourly lines from day 8 03:00 to day 14:
    the daily file counts for days 1-7 (its day 8 line would count beside the hourly lines), and the
    run names it as counting in part."""
    from datetime import datetime, timedelta

    from typer.testing import CliRunner

    from pipelines.cli.main import app

    def line(start: datetime, end: datetime, amount: str) -> str:
        return (f",acc-1,ins-1,node-1,eu-1,NVIDIA H100 80GB HBM3,8,On-Demand,{start:%Y-%m-%dT%H:%M:%SZ},"
                f"{end:%Y-%m-%dT%H:%M:%SZ},1,{Decimal(amount) / 8},{amount},USD\n")

    day = timedelta(days=1)
    daily = HEADER + "".join(line(datetime(2026, 11, d), datetime(2026, 11, d) + day, "24") for d in range(1, 9))
    hours = [datetime(2026, 11, 8, 3) + timedelta(hours=h) for h in range(21 + 6 * 24)]
    hourly = HEADER + "".join(line(h, h + timedelta(hours=1), "1") for h in hours)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    landing.mkdir()
    args = ["run", "--landing", str(landing), "--warehouse", str(warehouse), "--reports", str(tmp_path / "reports")]
    (landing / "days-1-8.csv").write_text(daily)
    assert CliRunner().invoke(app, args, terminal_width=400).exit_code == 0
    (landing / "days-8-14.csv").write_text(hourly)
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output[-2000:]
    conn = connect(warehouse, read_only=True)
    try:
        assert conn.execute("SELECT sum(BilledCost), count(*) FROM core.cost_lines").fetchall() == [(Decimal("333.00"), 7 + 165)]
    finally:
        conn.close()
    assert ("counts in part: days-1-8.csv — its lines count only for 2026-11-01 00:00 to 2026-11-08 03:00 (UTC); the rest "
            "of its charge time counts through days-8-14.csv") in result.output, result.output[-2000:]


def test_a_download_over_two_months_says_which_month_no_longer_counts(tmp_path, monkeypatch):
    """Days Oct 30 - Nov 2 in one download, then November to date in another: the first file's
    October still counts, its November does not, and the run says so (it stays `loaded`)."""
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    def days(pairs: list[tuple[str, int]], amount: str) -> str:
        return HEADER + "".join(f",acc-1,ins-1,node-1,eu-1,NVIDIA H100 80GB HBM3,8,On-Demand,{m}-{d:02d}T00:00:00Z,"
                                f"{m}-{d:02d}T01:00:00Z,1,{Decimal(amount) / 8},{amount},USD\n" for m, d in pairs)

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing = tmp_path / "landing"
    landing.mkdir()
    args = ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--reports", str(tmp_path / "reports")]
    (landing / "oct30-nov02.csv").write_text(days([("2026-10", 30), ("2026-10", 31), ("2026-11", 1), ("2026-11", 2)], "10"))
    assert CliRunner().invoke(app, args, terminal_width=400).exit_code == 0
    (landing / "november.csv").write_text(days([("2026-11", d) for d in range(1, 6)], "12"))
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output[-2000:]
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert conn.execute("SELECT sum(BilledCost) FROM core.cost_lines").fetchall() == [(Decimal("80.00"),)]
    finally:
        conn.close()
    assert ("counts in part: oct30-nov02.csv — its lines of 2026-11 no longer count: november.csv now hold(s) that month"
            in result.output), result.output[-2000:]
