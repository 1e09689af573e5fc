"""The daily report's header figures (sql/queries/report_kpis.sql) on a small bill worked out by hand."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from pipelines.report.daily import SQL_DIR
from pipelines.warehouse.connection import connect, fetch_dicts
from tests.conftest import run_pipeline, smi_minutes

HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
          "ServiceName,ServiceCategory,ResourceId,ResourceName,Tags,x_GpuCount\n")
DAY = "2026-09-01T00:00:00Z,2026-09-02T00:00:00Z"
NEXT_DAY = "2026-09-02T00:00:00Z,2026-09-03T00:00:00Z"
CHARGES = [
    f"384.00,384.00,USD,Usage,{DAY},GpuCloud,GPU,Compute,h-1,h-1,,8",  # busy all day, no workload: unattributed
    f"384.00,384.00,USD,Usage,{DAY},GpuCloud,GPU,Compute,h-2,h-2,,8",  # pretraining 12 h, then idle 12 h
    f'100.00,100.00,USD,Usage,{DAY},GpuCloud,Disk,Storage,vol-1,vol-1,"{{""phase"": ""pretraining""}}",',
    f"50.00,50.00,USD,Tax,{DAY},GpuCloud,Tax,Other,,,,",
    f"10.00,10.00,USD,Usage,{DAY},GpuCloud,,Storage,vol-2,,,",  # no ServiceName: told apart by category
    f"20.00,20.00,USD,Usage,{DAY},GpuCloud,,Networking,lb-1,,,",
    # The next day, billed as well: no figure of a report about the 1st counts it.
    f"384.00,384.00,USD,Usage,{NEXT_DAY},GpuCloud,GPU,Compute,h-1,h-1,,8",
]
WORKLOADS = """workload_id,name,phase,host,gpu_count,started_at,ended_at
pt-1,pt-1,pretraining,h-2,8,2026-09-01T00:00:00Z,2026-09-01T12:00:00Z
"""


def smi(busy_minutes: int) -> str:
    """8 GPUs for a day, at 90 % for the first `busy_minutes`, then 0 %."""
    return smi_minutes(datetime(2026, 9, 1, tzinfo=UTC), 24 * 60, 8, lambda minute, _: 90 if minute < busy_minutes else 0,
                       f"GPU-{busy_minutes}-")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    root = tmp_path_factory.mktemp("kpis")
    landing = root / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(HEADER + "\n".join(CHARGES) + "\n")
    (landing / "jobs.csv").write_text(WORKLOADS)
    (landing / "h-1.csv").write_text(smi(24 * 60))
    (landing / "h-2.csv").write_text(smi(12 * 60))
    assert run_pipeline(landing, root / "wh.duckdb", as_of=date(2026, 9, 3), reporting_currency="USD").success
    conn = connect(root / "wh.duckdb", read_only=True)
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def kpis(warehouse):
    return fetch_dicts(warehouse, (SQL_DIR / "queries" / "report_kpis.sql").read_text(), {"day": date(2026, 9, 1)})[0]


def test_gpu_spend_is_the_money_of_the_gpu_charges_over_their_busy_hours(kpis):
    # Both GPU charges whole (384 + 384), h-1's busy part with no workload included; not the tagged disk
    # (100) in pretraining, the tax (50) nor the nameless lines (30): the month's spend, but no GPU's.
    assert (kpis["month_cost"], kpis["gpu_cost"]) == (Decimal("948.0000000000"), Decimal("768.0000000000"))
    # 8 GPUs × 24 h × 90 % on h-1, 8 × 12 h × 90 % on h-2: the busy hours of those same charges.
    assert kpis["busy_gpu_hours"] == pytest.approx(259.2)
    assert kpis["cost_per_busy_gpu_hour"] == Decimal("2.9629629629")  # 768 / 259.2, truncated at 10^-10
    assert kpis["idle_cost"] == Decimal("192.0000000000")  # h-2's 12 idle hours


def test_the_month_figures_of_a_report_stop_at_its_scored_day(warehouse, kpis):
    """The header and the phases of a report about the 1st leave out the 2nd's bill, which the month's
    row of marts.spend_by_phase holds; a report about the 2nd (the last day billed) shows that row."""
    def phases(day):
        rows = fetch_dicts(warehouse, (SQL_DIR / "queries" / "report_spend_by_phase.sql").read_text(),
                           {"first_day": date(2026, 9, 1), "last_day": day})
        return {r["phase"]: r for r in rows}

    month = {r["phase"]: r for r in fetch_dicts(warehouse, """
        SELECT phase, reporting_currency, cost_reporting, share_pct, gpu_hours_paid, gpu_hours_busy, utilization_pct,
               typical_util_pct_low, typical_util_pct_high, typical_share_pct_low, typical_share_pct_high,
               cost_per_busy_gpu_hour, cost_by_billing_currency
        FROM marts.spend_by_phase WHERE period = '2026-09'""")}
    assert phases(date(2026, 9, 2)) == month
    first = phases(date(2026, 9, 1))
    assert sum(r["cost_reporting"] for r in first.values()) == kpis["mtd"] == Decimal("948.0000000000")
    assert sum(r["cost_reporting"] for r in month.values()) == Decimal("1332.0000000000")
    # h-1's second day, with no telemetry, is all the difference, in one phase and in its paid hours.
    differs = {p for p in month if month[p]["cost_reporting"] != first[p]["cost_reporting"]}
    assert len(differs) == 1 and month[differs.pop()]["gpu_hours_paid"] - 192 in {r["gpu_hours_paid"] for r in first.values()}
    second = fetch_dicts(warehouse, (SQL_DIR / "queries" / "report_kpis.sql").read_text(), {"day": date(2026, 9, 2)})[0]
    assert (second["month_cost"], second["gpu_cost"], second["paid_gpu_hours"]) == (
        Decimal("1332.0000000000"), Decimal("1152.0000000000"), 576.0)
    assert kpis["paid_gpu_hours"] == 384.0


@pytest.mark.parametrize("table", ["marts.daily_cost_by_billing_month", "marts.daily_cost"])
def test_the_daily_cost_grain_names_the_service_category(warehouse, table):
    from pipelines.warehouse.table_docs import load_docs

    # Lines without a ServiceName are one row per category: the category is all that says what they are.
    rows = warehouse.execute(f"""SELECT service_category, cost_billing, cost_reporting FROM {table}
                                 WHERE service_name IS NULL ORDER BY service_category""").fetchall()
    assert rows == [("Networking", Decimal("20.0000000000"), Decimal("20.0000000000")),
                    ("Storage", Decimal("10.0000000000"), Decimal("10.0000000000"))]
    # ... and the documented grain, category included, is the table's key.
    grain = load_docs().tables[table].grain
    assert "service category × service" in grain
    key = ["day", "provider", "sub_account_id", "service_category", "service_name", "phase", "billing_currency"]
    key += ["billing_period_start"] if "billing month" in grain else []
    duplicates = f"SELECT count(*) FROM (SELECT {', '.join(key)} FROM {table} GROUP BY ALL HAVING count(*) > 1)"
    assert warehouse.execute(duplicates).fetchall() == [(0,)]


def test_the_cost_per_busy_gpu_hour_says_when_busy_hours_are_unknown():
    """GPU charges without telemetry for them: the note said 'over — busy of 8 paid GPU-hours'."""
    from pipelines.report.daily import gpu_hours_note

    k = {"gpu_cost": Decimal("13.00"), "paid_gpu_hours": 8.0, "busy_gpu_hours": None, "day": date(2024, 10, 2)}
    assert gpu_hours_note(k, "USD") == ("GPU spend 13.00 USD over 8 paid GPU-hours, Oct 1–2; busy hours unknown: "
                                        "no GPU telemetry for them")
    assert gpu_hours_note({**k, "busy_gpu_hours": 2.5}, "USD") == "GPU spend 13.00 USD over 2 busy of 8 paid GPU-hours, Oct 1–2"
    assert gpu_hours_note({**k, "busy_gpu_hours": 2.5, "dark_gpu_hours": 4.0}, "USD") == (
        "GPU spend 13.00 USD over 2 busy of 8 paid GPU-hours, Oct 1–2; 4 of the paid hours had no telemetry: their spend "
        "is in it, their busy hours unknown, so the figure is high")
    assert gpu_hours_note({**k, "gpu_cost": None, "paid_gpu_hours": None}, "USD") == "no GPU charge billed, Oct 1–2"


def test_the_forecast_waits_for_bills_not_yet_arrived(warehouse):
    """Billed through the 2nd (948.00, then 384.00). A report about the 4th used to count the 3rd and 4th
    as days of no spend in the run rate (1,332.00 over 4 days) and as days already past: its forecast
    fell (9,990.00) though no bill had changed. Now every report until a new bill forecasts alike: the
    mean of the billed days (666.00) for each of the 28 days after the last one."""
    def kpis(day):
        return fetch_dicts(warehouse, (SQL_DIR / "queries" / "report_kpis.sql").read_text(), {"day": day})[0]

    for day in (date(2026, 9, 2), date(2026, 9, 3), date(2026, 9, 4)):
        k = kpis(day)
        assert (k["mtd"], k["run_rate_per_day"], k["run_rate_days"], k["days_left"], k["forecast"]) == (
            Decimal("1332.0000000000"), Decimal("666.0000000000"), 2, 28, Decimal("19980.0000000000")), day
        assert k["last_billed"] == date(2026, 9, 2)
    # A report about the 1st, when the 2nd is billed too, forecasts from the 1st (its scored day).
    first = kpis(date(2026, 9, 1))
    assert (first["run_rate_per_day"], first["days_left"], first["forecast"]) == (
        Decimal("948.0000000000"), 29, Decimal("948.0000000000") * 30)


def test_the_paid_gpu_hours_no_telemetry_covered_are_counted(warehouse, kpis):
    """h-1's second day reports no telemetry: its 384.00 is GPU spend over none of its busy hours."""
    second = fetch_dicts(warehouse, (SQL_DIR / "queries" / "report_kpis.sql").read_text(), {"day": date(2026, 9, 2)})[0]
    assert (kpis["dark_gpu_hours"], second["dark_gpu_hours"]) == (None, 192.0)
