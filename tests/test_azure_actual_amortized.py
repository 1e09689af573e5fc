"""Azure actual-cost and amortized-cost exports of one scope merge into one FOCUS row per charge:
BilledCost from actual, EffectiveCost from amortized, in one run or across runs, in either order.

The finops-toolkit samples are one Microsoft demo scope (EA 8611537, September 2023). Microsoft's
own totals are the files' sums: billed 8.5450077867 (actual), effective 16.2969321366 (amortized).
Ten usage charges are in both files, the reservation purchase only in actual, 18 charges only in
amortized: 29 charges.
"""

import csv
import json
import shutil
from decimal import Decimal

import pytest

from connectors.azure_cost import dataset_of
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline, sample

ACTUAL = "billing/azure_ea_actual_cost_finopstoolkit.csv"
AMORTIZED = "billing/azure_ea_amortized_cost_finopstoolkit.csv"
# Neutral names: the dataset must come from the rows, not from the file name.
NAMES = {ACTUAL: "sept/export-1.csv", AMORTIZED: "sept/export-2.csv"}
BILLED, EFFECTIVE, CHARGES = Decimal("8.5450077867"), Decimal("16.2969321366"), 29


def load(tmp_path, *runs):
    """Each run: the files that land before it; the warehouse is kept between runs."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    for files in runs:
        for name in files:
            target = landing / NAMES.get(name, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(sample(name) if name in NAMES else tmp_path / name, target)
        assert run_pipeline(landing, warehouse).success
    return connect(warehouse, read_only=True)


def totals(conn):
    return fetch_all(conn, """
        SELECT sum(BilledCost), sum(EffectiveCost), count(*) FROM core.cost_lines WHERE ProviderName = 'Microsoft'""")[0]


def assert_providers_totals(conn):
    """The provider's totals, exactly: money keeps the files' 10 decimals."""
    assert totals(conn) == (BILLED, EFFECTIVE, CHARGES)


def twins(conn):
    """Charges that appear more than once (the merge left both halves)."""
    return fetch_all(conn, """
        SELECT x_AzureChargeKey, count(*) FROM core.cost_lines WHERE ProviderName = 'Microsoft'
        GROUP BY ALL HAVING count(*) > 1""")


def test_the_files_own_totals_are_the_providers():
    def file_sum(name):
        with open(sample(name), encoding="utf-8-sig", newline="") as fh:
            return sum((Decimal(r["Cost"]) for r in csv.DictReader(fh)), Decimal(0))
    # The files carry up to 16 decimals; money keeps 10 per line, so the totals agree far inside 1e-6.
    assert abs(file_sum(ACTUAL) - BILLED) < Decimal("1e-9")
    assert abs(file_sum(AMORTIZED) - EFFECTIVE) < Decimal("1e-9")


def test_both_in_one_run_give_one_row_per_charge_and_the_providers_totals(tmp_path):
    with load(tmp_path, [ACTUAL, AMORTIZED]) as conn:
        assert_providers_totals(conn)
        assert twins(conn) == []
        assert dict(fetch_all(conn, """SELECT x_AzureDataset, count(*) FROM core.cost_lines GROUP BY ALL""")) == \
            {"amortized": 28, "actual": 1}
        # A charge in both: billed as actual says, effective as amortized says.
        assert fetch_all(conn, """
            SELECT BilledCost, EffectiveCost FROM core.cost_lines
            WHERE ChargeDescription = 'D2 v3/D2s v3' AND utc_day(ChargePeriodStart) = DATE '2023-09-04'""") == \
            [(Decimal("2.640000"), Decimal("2.640000"))]


@pytest.mark.parametrize("first, second", [(ACTUAL, AMORTIZED), (AMORTIZED, ACTUAL)])
def test_across_runs_in_either_order_the_same_totals(tmp_path, first, second):
    with load(tmp_path, [first], [second]) as conn:
        assert_providers_totals(conn)
        assert twins(conn) == []


def test_the_purchase_bills_its_price_and_is_effective_at_zero(tmp_path):
    with load(tmp_path, [ACTUAL, AMORTIZED]) as conn:
        assert fetch_all(conn, """
            SELECT ChargeCategory, BilledCost, EffectiveCost, CommitmentDiscountType, ConsumedQuantity IS NULL
            FROM core.cost_lines WHERE ChargeCategory = 'Purchase'""") == \
            [("Purchase", Decimal("3.250000"), Decimal("0.000000"), "Reservation", True)]


def test_each_export_alone_keeps_what_it_says(tmp_path):
    with load(tmp_path / "a", [ACTUAL]) as conn:
        # Actual alone: effective = billed, but the purchase is effective at zero.
        assert totals(conn) == (BILLED, BILLED - Decimal("3.25"), 11)
    with load(tmp_path / "b", [AMORTIZED]) as conn:
        # Amortized alone: on-demand usage bills its cost; commitment-covered usage bills nothing.
        billed, effective, rows = totals(conn)
        assert (effective - billed, rows) == (Decimal("0.4991520005"), 28)


def unused_exports(tmp_path):
    """An actual export with a reservation purchase and covered usage (cost 0), and the amortized
    export of the same scope: the covered usage at its amortized cost and the unused hours."""
    header = ("BillingAccountId,BillingPeriodStartDate,BillingPeriodEndDate,SubscriptionId,Date,MeterId,MeterCategory,MeterName,"
              "Quantity,Cost,BillingCurrency,ResourceId,UnitOfMeasure,ReservationId,benefitId,ChargeType,PricingModel\n")
    vm = "/subscriptions/s-1/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/gpu-1"
    ri = "/providers/Microsoft.Capacity/reservationOrders/o-1/reservations/r-1"
    common = "ea-1,10/01/2026,10/31/2026,s-1"
    actual = (f"{common},10/01/2026,m-ri,Virtual Machines,ND96,1,900.00,USD,,1 Hour,r-1,{ri},Purchase,Reservation\n"
              f"{common},10/02/2026,m-vm,Virtual Machines,ND96,20,0,USD,{vm},1 Hour,r-1,{ri},Usage,Reservation\n"
              f"{common},10/02/2026,m-od,Storage,P30,1,4.10,USD,{vm}-disk,1/Month,,,Usage,OnDemand\n")
    amortized = (f"{common},10/02/2026,m-vm,Virtual Machines,ND96,20,25.00,USD,{vm},1 Hour,r-1,{ri},Usage,Reservation\n"
                 f"{common},10/02/2026,m-vm,Virtual Machines,ND96,4,5.00,USD,,1 Hour,r-1,{ri},UnusedReservation,Reservation\n"
                 f"{common},10/02/2026,m-od,Storage,P30,1,4.10,USD,{vm}-disk,1/Month,,,Usage,OnDemand\n")
    (tmp_path / "oct-a.csv").write_text(header + actual)
    (tmp_path / "oct-b.csv").write_text(header + amortized)
    return "oct-a.csv", "oct-b.csv"


def test_unused_commitment_is_usage_unused_bills_nothing_and_has_no_consumed_quantity(tmp_path):
    actual, amortized = unused_exports(tmp_path)
    assert (dataset_of(tmp_path / actual, actual), dataset_of(tmp_path / amortized, amortized)) == ("actual", "amortized")
    with load(tmp_path, [amortized], [actual]) as conn:
        assert totals(conn) == (Decimal("904.100000"), Decimal("34.100000"), 4)
        assert fetch_all(conn, """
            SELECT ChargeCategory, CommitmentDiscountStatus, BilledCost, EffectiveCost, ConsumedQuantity, CommitmentDiscountQuantity,
                   CommitmentDiscountId
            FROM core.cost_lines WHERE CommitmentDiscountStatus = 'Unused'""") == \
            [("Usage", "Unused", Decimal("0.000000"), Decimal("5.000000"), None, Decimal("4.0000000000"),
              "/providers/Microsoft.Capacity/reservationOrders/o-1/reservations/r-1")]
        assert fetch_all(conn, """
            SELECT CommitmentDiscountStatus, BilledCost, EffectiveCost, ConsumedQuantity FROM core.cost_lines
            WHERE CommitmentDiscountStatus = 'Used'""") == [("Used", Decimal("0.000000"), Decimal("25.000000"), Decimal("20.0000000000"))]


def test_an_export_manifest_names_the_dataset(tmp_path):
    # No commitment rows: the rows cannot tell; the manifest can, and then the file name.
    path = tmp_path / "run-1" / "part_0_0001.csv"
    path.parent.mkdir()
    path.write_text("SubscriptionId,MeterId,Date,Cost,BillingCurrency,ChargeType,PricingModel\ns-1,m-1,10/01/2026,1.00,USD,Usage,OnDemand\n")
    assert dataset_of(path, "x/part_0_0001.csv") == "actual"
    assert dataset_of(path, "monthly-amortized/part_0_0001.csv") == "amortized"
    (path.parent / "manifest.json").write_text(json.dumps({"exportConfig": {"exportName": "m", "type": "AmortizedCost"}}))
    assert dataset_of(path, "x/part_0_0001.csv") == "amortized"
    (path.parent / "manifest.json").write_text(json.dumps({"exportConfig": {"type": "ActualCost"}}))
    assert dataset_of(path, "monthly-amortized/part_0_0001.csv") == "actual"


# Microsoft's FOCUS export of the same scope and month (FocusCost): its BillingAccountId is the
# billing account's path, its lines the same charges in one row each.
FOCUS_HEADER = ["ProviderName", "BillingAccountId", "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart",
                "ChargePeriodEnd", "BilledCost", "EffectiveCost", "BillingCurrency", "ChargeCategory", "ServiceName"]


def focus_export(tmp_path, last_day: int) -> str:
    """The scope's September as a FOCUS export whose last charge starts on `last_day`, with the
    provider's totals (two lines; the real one has a line per charge)."""
    account = "/providers/Microsoft.Billing/billingAccounts/8611537"
    month = ["2023-09-01T00:00:00Z", "2023-10-01T00:00:00Z"]
    rows = [["Microsoft", account, *month, "2023-09-04T00:00:00Z", "2023-09-05T00:00:00Z", "8.5450077867", "8.0", "USD",
             "Usage", "Virtual Machines"],
            ["Microsoft", account, *month, f"2023-09-{last_day:02d}T00:00:00Z", f"2023-09-{last_day + 1:02d}T00:00:00Z",
             "0", "8.2969321366", "USD", "Usage", "Virtual Machines"]]
    name = f"focus-{last_day}.csv"
    with open(tmp_path / name, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(FOCUS_HEADER)
        writer.writerows(rows)
    return name


def billing_statuses(conn) -> dict[str, str]:
    return dict(fetch_all(conn, "SELECT path, status FROM raw.files WHERE kind = 'billing'"))


@pytest.mark.parametrize("focus_first", [False, True])
def test_the_focus_export_beside_the_actual_and_amortized_exports_never_adds_to_them(tmp_path, focus_first):
    """Both forms of one scope's month synced side by side: the provider's own exports count, the
    FOCUS export (up to the same day) is the same charges again (the month was twice its cost)."""
    focus = focus_export(tmp_path, 22)  # the amortized export's last charge starts on the 22nd too
    runs = [[focus], [ACTUAL, AMORTIZED]] if focus_first else [[ACTUAL, AMORTIZED], [focus]]
    with load(tmp_path, *runs) as conn:
        assert_providers_totals(conn)
        assert billing_statuses(conn) == {"sept/export-1.csv": "loaded", "sept/export-2.csv": "loaded", focus: "superseded"}
        assert fetch_all(conn, "SELECT covered_by FROM raw.delivery_slices WHERE NOT counts") == [("own export: a plain upload",)]


def test_the_focus_export_counts_once_the_own_exports_fall_behind(tmp_path):
    """The actual and amortized exports switched off for FOCUS mid-month: the FOCUS export, three
    days further, counts for the month, and the own exports' lines do not add to it."""
    focus = focus_export(tmp_path, 25)
    with load(tmp_path, [ACTUAL, AMORTIZED, focus]) as conn:
        assert totals(conn) == (BILLED, EFFECTIVE, 2)
        assert billing_statuses(conn) == {"sept/export-1.csv": "superseded", "sept/export-2.csv": "superseded", focus: "loaded"}


def test_the_run_says_the_focus_export_no_longer_counts(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing = tmp_path / "landing"
    for name in (ACTUAL, AMORTIZED):
        (landing / NAMES[name]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sample(name), landing / NAMES[name])
    shutil.copy(tmp_path / focus_export(tmp_path, 22), landing / "focus.csv")
    args = ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--reports", str(tmp_path / "reports")]
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output[-2000:]
    assert ("superseded: focus.csv — its lines no longer count: the provider's own export (sept/export-1.csv) holds the "
            "same provider, billing account and month, the same charges in another form") in result.output, result.output[-2000:]
    assert "two forms" not in result.output  # Microsoft states one account in both forms: nothing to warn of


def azure_export_run(landing, export: str, scope: str, run_id: str, text: str, submitted: str) -> None:
    """One run of an Azure export as the storage account holds it: its part and its manifest."""
    folder = landing / export / "20230901-20230930" / run_id
    folder.mkdir(parents=True)
    (folder / "part_0_0001.csv").write_text(text, encoding="utf-8")
    (folder / "manifest.json").write_text(json.dumps({
        "manifestVersion": "2024-04-01", "blobCount": 1,
        "exportConfig": {"exportName": export, "type": "ActualCost", "timeFrame": "MonthToDate",
                         "resourceId": f"{scope}/providers/Microsoft.CostManagement/exports/{export}"},
        "runInfo": {"executionType": "Scheduled", "submittedTime": submitted, "runId": run_id,
                    "startDate": "2023-09-01T00:00:00", "endDate": "2023-09-30T00:00:00"},
        "blobs": [{"blobName": f"{export}/20230901-20230930/{run_id}/part_0_0001.csv"}]}))


def test_a_subscriptions_export_beside_the_billing_accounts_counts_once(tmp_path):
    """A team's subscription-scoped export beside the billing account's export of the same month:
    the billing account's holds the subscription's charges, so they count once (they were added)."""
    text = sample(ACTUAL).read_text(encoding="utf-8-sig")
    header, *lines = text.splitlines(keepends=True)
    subscription = next(csv.DictReader([header, lines[0]]))["SubscriptionId"]
    own = header + "".join(line for line in lines if subscription in line)
    assert 0 < len(own.splitlines()) - 1 < len(lines)
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    azure_export_run(landing, "team-actual", f"/subscriptions/{subscription}", "11111111-aaaa-4bbb-8ccc-000000000001", own,
                     "2023-09-23T03:00:00Z")
    azure_export_run(landing, "enrollment-actual", "/providers/Microsoft.Billing/billingAccounts/8611537",
                     "22222222-aaaa-4bbb-8ccc-000000000002", text, "2023-09-23T02:00:00Z")
    assert run_pipeline(landing, warehouse).success
    with connect(warehouse, read_only=True) as conn:
        assert fetch_all(conn, "SELECT sum(BilledCost), count(*) FROM core.cost_lines") == [(BILLED, len(lines))]
        assert fetch_all(conn, "SELECT export_name, covered_by FROM raw.delivery_slices WHERE NOT counts") == \
            [("team-actual#actual", "whole account: enrollment-actual")]


def test_a_run_that_supersedes_an_older_warehouses_file_says_why(tmp_path, monkeypatch):
    """A warehouse whose FOCUS file counted under an older version's rules (set back here): the first
    run of this version supersedes it and says why, though it read no new file."""
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    for name in (ACTUAL, AMORTIZED):
        (landing / NAMES[name]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sample(name), landing / NAMES[name])
    shutil.copy(tmp_path / focus_export(tmp_path, 22), landing / "focus.csv")
    args = ["run", "--landing", str(landing), "--warehouse", str(warehouse), "--reports", str(tmp_path / "reports")]
    assert CliRunner().invoke(app, args, terminal_width=400).exit_code == 0
    with connect(warehouse) as conn:
        conn.execute("UPDATE raw.files SET status = 'loaded', status_changed_at = NULL WHERE path = 'focus.csv'")
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output[-2000:]
    assert "superseded: focus.csv — its lines no longer count: the provider's own export" in result.output, result.output[-2000:]
    again = CliRunner().invoke(app, args, terminal_width=400)
    assert again.exit_code == 0 and "superseded: focus.csv" not in again.output, again.output[-2000:]


# -- exports of one billing account in several scopes and forms (October 2026, 1.00 per subscription-day) --

ACCOUNT_PATH = "/providers/Microsoft.Billing/billingAccounts/ea-1"
OWN_HEADER = ("BillingAccountId,BillingPeriodStartDate,BillingPeriodEndDate,SubscriptionId,Date,MeterId,MeterCategory,MeterName,"
              "Quantity,Cost,BillingCurrency,ResourceId,UnitOfMeasure,ReservationId,benefitId,ChargeType,PricingModel\n")


def own_form(days_by_subscription: dict[str, range]) -> str:
    """Azure's own export format: a 1.00 line per subscription and day."""
    return OWN_HEADER + "".join(
        f"ea-1,10/01/2026,10/31/2026,{s},10/{d:02d}/2026,m-{s},Virtual Machines,ND96,1,1.00,USD,/subscriptions/{s}/rg/vm,"
        "1 Hour,,,Usage,OnDemand\n" for s, days in days_by_subscription.items() for d in days)


def focus_form(days_by_subscription: dict[str, range]) -> str:
    rows = [",".join(["Microsoft", ACCOUNT_PATH, "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z", f"2026-10-{d:02d}T00:00:00Z",
                      f"2026-10-{d + 1:02d}T00:00:00Z", "1.00", "1.00", "USD", "Usage", "Virtual Machines"]) + "\n"
            for days in days_by_subscription.values() for d in days]
    return ",".join(FOCUS_HEADER) + "\n" + "".join(rows)


def october_run(landing, export: str, scope: str, run: int, parts: list[str | None], kind: str = "ActualCost") -> None:
    """One run of an October export with its manifest; a part given as None has not synced yet."""
    run_id = f"{run:08d}-aaaa-4bbb-8ccc-000000000000"
    folder = landing / export / "20261001-20261031" / run_id
    folder.mkdir(parents=True)
    for n, text in enumerate(parts, 1):
        if text is not None:
            (folder / f"part_0_{n:04d}.csv").write_text(text, encoding="utf-8")
    (folder / "manifest.json").write_text(json.dumps({
        "manifestVersion": "2024-04-01", "blobCount": len(parts),
        "exportConfig": {"exportName": export, "type": kind, "timeFrame": "MonthToDate",
                         "resourceId": f"{scope}/providers/Microsoft.CostManagement/exports/{export}"},
        "runInfo": {"executionType": "Scheduled", "submittedTime": f"2026-10-15T0{run}:00:00Z", "runId": run_id,
                    "startDate": "2026-10-01T00:00:00", "endDate": "2026-10-31T00:00:00"},
        "blobs": [{"blobName": f"{export}/20261001-20261031/{run_id}/part_0_{n:04d}.csv"} for n in range(1, len(parts) + 1)]}))


def october_totals(landing, warehouse) -> tuple:
    assert run_pipeline(landing, warehouse).success
    with connect(warehouse, read_only=True) as conn:
        return fetch_all(conn, "SELECT sum(BilledCost), sum(EffectiveCost) FROM core.cost_lines")[0]


def test_a_stale_actual_export_beside_a_current_amortized_one_lets_the_focus_export_count(tmp_path):
    """The actual export switched off on day 7, the amortized one runs on: the own form is as far as
    its least advanced dataset, so the FOCUS export (day 14) counts; billed 14, not 7."""
    landing = tmp_path / "landing"
    october_run(landing, "ba-actual", ACCOUNT_PATH, 1, [own_form({"s-1": range(1, 8)})])
    october_run(landing, "ba-amortized", ACCOUNT_PATH, 2, [own_form({"s-1": range(1, 15)})], kind="AmortizedCost")
    october_run(landing, "ba-focus", ACCOUNT_PATH, 3, [focus_form({"s-1": range(1, 15)})], kind="FocusCost")
    assert october_totals(landing, tmp_path / "wh.duckdb") == (Decimal(14), Decimal(14))


def test_an_own_download_starting_later_does_not_hide_the_focus_exports_first_days(tmp_path):
    landing = tmp_path / "landing"
    (landing / "downloads").mkdir(parents=True)
    (landing / "downloads" / "actual-8-14.csv").write_text(own_form({"s-1": range(8, 15)}))
    (landing / "focus-october.csv").write_text(focus_form({"s-1": range(1, 15)}))
    assert october_totals(landing, tmp_path / "wh.duckdb") == (Decimal(14), Decimal(14))


def test_an_incomplete_billing_account_export_leaves_a_subscriptions_complete_export_counting(tmp_path):
    """The billing account's newest run still misses the part holding s-1: s-1's own export counts."""
    landing = tmp_path / "landing"
    october_run(landing, "ba-actual", ACCOUNT_PATH, 1, [own_form({"s-2": range(1, 15)}), None])
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 15)})])
    assert october_totals(landing, tmp_path / "wh.duckdb") == (Decimal(28), Decimal(28))


def test_a_subscriptions_focus_export_beside_the_billing_accounts_counts_once(tmp_path):
    """FocusCost states the billing account as its path: the billing account's FocusCost export is
    still the whole account's, and holds the subscription's."""
    landing = tmp_path / "landing"
    october_run(landing, "team-focus", "/subscriptions/s-1", 1, [focus_form({"s-1": range(1, 15)})], kind="FocusCost")
    october_run(landing, "ba-focus", ACCOUNT_PATH, 2, [focus_form({"s-1": range(1, 15), "s-2": range(1, 15)})], kind="FocusCost")
    assert october_totals(landing, tmp_path / "wh.duckdb") == (Decimal(28), Decimal(28))


def slice_verdicts(warehouse) -> dict[str, tuple]:
    with connect(warehouse, read_only=True) as conn:
        return {r[0]: r[1:] for r in fetch_all(conn, """
            SELECT export_name, counts, covered_by,
                   list_transform(counts_for, lambda r: strftime(r.since, '%Y-%m-%d %H:%M') || '/' || strftime(r.until, '%Y-%m-%d %H:%M'))
            FROM raw.delivery_slices""")}


def test_a_billing_account_export_lagging_behind_a_subscriptions_counts_each_day_once(tmp_path):
    """The billing account's export reaches day 10, the subscription's day 14: s-1's days 1-10 count
    through the billing account's, its days 11-14 through its own (both counted: 34, not 24). When
    the billing account's export catches up, the subscription's counts for nothing."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    october_run(landing, "ba-actual", ACCOUNT_PATH, 1, [own_form({"s-1": range(1, 11), "s-2": range(1, 11)})])
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 15)})])
    assert october_totals(landing, warehouse) == (Decimal(24), Decimal(24))
    assert slice_verdicts(warehouse)["team-actual#actual"] == (True, "whole account: ba-actual", ["2026-10-11 00:00/2026-10-15 00:00"])
    with connect(warehouse, read_only=True) as conn:
        assert fetch_all(conn, """SELECT x_ExportName, min(ChargePeriodStart)::DATE::VARCHAR, sum(BilledCost) FROM core.cost_lines
                                  WHERE SubAccountId = 's-1' GROUP BY 1 ORDER BY 1""") == \
            [("ba-actual", "2026-10-01", Decimal(10)), ("team-actual", "2026-10-11", Decimal(4))]
    october_run(landing, "ba-actual", ACCOUNT_PATH, 3, [own_form({"s-1": range(1, 15), "s-2": range(1, 15)})])
    assert october_totals(landing, warehouse) == (Decimal(28), Decimal(28))
    assert slice_verdicts(warehouse)["team-actual#actual"] == (False, "whole account: ba-actual", None)


def test_a_subscriptions_export_lagging_behind_the_billing_accounts_counts_for_nothing(tmp_path):
    landing = tmp_path / "landing"
    october_run(landing, "ba-actual", ACCOUNT_PATH, 1, [own_form({"s-1": range(1, 15), "s-2": range(1, 15)})])
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 8)})])
    assert october_totals(landing, tmp_path / "wh.duckdb") == (Decimal(28), Decimal(28))


def test_a_subscriptions_own_export_beside_the_billing_accounts_focus_export_counts_once(tmp_path):
    """A team's actual export beside the billing account's FocusCost export: FOCUS holds the
    subscription's charges in the other form (they were added: 42 for 28)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    october_run(landing, "team-actual", "/subscriptions/s-1", 1, [own_form({"s-1": range(1, 15)})])
    october_run(landing, "ba-focus", ACCOUNT_PATH, 2, [focus_form({"s-1": range(1, 15), "s-2": range(1, 15)})], kind="FocusCost")
    assert october_totals(landing, warehouse) == (Decimal(28), Decimal(28))
    assert slice_verdicts(warehouse)["team-actual#actual"] == (False, "whole account: ba-focus", None)


def test_the_run_says_a_subscriptions_export_counts_only_past_the_billing_accounts(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing = tmp_path / "landing"
    october_run(landing, "ba-actual", ACCOUNT_PATH, 1, [own_form({"s-1": range(1, 11), "s-2": range(1, 11)})])
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 15)})])
    args = ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--reports", str(tmp_path / "reports")]
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output[-2000:]
    assert ("counts in part: team-actual/20261001-20261031/00000002-aaaa-4bbb-8ccc-000000000000/part_0_0001.csv — its lines "
            "count only for charges from 2026-10-11 00:00 to 2026-10-15 00:00 (UTC); at other times ba-actual (the whole "
            "billing account's export) holds them") in " ".join(result.output.split()), result.output[-2000:]
    october_run(landing, "ba-actual", ACCOUNT_PATH, 3, [own_form({"s-1": range(1, 15), "s-2": range(1, 15)})])
    caught_up = CliRunner().invoke(app, args, terminal_width=400)
    assert caught_up.exit_code == 0, caught_up.output[-2000:]
    assert ("superseded: team-actual/20261001-20261031/00000002-aaaa-4bbb-8ccc-000000000000/part_0_0001.csv — its lines no "
            "longer count: the whole billing account's export (ba-actual) holds its charges") in " ".join(caught_up.output.split())


def focus_lines(charges: list[tuple[str, str, int]]) -> str:
    """FocusCost lines of the billing account: (start, end, cost) each, in October 2026."""
    return ",".join(FOCUS_HEADER) + "\n" + "".join(
        ",".join(["Microsoft", ACCOUNT_PATH, "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z", f"2026-10-{start}:00Z",
                  f"2026-{end}:00Z", str(cost), str(cost), "USD", "Usage", "Virtual Machines"]) + "\n"
        for start, end, cost in charges)


@pytest.mark.parametrize("other_lines", [[("01T00:00", "11-01T00:00", 10)], [("10T00:00", "10-11T00:00", 10)]],
                         ids=["month-long fee", "the day's daily line"])
def test_an_hourly_whole_export_reaches_as_far_as_its_hours(tmp_path, other_lines):
    """The billing account's hourly FocusCost export through 05:00 on the 10th, with a month-long
    fee line, or a daily line of the 10th (storage is billed by the day in an hourly export); the
    subscription's hourly export through the 11th: the subscription's hours from 06:00 on the 10th
    count (the other line set the reach to midnight, and 18 hours were lost)."""
    landing = tmp_path / "landing"
    whole = [(f"{d:02d}T00:00", f"10-{d + 1:02d}T00:00", 24) for d in range(1, 10)] + \
        [(f"10T{h:02d}:00", f"10-10T{h + 1:02d}:00", 1) for h in range(6)] + other_lines
    narrow = [(f"{d}T{h:02d}:00", f"10-{d}T{h + 1:02d}:00" if h < 23 else f"10-{d + 1}T00:00", 1) for d in (10, 11) for h in range(24)]
    october_run(landing, "ba-focus", ACCOUNT_PATH, 1, [focus_lines(whole)], kind="FocusCost")
    october_run(landing, "team-focus", "/subscriptions/s-1", 2, [focus_lines(narrow)], kind="FocusCost")
    warehouse = tmp_path / "wh.duckdb"
    assert october_totals(landing, warehouse) == (Decimal(9 * 24 + 6 + 10 + 18 + 24), Decimal(9 * 24 + 6 + 10 + 18 + 24))
    assert slice_verdicts(warehouse)["team-focus"] == (True, "whole account: ba-focus", ["2026-10-10 06:00/2026-10-12 00:00"])


def test_a_warehouse_from_before_the_reach_was_recorded_gets_it_from_the_lake(tmp_path):
    """A warehouse whose facts lack how far each file has come (raw.file_slices.last_start_end,
    dropped here as an older release had it) gets them from its lines on the next run, which counts
    as a fresh build does (the older, coarser reach lost the subscription's 18 hours of the 10th)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    whole = [(f"{d:02d}T00:00", f"10-{d + 1:02d}T00:00", 24) for d in range(1, 10)] + \
        [(f"10T{h:02d}:00", f"10-10T{h + 1:02d}:00", 1) for h in range(6)] + [("01T00:00", "11-01T00:00", 10)]
    narrow = [(f"{d}T{h:02d}:00", f"10-{d}T{h + 1:02d}:00" if h < 23 else f"10-{d + 1}T00:00", 1) for d in (10, 11) for h in range(24)]
    october_run(landing, "ba-focus", ACCOUNT_PATH, 1, [focus_lines(whole)], kind="FocusCost")
    october_run(landing, "team-focus", "/subscriptions/s-1", 2, [focus_lines(narrow)], kind="FocusCost")
    expected = (Decimal(9 * 24 + 6 + 10 + 18 + 24),) * 2
    assert october_totals(landing, warehouse) == expected
    with connect(warehouse) as conn:
        conn.execute("ALTER TABLE raw.file_slices DROP COLUMN last_start_end")
    assert october_totals(landing, warehouse) == expected
    with connect(warehouse, read_only=True) as conn:
        assert fetch_all(conn, "SELECT count(*), count(last_start_end) FROM raw.file_slices") == [(2, 2)]


@pytest.mark.parametrize("with_focus_export", [False, True])
def test_a_subscriptions_focus_export_beside_the_billing_accounts_own_exports_counts_once(tmp_path, with_focus_export):
    """The billing account's actual and amortized exports (and, it may be, its FocusCost export, which
    then does not count: the own form does) beside a subscription's FocusCost export: the billing
    account's own exports hold the subscription's charges (they were added: 42 for 28)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    both = {"s-1": range(1, 15), "s-2": range(1, 15)}
    october_run(landing, "ba-actual", ACCOUNT_PATH, 1, [own_form(both)])
    october_run(landing, "ba-amortized", ACCOUNT_PATH, 2, [own_form(both)], kind="AmortizedCost")
    if with_focus_export:
        october_run(landing, "ba-focus", ACCOUNT_PATH, 3, [focus_form(both)], kind="FocusCost")
    october_run(landing, "team-focus", "/subscriptions/s-1", 4, [focus_form({"s-1": range(1, 15)})], kind="FocusCost")
    assert october_totals(landing, warehouse) == (Decimal(28), Decimal(28))
    assert slice_verdicts(warehouse)["team-focus"][:2] in {(False, "whole account: ba-actual"), (False, "whole account: ba-amortized")}
