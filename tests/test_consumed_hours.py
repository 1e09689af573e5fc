"""A GPU charge pays for the GPU-hours its consumed quantity says ran, not always its whole period.

A CUR bills an instance by the hour, and an hour it ran 41 minutes of is a line of that hour with
ConsumedQuantity 0.684 Hrs and 0.684 of the hourly price. Counting the whole hour as paid booked the
19 minutes it did not run as idle GPUs (in marts.cost_attribution, the dark-charge finding and the
report's paid GPU-hours) and priced its GPU-hour at 0.684 of the rate.

Charges (USD, FOCUS columns, no telemetry anywhere):
- gpu-half: 8 H100s, 10:00-11:00, ran 0.5 Hours, 49.00; a pre-training job held all 8 from 10:00 to
  10:30: all 49.00 is pre-training, nothing idle (before: 24.50 idle).
- gpu-quarter: 1 GPU, 10:00-11:00, ran 0.25 Hours, 0.50, nobody held it: 0.50 idle over 0.25 GPU-hours.
- gpu-day: a GPU cloud's day of 8 GPUs billed as 192 GPU-Hours, 192.00, a fine-tuning job held all 8
  for 12 hours: half fine-tuning, half idle, as before (the quantity names the GPU-hours themselves).
- gpu-units: 1 GPU, a day of a meter counted in blocks of '10 Hours', 1.2 blocks of it (12 hours),
  24.00, nobody held it: 24.00 idle over 12 GPU-hours.
"""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import duckdb
import pytest

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline, warehouse_from_files

SQL_DIR = __import__("pathlib").Path(__file__).resolve().parent.parent / "sql"

HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
          "ServiceName,ServiceCategory,ResourceId,ResourceName,ConsumedQuantity,ConsumedUnit,x_GpuModel,x_GpuCount\n")
CHARGES = HEADER + (
    "49.00,49.00,USD,Usage,2026-09-01T10:00:00Z,2026-09-01T11:00:00Z,AWS,EC2,Compute,i-half,gpu-half,0.5,Hours,H100,8\n"
    "0.50,0.50,USD,Usage,2026-09-01T10:00:00Z,2026-09-01T11:00:00Z,AWS,EC2,Compute,i-quarter,gpu-quarter,0.25,Hours,H100,1\n"
    "192.00,192.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,ins-day,gpu-day,192,GPU-Hours,H100,8\n"
    "24.00,24.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,Microsoft,VM,Compute,vm-units,gpu-units,1.2,10 Hours,H100,1\n")
WORKLOADS = """workload_id,phase,host,gpu_count,started_at,ended_at
pt-1,pretraining,gpu-half,8,2026-09-01T10:00:00Z,2026-09-01T10:30:00Z
ft-1,finetuning,gpu-day,8,2026-09-01T00:00:00Z,2026-09-01T12:00:00Z
"""


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    return warehouse_from_files(tmp_path_factory.mktemp("consumed"), {"charges.csv": CHARGES, "jobs.csv": WORKLOADS},
                                reporting_currency="USD")


def query(warehouse, sql):
    conn = connect(warehouse, read_only=True)
    try:
        return fetch_all(conn, sql)
    finally:
        conn.close()


def test_a_charge_splits_the_gpu_hours_it_ran_not_its_whole_period(warehouse):
    parts = query(warehouse, """SELECT c.ResourceName, a.phase, a.amount_billing, a.gpu_seconds, a.total_weight
                                FROM marts.cost_attribution AS a JOIN core.cost_lines AS c USING (x_ChargeId)
                                ORDER BY 1, 2""")
    assert parts == [
        ("gpu-day", "finetuning", Decimal("96.00"), 345600, 691200),
        ("gpu-day", "idle", Decimal("96.00"), 345600, 691200),
        ("gpu-half", "pretraining", Decimal("49.00"), 14400, 14400),
        ("gpu-quarter", "idle", Decimal("0.50"), 900, 900),
        ("gpu-units", "idle", Decimal("24.00"), 43200, 43200),
    ]


def test_a_gpu_hour_is_priced_at_what_its_running_time_cost(warehouse):
    prices = dict(query(warehouse, "SELECT host, price_per_gpu_hour FROM marts.gpu_hour_prices"))
    assert prices == {"gpu-half": Decimal("12.25"), "gpu-quarter": Decimal("2.00"),
                      "gpu-day": Decimal("1.00"), "gpu-units": Decimal("2.00")}
    # Per hour of the clock, what the hour cost (over-provisioned inference counts GPUs per clock hour).
    clock = dict(query(warehouse, "SELECT host, price_per_gpu_clock_hour FROM marts.gpu_hour_prices"))
    assert clock == {"gpu-half": Decimal("6.125"), "gpu-quarter": Decimal("0.50"),
                     "gpu-day": Decimal("1.00"), "gpu-units": Decimal("1.00")}


def test_a_dark_charge_held_for_all_it_ran_is_no_leak(warehouse):
    found = query(warehouse, """SELECT host, wasted_cost FROM findings.unused_gpu
                                WHERE subkind = 'no_telemetry' ORDER BY host""")
    # gpu-half ran 30 minutes and its job held all of them; gpu-day's idle half is the attribution's.
    assert found == [("gpu-day", Decimal("96.00")), ("gpu-quarter", Decimal("0.50")), ("gpu-units", Decimal("24.00"))]


def test_paid_gpu_hours_by_the_hour_follow_what_ran(warehouse):
    paid = dict(query(warehouse, """SELECT hour, sum(DISTINCT gpus_paid) FROM marts.gpu_hours_profile
                                    WHERE hour = TIMESTAMPTZ '2026-09-01 10:00:00+00' GROUP BY hour"""))
    # gpu-half's 4 GPU-hours, gpu-quarter's 0.25, gpu-day's 8 and gpu-units' 0.5 in that hour.
    assert list(paid.values()) == [pytest.approx(12.75)]


@pytest.mark.parametrize(("unit", "seconds"), [
    ("Hours", 3600), ("Hrs", 3600), ("hour", 3600), ("1 Hour", 3600), ("10 Hours", 36000), ("100 Hours", 360000), ("0.5 Hours", 1800), ("10Hours", 36000),
    ("GPU-Hours", 3600), ("GPU Per Hour", 3600), ("seconds", 1), ("Minutes", 60), ("Days", 86400),
    ("GB", None), ("Instance-Hours", None), ("OCPU Per Hour", None), (None, None),
])
def test_time_units_in_seconds(unit, seconds):
    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    got = conn.execute("SELECT time_unit_seconds(?)", [unit]).fetchone()[0]
    assert (None if got is None else int(got)) == seconds


@pytest.mark.parametrize(("gpus", "quantity", "unit", "paid"), [
    (8, "0.684", "Hrs", 19699),          # 8 GPUs for 0.684 h
    (8, "6", "GPU-Hours", 21600),        # the quantity counts GPU-hours already
    (8, "3", "Hours", 28800),            # three instances on one line: never more than the period
    (8, None, "Hours", 28800),           # no quantity: the whole period
    (8, "0", "Hours", 28800),            # nothing consumed says nothing: the whole period, as before
    (8, "0.5", "GB", 28800),             # not a time: the whole period
    (1, "0.05", "10 Hours", 1800),       # a twentieth of a block of ten hours: half an hour
    (1, "0.00001", "Hours", 1),          # a trace of a second is one, never a zero to divide by
    (8, "1000000000000000", "Hours", 28800),  # an absurd quantity is the whole period, not an overflow
])
def test_paid_gpu_seconds(gpus, quantity, unit, paid):
    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    got = conn.execute("""SELECT paid_gpu_seconds(?, TIMESTAMPTZ '2026-09-01 10:00:00+00', TIMESTAMPTZ '2026-09-01 11:00:00+00',
                                                   CAST(? AS DECIMAL(28, 10)), ?)""", [gpus, quantity, unit]).fetchone()[0]
    assert got == paid


def test_a_credit_without_a_quantity_pays_for_what_its_charge_ran(tmp_path):
    """A credit refunding gpu-half's hour states no quantity: it pays for the half hour the charge
    ran, as the charge does, so the refunded hour nets to nothing in every phase (paying for the
    whole hour, it left -24.50 idle and +24.50 pre-training) and its GPU-hour is priced at 0."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(HEADER + CHARGES.splitlines(keepends=True)[1]
                                         + "-49.00,-49.00,USD,Credit,2026-09-01T10:00:00Z,2026-09-01T11:00:00Z,AWS,EC2,Compute,"
                                           "i-half,gpu-half,,,H100,8\n")
    (landing / "jobs.csv").write_text(WORKLOADS)
    assert run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD").success
    net = query(tmp_path / "wh.duckdb", "SELECT phase, sum(amount_billing) FROM marts.cost_attribution GROUP BY ALL ORDER BY 1")
    assert net == [("pretraining", Decimal("0.00"))]
    assert query(tmp_path / "wh.duckdb", "SELECT host, price_per_gpu_hour, price_per_gpu_clock_hour FROM marts.gpu_hour_prices") == [
        ("gpu-half", Decimal("0.00"), Decimal("0.00"))]


def land_with_months_credits(landing, usage: list[str], resources: str, *jobs: str) -> None:
    """charges.csv: the usage lines and a 100.00 credit for September on each of ins-<r> (no quantity);
    jobs.csv: the workload rows."""
    credits = [f"-100.00,-100.00,USD,Credit,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,GpuCloud,GPU,Compute,ins-{r},gpu-{r},,,H100,8\n"
               for r in resources]
    (landing / "charges.csv").write_text(HEADER + "".join(usage + credits))
    (landing / "jobs.csv").write_text("workload_id,phase,host,gpu_count,started_at,ended_at\n" + "".join(j + "\n" for j in jobs))


def land_a_months_credit(landing) -> None:
    """ins-a and ins-b billed by the day on 1 and 2 September, each credited 100.00 for the month;
    jobs on ins-a only (test_a_months_credit_pays_for_the_days_its_instance_was_billed)."""
    landing.mkdir()
    lines = [f"384.00,384.00,USD,Usage,2026-09-0{d}T00:00:00Z,2026-09-0{d + 1}T00:00:00Z,GpuCloud,GPU,Compute,ins-{i},gpu-{i},"
             f"192,GPU-Hours,H100,8\n" for i in "ab" for d in (1, 2)]
    land_with_months_credits(landing, lines, "ab", "pt-1,pretraining,gpu-a,8,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z",
                             "ft-1,finetuning,gpu-a,8,2026-09-02T00:00:00Z,2026-09-03T00:00:00Z")


def test_a_months_credit_pays_for_the_days_its_instance_was_billed(tmp_path):
    """A GPU cloud bills ins-a and ins-b (8 GPUs each) a day at a time, 384.00 on 1 and 2 September,
    and credits each 100.00 for the month in one line with no quantity. ins-a ran a pre-training job
    on the 1st and a fine-tuning job on the 2nd; nothing ran on ins-b, and no telemetry came. The
    credit pays for the two days billed: 334.00 a phase on ins-a, ins-b's 668.00 idle and its leak,
    a GPU-hour at 334/192. Spread over the month's 30 days, it put 93.33 of each credit in `idle`
    as negative money, priced the hours at 1.98 and left ins-b's leak at 761.33."""
    landing = tmp_path / "landing"
    land_a_months_credit(landing)
    assert run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD").success
    warehouse = tmp_path / "wh.duckdb"
    assert query(warehouse, """SELECT c.ResourceId, a.phase, sum(a.amount_billing) FROM marts.cost_attribution AS a
                               JOIN core.cost_lines AS c USING (x_ChargeId) GROUP BY ALL ORDER BY ALL""") == [
        ("ins-a", "finetuning", Decimal("334.0000000000")), ("ins-a", "pretraining", Decimal("334.0000000000")),
        ("ins-b", "idle", Decimal("668.0000000000"))]
    assert query(warehouse, "SELECT DISTINCT host, price_per_gpu_hour FROM marts.gpu_hour_prices ORDER BY 1") == [
        ("gpu-a", Decimal("1.7395833333")), ("gpu-b", Decimal("1.7395833333"))]
    assert query(warehouse, "SELECT resource, wasted_cost FROM findings.hidden_costs WHERE subkind = 'no_telemetry'") == [
        ("ins-b", Decimal("668.000000"))]


def test_a_months_credit_counts_overlapping_and_straddling_usage_once(tmp_path):
    """Two instances, each credited 100.00 for September in a line with no quantity.
    ins-c: 48 hourly lines (16.00, 8 GPUs) and daily lines of the same two days (100.00): the
    credit pays for the two days once (48 h of 8 GPUs; adding the lines' periods up made it 96 h,
    its split -25/-75 and its price -50), so -50.00 a phase: day 1's pre-training job, day 2 idle.
    ins-f: daily lines billed noon to noon from 31 August (384.00 each): the credit pays for the
    60 hours of them inside September, its 100.00 priced over those hours alone (1.7916666666 a
    GPU-hour; counting only the days wholly inside took 125.00 off the prices)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    def usage(resource, cost, start, hours):
        return (f"{cost},{cost},USD,Usage,{start:%Y-%m-%dT%H:%M:%SZ},{start + timedelta(hours=hours):%Y-%m-%dT%H:%M:%SZ},"
                f"GpuCloud,GPU,Compute,ins-{resource},gpu-{resource},,,H100,8\n")
    first = datetime(2026, 9, 1, tzinfo=UTC)
    lines = [usage("c", "16.00", first + timedelta(hours=h), 1) for h in range(48)]
    lines += [usage("c", "100.00", first + timedelta(days=d), 24) for d in range(2)]
    lines += [usage("f", "384.00", first - timedelta(hours=12) + timedelta(days=d), 24) for d in range(3)]
    land_with_months_credits(landing, lines, "cf", "pt-c,pretraining,gpu-c,8,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z",
                             "pt-f,pretraining,gpu-f,8,2026-08-31T12:00:00Z,2026-09-03T12:00:00Z")
    assert run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD").success
    warehouse = tmp_path / "wh.duckdb"
    assert query(warehouse, """SELECT c.ResourceId, a.phase, sum(a.amount_billing) FROM marts.cost_attribution AS a
                               JOIN core.cost_lines AS c USING (x_ChargeId) WHERE c.ChargeCategory = 'Credit'
                               GROUP BY ALL ORDER BY ALL""") == [
        ("ins-c", "idle", Decimal("-50.0000000000")), ("ins-c", "pretraining", Decimal("-50.0000000000")),
        ("ins-f", "pretraining", Decimal("-100.0000000000"))]
    # The credit's money in the prices: what each stretch's price lost to it, over its GPU-hours.
    assert query(warehouse, """SELECT host, round(sum((price_per_gpu_hour - usage_price_per_gpu_hour) * gpu_count
                                                    * datediff('second', period_start, period_end) / 3600), 2),
                                      min(price_per_gpu_hour)
                               FROM marts.gpu_hour_prices GROUP BY host ORDER BY host""") == [
        ("gpu-c", Decimal("-100.00"), Decimal("2.2604166666")), ("gpu-f", Decimal("-100.00"), Decimal("1.7916666666"))]


@pytest.mark.parametrize(("usage_tags", "credit_phase"), [
    (['{"phase": "pretraining"}', '{"phase": "pretraining"}'], "pretraining"),
    (['{"phase": "pretraining"}', '{"phase": "inference"}'], "idle"),  # tags disagree: split as the charge
    (['{"phase": "pretraining"}', ""], "idle"),                          # one usage line untagged: no tag to follow
])
def test_an_untagged_refund_of_a_tagged_vms_usage_gives_back_that_phases_money(tmp_path, usage_tags, credit_phase):
    """An Azure VM tagged for pre-training, no telemetry or workloads, refunded 300.00 with an untagged
    line of the same day: the refund was booked as negative idle (an idle share of -2.3 %, pre-training
    at 101.7 % of spend in the report)."""
    header = HEADER.rstrip("\n") + ",Tags\n"
    day = "2026-09-01T00:00:00Z,2026-09-02T00:00:00Z"
    usage = "".join(f'400.00,400.00,USD,Usage,{day},Microsoft,VM,Compute,vm-{n},gpu-vm,,,A100,8,"{tag.replace(chr(34), chr(34) * 2)}"\n'
                    for n, tag in enumerate(usage_tags))
    credit = f'-300.00,-300.00,USD,Credit,{day},Microsoft,VM,Compute,vm-0,gpu-vm,,,A100,8,\n'
    if credit_phase == "idle":  # one resource whose lines disagree, rather than two resources
        usage = usage.replace("vm-1", "vm-0")
    warehouse = warehouse_from_files(tmp_path, {"charges.csv": header + usage + credit})
    parts = query(warehouse, """SELECT a.phase, a.method, sum(a.amount_billing) FROM marts.cost_attribution AS a
                                JOIN core.cost_lines AS c USING (x_ChargeId) WHERE c.ChargeCategory = 'Credit' GROUP BY ALL""")
    assert parts == [(credit_phase, "tag" if credit_phase != "idle" else "no_workload", Decimal("-300.00"))]
