"""Oracle writes a tenancy's charges twice into its reports bucket: the cost reports
(`reports/cost-csv/`, a file every six hours) and the FOCUS reports (`FOCUS Reports/YYYY/MM/DD/`,
where the billing account is the subscription and the tenancy the sub-account). A bucket synced
whole holds both: each tenancy and UTC day counts through one form (core.billing_lines).

The cost report is the public sample (506 lines, 2023-11-13 05:00-12:00 UTC, 2.52 USD); its FOCUS
form is written here line for line as Oracle's FOCUS Cost Report Schema maps it."""

import csv
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipelines.cli.main import app
from pipelines.warehouse.connection import connect, fetch_all, fetch_dicts
from tests.conftest import sample

OCI = "billing/oci_cost_report_focusconverters_fixture.csv"
OWN = "reports/cost-csv/0001000000123456.csv"
OTHER_TENANCY = "ocid1.tenancy.oc1..bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
MICRO = Decimal("0.000001")
FOCUS_COLUMNS = ["ProviderName", "BillingAccountId", "SubAccountId", "BillingPeriodStart", "BillingPeriodEnd",
                 "ChargePeriodStart", "ChargePeriodEnd", "BilledCost", "EffectiveCost", "BillingCurrency",
                 "ChargeCategory", "ServiceName", "ResourceId", "SkuId", "PricingQuantity", "PricingUnit"]


def own_rows() -> list[dict]:
    with open(sample(OCI), newline="") as fh:
        return list(csv.DictReader(fh))


def own_total(rows: list[dict] | None = None) -> Decimal:
    return sum((Decimal(r["cost/myCost"]) for r in rows or own_rows()), Decimal(0))


def utc(stamp: str) -> str:
    """OCI writes `2023-11-13T10:00Z`; FOCUS reports `2023-11-13T10:00:00Z`."""
    return stamp[:-1] + ":00Z" if len(stamp) == 17 else stamp


def focus_row(row: dict, tenancy: str | None = None, day: str | None = None, cost: str | None = None) -> list[str]:
    """One cost report line in Oracle's FOCUS form (BillingAccountId ← cost/subscriptionId,
    SubAccountId ← lineItem/tenantId), moved to another day of November where `day` says."""
    start, end = utc(row["lineItem/intervalUsageStart"]), utc(row["lineItem/intervalUsageEnd"])
    if day:
        start, end = f"2023-11-{day}" + start[10:], f"2023-11-{day}" + end[10:]
    amount = cost or row["cost/myCost"]
    return ["Oracle", row["cost/subscriptionId"], tenancy or row["lineItem/tenantId"], "2023-11-01T00:00:00Z",
            "2023-12-01T00:00:00Z", start, end, amount, amount, row["cost/currencyCode"], "Usage",
            row["product/service"], row["product/resourceId"], row["cost/productSku"], "1", "Hours"]


def write_focus(landing: Path, day: str, rows: list[list[str]], folder: str = "") -> str:
    rel = f"{folder}FOCUS Reports/2023/11/{day}/0001000000{day}0001.csv"
    (landing / rel).parent.mkdir(parents=True, exist_ok=True)
    with open(landing / rel, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(FOCUS_COLUMNS)
        writer.writerows(rows)
    return rel


def write_own(landing: Path, rel: str, rows: list[dict]) -> None:
    (landing / rel).parent.mkdir(parents=True, exist_ok=True)
    with open(landing / rel, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def run(tmp_path: Path, landing: Path, monkeypatch) -> str:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    args = ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--reports", str(tmp_path / "reports")]
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output[-2000:]
    return result.output


def counted(tmp_path: Path) -> tuple[Decimal, dict]:
    """core.cost_lines' total, and its lines by connector."""
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        total = fetch_all(conn, "SELECT sum(EffectiveCost) FROM core.cost_lines")[0][0]
        by_form = dict(fetch_all(conn, "SELECT x_Connector, count(*) FROM core.cost_lines GROUP BY ALL"))
    finally:
        conn.close()
    return total.quantize(MICRO), by_form


def test_a_day_in_both_forms_counts_once_through_the_cost_reports(tmp_path, monkeypatch):
    """Both forms reach 12:00 on the 13th: the cost reports count; the FOCUS report's lines are
    loaded (the run says where they count) and not added."""
    landing = tmp_path / "landing"
    (landing / OWN).parent.mkdir(parents=True)
    shutil.copy(sample(OCI), landing / OWN)
    rows = own_rows()
    focus = write_focus(landing, "13", [focus_row(r) for r in rows])
    output = run(tmp_path, landing, monkeypatch)
    assert counted(tmp_path) == (own_total().quantize(MICRO), {"oci_cost": 506}) == (Decimal("2.523589"), {"oci_cost": 506})
    assert (f"counts in part: {focus} — its lines of 7 hours from 2023-11-13 05:00 to 2023-11-13 11:00 (UTC) count "
            f"through Oracle's cost reports of tenancy {rows[0]['lineItem/tenantId']}") in output, output[-3000:]
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert fetch_dicts(conn, "SELECT status FROM raw.files WHERE path = ?", [focus]) == [{"status": "loaded"}]
    finally:
        conn.close()


@pytest.mark.parametrize("first", ["cost reports", "FOCUS reports"])
def test_a_sync_moved_mid_month_counts_every_day_once(tmp_path, monkeypatch, first):
    """Days 13 and 14 in one form, 14 (again) and 15 in the other, as when a sync moves from
    `reports/cost-csv/` to `FOCUS Reports/` (or back): every day counts, day 14 once."""
    landing = tmp_path / "landing"
    rows = own_rows()
    moved = [{**r, "lineItem/referenceNo": r["lineItem/referenceNo"] + "-14",
              "lineItem/intervalUsageStart": "2023-11-14" + r["lineItem/intervalUsageStart"][10:],
              "lineItem/intervalUsageEnd": "2023-11-14" + r["lineItem/intervalUsageEnd"][10:]} for r in rows]
    if first == "cost reports":
        write_own(landing, "reports/cost-csv/0001000000000001.csv", rows)
        write_own(landing, "reports/cost-csv/0001000000000002.csv", moved)
        write_focus(landing, "14", [focus_row(r, day="14") for r in rows])
        write_focus(landing, "15", [focus_row(r, day="15", cost="1.00") for r in rows[:3]])
        expected_forms = {"oci_cost": 1012, "focus": 3}
    else:
        write_focus(landing, "13", [focus_row(r) for r in rows])
        write_focus(landing, "14", [focus_row(r, day="14") for r in rows])
        write_own(landing, "reports/cost-csv/0001000000000001.csv", moved)
        write_own(landing, "reports/cost-csv/0001000000000002.csv",
                  [{**r, "lineItem/referenceNo": r["lineItem/referenceNo"] + "-15", "cost/myCost": "1.00",
                    "lineItem/intervalUsageStart": "2023-11-15" + r["lineItem/intervalUsageStart"][10:],
                    "lineItem/intervalUsageEnd": "2023-11-15" + r["lineItem/intervalUsageEnd"][10:]} for r in rows[:3]])
        expected_forms = {"focus": 506, "oci_cost": 509}
    run(tmp_path, landing, monkeypatch)
    assert counted(tmp_path) == ((2 * own_total() + 3).quantize(MICRO), expected_forms)


def test_each_hour_counts_through_the_form_holding_more_of_its_lines(tmp_path, monkeypatch):
    """The cost reports hold the 13th up to 07:00 (the next one not yet delivered) and one line
    of 10:00 that arrived late; the FOCUS report holds the whole day. Each hour counts through the
    form with more of its lines: 05:00-07:00 the cost reports (a tie), 07:00-12:00 the FOCUS
    report, so nothing of the day is lost or counted twice."""
    landing = tmp_path / "landing"
    rows = own_rows()
    early = [r for r in rows if r["lineItem/intervalUsageStart"] < "2023-11-13T07"]
    late = next(r for r in rows if r["lineItem/intervalUsageStart"].startswith("2023-11-13T10"))
    assert 0 < len(early) < len(rows)
    write_own(landing, OWN, [*early, late])
    write_focus(landing, "13", [focus_row(r) for r in rows])
    output = run(tmp_path, landing, monkeypatch)
    assert counted(tmp_path) == (own_total().quantize(MICRO), {"oci_cost": len(early), "focus": 506 - len(early)})
    assert f"counts in part: {OWN} — its lines of 2023-11-13 10:00 (UTC) count through Oracle's FOCUS reports" in output


def test_tenancies_sharing_a_subscription_each_count(tmp_path, monkeypatch):
    """Two tenancies of one subscription: tenancy A's cost reports, tenancy B's FOCUS reports (the
    same subscription as billing account). Neither form stands for the other tenancy."""
    landing = tmp_path / "landing"
    rows = own_rows()
    write_own(landing, "tenancy-a/" + OWN, rows)
    write_focus(landing, "13", [focus_row(r, tenancy=OTHER_TENANCY, cost="0.01") for r in rows], folder="tenancy-b/")
    run(tmp_path, landing, monkeypatch)
    assert counted(tmp_path) == ((own_total() + Decimal("5.06")).quantize(MICRO), {"oci_cost": 506, "focus": 506})


def test_two_tenancies_focus_reports_of_one_subscription_both_count(tmp_path, monkeypatch):
    """Each tenancy's bucket holds its own `FOCUS Reports/`, and both state the subscription they
    share as billing account: two day files of the 13th, one a tenancy, are no restatement of
    each other (one superseded the other before)."""
    landing = tmp_path / "landing"
    rows = own_rows()
    write_focus(landing, "13", [focus_row(r) for r in rows], folder="tenancy-a/")
    write_focus(landing, "13", [focus_row(r, tenancy=OTHER_TENANCY, cost="0.01") for r in rows], folder="tenancy-b/")
    output = run(tmp_path, landing, monkeypatch)
    assert counted(tmp_path) == ((own_total() + Decimal("5.06")).quantize(MICRO), {"focus": 1012})
    assert "superseded" not in output
