"""A billing file rewritten at its path: the new version replaces what it restates, never more.
A bucket sync or an export job that writes one name (`latest.csv`) leaves exactly these layouts."""

from decimal import Decimal

import pytest

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline

HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
          "ServiceName,ServiceCategory,ResourceId,ResourceName,ConsumedQuantity,ConsumedUnit,CommitmentDiscountId,"
          "CommitmentDiscountStatus,Tags,x_GpuModel,x_GpuCount\n")


def line(cost: str, start: str, end: str, resource: str = "ins-a") -> str:
    return f"{cost},{cost},USD,Usage,{start},{end},GpuCloud,GPU,Compute,{resource},gpu-a,24,GPU-Hours,,,,A100 80G,1\n"


SEPTEMBER = HEADER + line("100.00", "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z")


# With the billing period stated, as a GPU cloud's invoice mapping states it.
PERIODS = {"2026-09": "2026-10", "2026-10": "2026-11", "2026-11": "2026-12"}


def billed(cost: str, month: str, invoice: str = "") -> str:
    return line(cost, f"{month}-01T00:00:00Z", f"{month}-02T00:00:00Z").rstrip("\n") + (
        f",{month}-01T00:00:00Z,{PERIODS[month]}-01T00:00:00Z,{invoice}\n")


BILLED = HEADER.rstrip("\n") + ",BillingPeriodStart,BillingPeriodEnd,InvoiceId\n"


def answer(tmp_path, sql: str) -> list[tuple]:
    """`sql`'s rows in tmp_path/wh.duckdb."""
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        return fetch_all(conn, sql)
    finally:
        conn.close()


def land_in_turn(tmp_path, *files: tuple[str, str]) -> list:
    """Land each (name, text) beside the ones before, running after each: the counted total by billing month."""
    landing = tmp_path / "landing"
    landing.mkdir()
    for name, text in files:
        (landing / name).write_text(text)
        assert run_pipeline(landing, tmp_path / "wh.duckdb").success
    return answer(tmp_path, "SELECT strftime(BillingPeriodStart, '%Y-%m'), sum(BilledCost) FROM core.cost_lines GROUP BY ALL ORDER BY 1")


def rewrite(tmp_path, first: str, *then: str) -> tuple[list, list]:
    """Run over `first` at latest.csv, rewrite it as each of `then` in turn, running after each:
    the counted total by billing month and the path's versions."""
    counted = land_in_turn(tmp_path, *(("latest.csv", text) for text in (first, *then)))
    return counted, answer(tmp_path, "SELECT status, rows_loaded FROM raw.files WHERE path = 'latest.csv' ORDER BY ingested_at")


@pytest.mark.parametrize("then, status", [
    (HEADER, "loaded"),  # the export job wrote the header before its data
    (HEADER + line("n/a", "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z"), "quarantined"),
], ids=["header only", "every row quarantined"])
def test_a_version_without_lines_leaves_the_one_before_counting(tmp_path, then, status):
    counted, versions = rewrite(tmp_path, SEPTEMBER, then)
    assert counted == [("2026-09", Decimal("100.0000000000"))]  # was: nothing counted, exit 0
    assert versions == [("loaded", 1), (status, 0)]


def test_a_restated_month_at_the_same_path_replaces_it(tmp_path):
    counted, versions = rewrite(tmp_path, SEPTEMBER, HEADER + line("90.00", "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z"))
    assert counted == [("2026-09", Decimal("90.0000000000"))]
    assert versions == [("replaced", 1), ("loaded", 1)]


def test_next_months_invoice_written_over_this_ones_leaves_it_counting(tmp_path):
    """October's invoice at latest.csv, then November's over it: October used to vanish, exit 0."""
    counted, versions = rewrite(tmp_path, BILLED + billed("100.00", "2026-09"), BILLED + billed("5.00", "2026-10"))
    assert counted == [("2026-09", Decimal("100.0000000000")), ("2026-10", Decimal("5.0000000000"))]
    assert versions == [("loaded", 1), ("loaded", 1)]


def test_next_months_invoice_restated_at_the_same_path_replaces_only_itself(tmp_path):
    """September, then October over it, then October restated over that."""
    counted, versions = rewrite(tmp_path, BILLED + billed("100.00", "2026-09"), BILLED + billed("5.00", "2026-10"),
                                BILLED + billed("6.00", "2026-10"))
    assert counted == [("2026-09", Decimal("100.0000000000")), ("2026-10", Decimal("6.0000000000"))]
    assert versions == [("loaded", 1), ("replaced", 1), ("loaded", 1)]


def test_a_version_sharing_a_month_with_the_one_before_replaces_it_whole(tmp_path):
    """A re-export that restates October and drops September is a re-export: September goes (a
    rolling window written to one name loses its oldest month, as before; see the README)."""
    counted, versions = rewrite(tmp_path, BILLED + billed("100.00", "2026-09") + billed("7.00", "2026-10"),
                                BILLED + billed("8.00", "2026-10") + billed("5.00", "2026-11"))
    assert counted == [("2026-10", Decimal("8.0000000000")), ("2026-11", Decimal("5.0000000000"))]
    assert versions == [("replaced", 2), ("loaded", 2)]
    # The run names what stopped counting (before, only raw.files said "replaced by").
    assert run_says(tmp_path) == [("latest.csv", "warning", (
        "the version it replaced billed 1 line it does not hold, charges from 2026-09-01 00:00 to 2026-09-02 00:00 (UTC), "
        "billed 100 USD: they no longer count. A file rewritten at its path replaces its earlier version whole; if it is "
        "a rolling window, give each export its own name (README: Idempotent)"))]


def test_a_restatement_holding_every_charge_before_it_warns_of_nothing(tmp_path):
    rewrite(tmp_path, BILLED + billed("100.00", "2026-09"), BILLED + billed("90.00", "2026-09") + billed("5.00", "2026-10"))
    assert run_says(tmp_path) == []


def test_a_restated_month_with_its_period_stated_replaces_it(tmp_path):
    counted, versions = rewrite(tmp_path, BILLED + billed("100.00", "2026-09"), BILLED + billed("90.00", "2026-09"))
    assert counted == [("2026-09", Decimal("90.0000000000"))]
    assert versions == [("replaced", 1), ("loaded", 1)]


def test_a_good_copy_over_a_broken_download_settles_it(tmp_path):
    """A cut download fails; the whole file lands at its path: the failed version is `replaced`, so
    the checks and the run summary stop naming it every day after."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "latest.csv").write_bytes(SEPTEMBER.encode() + b"1.0,\xe9\n")  # not UTF-8: the run fails it
    run_pipeline(landing, tmp_path / "wh.duckdb")
    (landing / "latest.csv").write_text(SEPTEMBER)
    outcome = run_pipeline(landing, tmp_path / "wh.duckdb")
    assert "raw/files:no_failed_files" not in outcome.warned_checks
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert fetch_all(conn, "SELECT status, rows_loaded FROM raw.files ORDER BY ingested_at") == [("replaced", 0), ("loaded", 1)]
    finally:
        conn.close()


def test_an_earlier_months_bill_sent_again_leaves_the_later_one_counting(tmp_path):
    """September, October over it, then September's bytes again (a re-run export): October stays."""
    counted, versions = rewrite(tmp_path, BILLED + billed("100.00", "2026-09"), BILLED + billed("5.00", "2026-10"),
                                BILLED + billed("100.00", "2026-09"))
    assert counted == [("2026-09", Decimal("100.0000000000")), ("2026-10", Decimal("5.0000000000"))]


GPU_CLOUD = ("Invoice ID,Account ID,Instance ID,Instance Name,Region,GPU Model,GPU Count,Billing Mode,"
             "Start Time,End Time,Hours,Unit Price (per GPU-hour),Amount,Currency\n")


def gpu_cloud(invoice: str, days: int, first_day: int = 2) -> str:
    """`days` one-hour lines of 235.20 USD, one a day from 2026-11-`first_day`."""
    return GPU_CLOUD + "".join(f"{invoice},acc-1,ins-{d},node-{d},eu-1,NVIDIA H100 80GB HBM3,8,On-Demand,"
                               f"2026-11-{d:02d}T00:00:00Z,2026-11-{d:02d}T01:00:00Z,1,29.40,235.20,USD\n"
                               for d in range(first_day, first_day + days))


def test_a_month_to_date_file_then_its_invoice_at_the_same_path_counts_the_invoice(tmp_path):
    """A GPU cloud's month to date without an invoice id, then the month's invoice written over it:
    the invoice restates it (it counted both, 1,176.00, while the rule compared invoice ids)."""
    counted, versions = rewrite(tmp_path, gpu_cloud("", 2), gpu_cloud("INV-NOV", 3))
    assert counted == [("2026-11", Decimal("705.6000000000"))]
    assert versions == [("replaced", 2), ("loaded", 3)]


def test_a_month_to_date_read_in_another_time_zone_is_still_its_month(tmp_path):
    """Days 5-9 of October read with --timezone UTC, then days 5-11 written over them read in
    Europe/Berlin: October starts two hours earlier there, and the exact periods differed, so both
    versions counted (1,200.00 for 700.00). Months are compared give or take a day and a half."""
    landing = tmp_path / "landing"
    landing.mkdir()

    def month_to_date(last_day: int) -> str:
        return GPU_CLOUD + "".join(f",acc-1,ins-{d},node-{d},eu-1,NVIDIA H100 80GB HBM3,8,On-Demand,2026-10-{d:02d}T00:00:00Z,"
                                   f"2026-10-{d:02d}T01:00:00Z,1,12.50,100.00,USD\n" for d in range(5, last_day + 1))

    (landing / "latest.csv").write_text(month_to_date(9))
    assert run_pipeline(landing, tmp_path / "wh.duckdb").success
    (landing / "latest.csv").write_text(month_to_date(11))
    assert run_pipeline(landing, tmp_path / "wh.duckdb", timezone="Europe/Berlin").success
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert fetch_all(conn, "SELECT sum(BilledCost) FROM core.cost_lines") == [(Decimal("700.0000000000"),)]
    finally:
        conn.close()


def test_an_invoice_read_in_another_time_zone_still_bills_its_month_to_date(tmp_path):
    """The month to date (days 2-11) read with --timezone UTC, then week 1's invoice (days 2-8) read
    in Europe/Berlin, where November, the invoice's billing period, starts an hour earlier: the
    invoice still bills the month to date's days, which count once (2,352.00). Matched by billing
    period as well as time, both counted before (3,998.40)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "mtd.csv").write_text(gpu_cloud("", 10))
    assert run_pipeline(landing, tmp_path / "wh.duckdb").success
    (landing / "week-1.csv").write_text(gpu_cloud("INV-W1", 7))
    assert run_pipeline(landing, tmp_path / "wh.duckdb", timezone="Europe/Berlin").success
    assert answer(tmp_path, "SELECT sum(BilledCost) FROM core.cost_lines") == [(Decimal("2352.0000000000"),)]
    assert answer(tmp_path, "SELECT sum(amount_billing) FROM marts.cost_attribution") == [(Decimal("2352.0000000000"),)]


def test_the_same_month_without_then_with_its_period_stated_is_a_restatement(tmp_path):
    """October's lines without BillingPeriodStart, then the same with it: a line without a stated
    period shares every month (both counted, 60.00 for 30.00)."""
    days = [line("10.00", f"2026-10-0{d}T00:00:00Z", f"2026-10-0{d + 1}T00:00:00Z") for d in (1, 2, 3)]
    stated = [row.rstrip("\n") + ",2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,\n" for row in days]
    counted, versions = rewrite(tmp_path, HEADER + "".join(days), BILLED + "".join(stated))
    assert counted == [("2026-10", Decimal("30.0000000000"))]
    assert versions == [("replaced", 3), ("loaded", 3)]


def test_content_replaced_at_one_path_and_sent_again_under_another_keeps_the_runs_going(tmp_path):
    """a.csv and latest.csv hold October's bytes; latest.csv then holds November, a.csv October
    restated, and then latest.csv October's first bytes again. They were read as rows of their own
    into the lake folder of a.csv's replaced version: the money check failed on that run and on
    every run after. Now they are that version's content (a duplicate), and the newest upload of
    October counts."""
    landing = tmp_path / "landing"
    landing.mkdir()
    october = BILLED + billed("100.00", "2026-10")
    steps = [{"a.csv": october, "latest.csv": october}, {"latest.csv": BILLED + billed("5.00", "2026-11")},
             {"a.csv": BILLED + billed("90.00", "2026-10")}, {"latest.csv": october}]
    for files in steps:
        for name, text in files.items():
            (landing / name).write_text(text)
        assert run_pipeline(landing, tmp_path / "wh.duckdb").success
    assert run_pipeline(landing, tmp_path / "wh.duckdb").success  # and the run after
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert fetch_all(conn, "SELECT strftime(BillingPeriodStart, '%Y-%m'), sum(BilledCost) FROM core.cost_lines "
                               "GROUP BY ALL ORDER BY 1") == [("2026-10", Decimal("100.0000000000")),
                                                              ("2026-11", Decimal("5.0000000000"))]
    finally:
        conn.close()


def test_a_month_to_date_file_then_its_invoice_under_another_name_counts_the_invoice(tmp_path):
    """A GPU cloud's month to date (no invoice id) kept as mtd.csv, then the month's invoice landed
    as invoice.csv beside it: the invoice bills the same lines again (both counted, 1,176.00 for 705.60)."""
    assert land_in_turn(tmp_path, ("mtd.csv", gpu_cloud("", 2)), ("invoice.csv", gpu_cloud("INV-NOV", 3))) == [
        ("2026-11", Decimal("705.6000000000"))]
    assert run_says(tmp_path) == [("mtd.csv", "counts in part", (
        "2 of its lines, charges from 2026-11-02 00:00 to 2026-11-03 01:00 (UTC), count through invoice.csv, whose invoice "
        "bills the same resources and times again (lines without an invoice id are the month to date; README: The ledger)"))]


def run_says(tmp_path) -> list[tuple]:
    """What the run's closing lines say of the billing files in tmp_path/wh.duckdb: (path, notice, reason)."""
    from datetime import UTC, datetime

    from pipelines.cli.summary import files_read_since, invoiced_again_counted, run_notices

    since = datetime(2000, 1, 1, tzinfo=UTC)
    return [(n["path"], n["notice"], n["reason"])
            for n in run_notices(files_read_since(tmp_path / "wh.duckdb", since)) + invoiced_again_counted(tmp_path / "wh.duckdb", since)]


def test_a_weeks_invoice_beside_the_month_to_date_takes_its_own_days(tmp_path):
    """The month to date for days 2-11, then the first week's invoice (days 2-8): the invoice
    counts for its lines, the month to date from the 9th (3 + 7 lines of 235.20)."""
    assert land_in_turn(tmp_path, ("mtd.csv", gpu_cloud("", 10)), ("week-1.csv", gpu_cloud("INV-W1", 7))) == [
        ("2026-11", Decimal("2352.0000000000"))]
    assert run_says(tmp_path) == [("mtd.csv", "counts in part", (
        "7 of its lines, charges from 2026-11-02 00:00 to 2026-11-08 01:00 (UTC), count through week-1.csv, whose invoice "
        "bills the same resources and times again (lines without an invoice id are the month to date; README: The ledger)"))]


def test_a_month_to_date_downloaded_after_the_invoice_does_not_add_to_it(tmp_path):
    """The invoice first, then a month to date of the same days landed later: the invoice is final."""
    assert land_in_turn(tmp_path, ("invoice.csv", gpu_cloud("INV-NOV", 3)), ("mtd.csv", gpu_cloud("", 3))) == [
        ("2026-11", Decimal("705.6000000000"))]


def gpu_line(invoice: str, instance: str, start: str, end: str, amount: str) -> str:
    return f"{invoice},acc-1,{instance},{instance},eu-1,NVIDIA H100 80GB HBM3,8,On-Demand,{start},{end},1,29.40,{amount},USD\n"


def test_an_invoice_restates_only_the_lines_it_bills_again(tmp_path):
    """The month to date bills ins-a and ins-b on days 2 and 3 (100.00 each), and a reserved node
    its month ahead (5,000.00). The first invoice bills ins-a's days alone; a credit note then
    refunds 30.00 of ins-b's day 3. Billed: 5,400.00 - 30.00. Before, a rule by days alone dropped
    ins-b's days and the reserved month beside an invoice of other lines."""
    days = [(f"2026-11-0{d}T00:00:00Z", f"2026-11-0{d + 1}T00:00:00Z") for d in (2, 3)]
    month_to_date = GPU_CLOUD + "".join(gpu_line("", i, s, e, "100.00") for i in ("ins-a", "ins-b") for s, e in days) + gpu_line(
        "", "ins-r", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "5000.00")
    invoice = GPU_CLOUD + "".join(gpu_line("INV-A", "ins-a", s, e, "100.00") for s, e in days)
    credit_note = GPU_CLOUD + gpu_line("CN-1", "ins-b", *days[1], "-30.00")
    assert land_in_turn(tmp_path, ("mtd.csv", month_to_date), ("invoice-a.csv", invoice), ("credit-note.csv", credit_note)) == [
        ("2026-11", Decimal("5370.0000000000"))]


def gpu_charge(invoice: str, instance: str, start: str, end: str, hours: int, amount: str, mode: str = "On-Demand",
               currency: str = "USD") -> str:
    return f"{invoice},acc-1,{instance},{instance},eu-1,NVIDIA H100 80GB HBM3,8,{mode},{start},{end},{hours},29.40,{amount},{currency}\n"


def month_so_far(invoice: str, instance: str, start_day: int, end_day: int, amount: str, mode: str = "On-Demand",
                 currency: str = "USD") -> str:
    """One line of `instance` from 2026-11-`start_day` to `end_day` (8 GPUs, its hours stated)."""
    return gpu_charge(invoice, instance, f"2026-11-{start_day:02d}T00:00:00Z", f"2026-11-{end_day:02d}T00:00:00Z",
                      24 * (end_day - start_day), amount, mode, currency)


def counted_lines(tmp_path) -> list[tuple]:
    return answer(tmp_path, "SELECT x_SourceFile, ResourceId, strftime(ChargePeriodStart, '%m-%d'), strftime(ChargePeriodEnd, '%m-%d'), "
                            "BilledCost, EffectiveCost, ConsumedQuantity FROM core.cost_lines ORDER BY ALL")


def test_a_month_so_far_line_counts_the_time_the_weeks_invoice_does_not_bill(tmp_path):
    """The month to date as the bundled mapping describes it, one line per instance for the month
    so far (days 1-12: ins-a 1,100.00, ins-b 550.00), then the first week's invoice (days 1-8:
    ins-a in one line of 700.00, ins-b in two of 200.00, a dearer price than the month to date's).
    Each month-to-date line counts the 4 of its 11 days the invoice does not bill, from the 8th, at
    its own price: 400.00 and 200.00, and 768 of its GPU-hours. Before, both counted (2,450.00 for 1,700.00)."""
    month_to_date = GPU_CLOUD + month_so_far("", "ins-a", 1, 12, "1100.00") + month_so_far("", "ins-b", 1, 12, "550.00")
    week = GPU_CLOUD + month_so_far("INV-W1", "ins-a", 1, 8, "700.00") + month_so_far("INV-W1", "ins-b", 1, 4, "200.00") + (
        month_so_far("INV-W1", "ins-b", 4, 8, "200.00"))
    assert land_in_turn(tmp_path, ("mtd.csv", month_to_date), ("week-1.csv", week)) == [("2026-11", Decimal("1700.0000000000"))]
    assert run_says(tmp_path) == [("mtd.csv", "counts in part", (
        "2 of its lines, charges from 2026-11-01 00:00 to 2026-11-12 00:00 (UTC), count only the time week-1.csv does not bill "
        "yet, at their own price (lines without an invoice id are the month to date; README: The ledger)"))]
    d = Decimal
    assert counted_lines(tmp_path) == [
        ("mtd.csv", "ins-a", "11-08", "11-12", d("400.0000000000"), d("400.0000000000"), d("768.0000000000")),
        ("mtd.csv", "ins-b", "11-08", "11-12", d("200.0000000000"), d("200.0000000000"), d("768.0000000000")),
        ("week-1.csv", "ins-a", "11-01", "11-08", d("700.0000000000"), d("700.0000000000"), d("1344.0000000000")),
        ("week-1.csv", "ins-b", "11-01", "11-04", d("200.0000000000"), d("200.0000000000"), d("576.0000000000")),
        ("week-1.csv", "ins-b", "11-04", "11-08", d("200.0000000000"), d("200.0000000000"), d("768.0000000000"))]


def test_a_month_so_far_line_two_invoices_bill_whole_no_longer_counts(tmp_path):
    """The month so far (days 1-15, 1,400.00) and two weeks' invoices of 700.00 (days 1-8, 8-15),
    landed in any order: the invoices bill all of it."""
    month_to_date = GPU_CLOUD + month_so_far("", "ins-a", 1, 15, "1400.00")
    weeks = [("week-1.csv", GPU_CLOUD + month_so_far("INV-W1", "ins-a", 1, 8, "700.00")),
             ("week-2.csv", GPU_CLOUD + month_so_far("INV-W2", "ins-a", 8, 15, "700.00"))]
    assert land_in_turn(tmp_path, weeks[0], ("mtd.csv", month_to_date), weeks[1]) == [("2026-11", Decimal("1400.0000000000"))]
    assert [line[0] for line in counted_lines(tmp_path)] == ["week-1.csv", "week-2.csv"]


def test_an_invoice_billing_the_middle_of_a_month_so_far_line_leaves_it_its_time(tmp_path):
    """An invoice of days 3-5 (200.00) inside a month-so-far line of days 1-11 (1,000.00): the line
    keeps 800.00 over its own days (the invoice did not bill its start, so the time stays whole)
    and its GPU-hours in proportion (1,920 × 0.8 = 1,536)."""
    month_to_date = GPU_CLOUD + month_so_far("", "ins-a", 1, 11, "1000.00")
    invoice = GPU_CLOUD + month_so_far("INV-7", "ins-a", 3, 5, "200.00")
    assert land_in_turn(tmp_path, ("mtd.csv", month_to_date), ("invoice.csv", invoice)) == [("2026-11", Decimal("1000.0000000000"))]
    d = Decimal
    assert counted_lines(tmp_path)[0] == ("invoice.csv", "ins-a", "11-03", "11-05", d("200.0000000000"), d("200.0000000000"),
                                          d("384.0000000000"))
    assert counted_lines(tmp_path)[1] == ("mtd.csv", "ins-a", "11-01", "11-11", d("800.0000000000"), d("800.0000000000"),
                                          d("1536.0000000000"))


def test_a_month_to_date_saying_pending_beside_its_invoice_counts_once(tmp_path):
    """The month to date with `Pending` in its invoice column, then the invoice of the same lines:
    Pending is no invoice, so the invoice restates the lines (both counted before, 1,176.00 for 705.60)."""
    pending = gpu_cloud("", 2).replace("\n,acc-1", "\nPending,acc-1")
    assert land_in_turn(tmp_path, ("usage.csv", pending), ("invoice.csv", gpu_cloud("INV-NOV", 3))) == [
        ("2026-11", Decimal("705.6000000000"))]


def test_a_month_so_far_line_beside_a_voided_invoice_a_fee_and_another_currency(tmp_path):
    """The month to date (days 1-12) of three nodes: ins-a on demand (1,100.00), ins-b's monthly fee
    (3,000.00 for November) and its on-demand hours (1,100.00), ins-c on demand (1,100.00). Then
    the first week's invoice (days 1-8) bills each charge, ins-c in EUR; a credit note voids ins-a's
    line and a re-issue bills it again at 650.00. Each month-to-date line counts the time no
    invoice bills, once however many bill it, at its own price: ins-a, ins-b's hours and ins-c
    400.00 from the 8th, the fee 23 of its 30 days (2,300.00); the fee and the hours are two
    charges, each billed once. (Subtracting invoice amounts lost ins-a's days 8-12 to the re-issue,
    dropped ins-b's hours for the fee's invoice line, and kept ins-c's days 1-8 twice.)"""
    month_to_date = GPU_CLOUD + month_so_far("", "ins-a", 1, 12, "1100.00") + gpu_charge(
        "", "ins-b", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", 720, "3000.00", mode="Monthly") + month_so_far(
        "", "ins-b", 1, 12, "1100.00") + month_so_far("", "ins-c", 1, 12, "1100.00")
    week = GPU_CLOUD + month_so_far("INV-W1", "ins-a", 1, 8, "700.00") + month_so_far("INV-W1", "ins-b", 1, 8, "700.00", mode="Monthly") + (
        month_so_far("INV-W1", "ins-b", 1, 8, "700.00") + month_so_far("INV-W1", "ins-c", 1, 8, "650.00", currency="EUR"))
    void = GPU_CLOUD + month_so_far("CN-W1", "ins-a", 1, 8, "-700.00")
    reissue = GPU_CLOUD + month_so_far("INV-W1R", "ins-a", 1, 8, "650.00")
    land_in_turn(tmp_path, ("mtd.csv", month_to_date), ("week-1.csv", week), ("void.csv", void), ("reissue.csv", reissue))
    assert answer(tmp_path, "SELECT BillingCurrency, sum(BilledCost) FROM core.cost_lines GROUP BY ALL ORDER BY 1") == [
        ("EUR", Decimal("650.0000000000")), ("USD", Decimal("5550.0000000000"))]
    assert answer(tmp_path, "SELECT ResourceId, SkuId, strftime(ChargePeriodStart, '%m-%d'), BilledCost FROM core.cost_lines "
                            "WHERE x_SourceFile = 'mtd.csv' ORDER BY ALL") == [
        ("ins-a", "H100-80GB-on_demand", "11-08", Decimal("400.0000000000")),
        ("ins-b", "H100-80GB-monthly", "11-08", Decimal("2300.0000000000")),
        ("ins-b", "H100-80GB-on_demand", "11-08", Decimal("400.0000000000")),
        ("ins-c", "H100-80GB-on_demand", "11-08", Decimal("400.0000000000"))]



@pytest.mark.parametrize("first", ["month to date", "invoice"])
def test_a_weeks_invoice_crossing_into_the_next_month_bills_its_month_to_date_days(tmp_path, first):
    """December's month so far (days 1-8, 700.00) and week 5's invoice, one line from November 29
    to December 6 (700.00, its billing period November), in either order: the invoice bills
    December 1-6 of the month to date too, which counts December 6-8 alone (200.00). Before, each
    month was matched and built apart: December kept its 700.00 (1,400.00 for 900.00)."""
    month_to_date = GPU_CLOUD + gpu_charge("", "ins-a", "2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z", 168, "700.00")
    week = GPU_CLOUD + gpu_charge("INV-W5", "ins-a", "2026-11-29T00:00:00Z", "2026-12-06T00:00:00Z", 168, "700.00")
    files = [("mtd-dec.csv", month_to_date), ("week-5.csv", week)]
    assert land_in_turn(tmp_path, *(files if first == "month to date" else files[::-1])) == [
        ("2026-11", Decimal("700.0000000000")), ("2026-12", Decimal("200.0000000000"))]
    d = Decimal
    assert counted_lines(tmp_path) == [
        ("mtd-dec.csv", "ins-a", "12-06", "12-08", d("200.0000000000"), d("200.0000000000"), d("384.0000000000")),
        ("week-5.csv", "ins-a", "11-29", "12-06", d("700.0000000000"), d("700.0000000000"), d("1344.0000000000"))]
    assert answer(tmp_path, "SELECT sum(amount_billing) FROM marts.cost_attribution") == [(d("900.0000000000"),)]


def test_charges_meet_where_they_share_time_not_where_they_touch():
    """The invoice match's test of time (sql/macros.sql): periods are half open, a charge of no
    length is the instant it starts. November's fee ending as December's line begins shares no
    time with it, nor does a one-off charge at that instant (a same-month test hid this before)."""
    import duckdb

    from pipelines.warehouse.connection import SQL_DIR

    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    nov, dec, dec6, dec8 = "2026-11-01", "2026-12-01", "2026-12-06", "2026-12-08"
    cases = [((nov, dec), (dec, dec8), False), ((nov, dec), (dec, None), False), ((nov, dec), (dec, dec), False),
             ((nov, dec6), (dec, dec8), True), ((nov, dec6), (dec, None), True), ((dec, None), (dec, None), True),
             ((dec, None), (nov, dec), False), ((dec6, dec6), (dec, dec8), True), ((dec8, None), (dec, dec8), False)]
    for (a_start, a_end), (b_start, b_end), meet in cases:
        got = conn.execute("SELECT charges_meet(?::TIMESTAMPTZ, ?::TIMESTAMPTZ, ?::TIMESTAMPTZ, ?::TIMESTAMPTZ)",
                           [a_start, a_end, b_start, b_end]).fetchone()[0]
        assert got is meet, (a_start, a_end, b_start, b_end)
