"""Azure exports of scopes nested below the billing account: a billing profile's (or an invoice
section's, an EA department's, a management group's) export holds the charges of the
subscriptions its lines bill, as far as its lines of each reach; a scope's export holds those of
the scopes whose paths lie under it (a subscription's, its resource groups'; a billing profile's,
its invoice sections'). A narrower export counts only past the reach of every complete export
holding it, so no charge counts twice while several scopes of one account are exported side by
side (1.00 per subscription-day, October 2026)."""
from decimal import Decimal

import pytest

from pipelines.warehouse.connection import connect, fetch_all
from tests.test_azure_actual_amortized import (
    ACCOUNT_PATH, FOCUS_HEADER, october_run, october_totals, own_form, slice_verdicts,
)

PROFILE = ACCOUNT_PATH + "/billingProfiles/bp-1"


def in_resource_group(text: str, group: str) -> str:
    """The same lines billed to resources of one resource group (so two groups' files differ)."""
    return text.replace("/rg/vm", f"/resourceGroups/{group}/vm")


def focus_with_subscriptions(days_by_subscription: dict[str, range]) -> str:
    """FocusCost lines stating their subscription as its path, as Microsoft's export does."""
    header = ",".join(FOCUS_HEADER + ["SubAccountId"]) + "\n"
    return header + "".join(
        ",".join(["Microsoft", ACCOUNT_PATH, "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z", f"2026-10-{d:02d}T00:00:00Z",
                  f"2026-10-{d + 1:02d}T00:00:00Z", "1.00", "1.00", "USD", "Usage", "Virtual Machines",
                  f"/subscriptions/{s}"]) + "\n"
        for s, days in days_by_subscription.items() for d in days)


def test_a_subscriptions_export_beside_its_billing_profiles_counts_once(tmp_path):
    """The billing profile's export bills s-1 and s-2; the team's export of s-1 holds the same
    charges of s-1 (they were added: 42 for 28)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    october_run(landing, "bp-actual", PROFILE, 1, [own_form({"s-1": range(1, 15), "s-2": range(1, 15)})])
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 15)})])
    assert october_totals(landing, warehouse) == (Decimal(28), Decimal(28))
    verdicts = slice_verdicts(warehouse)
    assert verdicts["team-actual#actual"] == (False, "wider scope: bp-actual", None)
    assert verdicts["bp-actual#actual"] == (True, None, None)


def test_a_billing_profile_export_lagging_behind_a_subscriptions_counts_each_day_once(tmp_path):
    """The profile's export reaches day 10, the subscription's day 14: s-1's days 11-14 count
    through the subscription's export, the rest through the profile's (34 before, not 24)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    october_run(landing, "bp-actual", PROFILE, 1, [own_form({"s-1": range(1, 11), "s-2": range(1, 11)})])
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 15)})])
    assert october_totals(landing, warehouse) == (Decimal(24), Decimal(24))
    assert slice_verdicts(warehouse)["team-actual#actual"] == \
        (True, "wider scope: bp-actual", ["2026-10-11 00:00/2026-10-15 00:00"])


def test_a_subscription_the_profile_does_not_bill_adds_to_it(tmp_path):
    """A subscription of another billing profile: its export holds charges the profile's does not."""
    landing = tmp_path / "landing"
    october_run(landing, "bp-actual", PROFILE, 1, [own_form({"s-2": range(1, 15)})])
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 15)})])
    assert october_totals(landing, tmp_path / "wh.duckdb") == (Decimal(28), Decimal(28))


def test_the_account_a_profile_and_a_subscription_each_count_past_the_one_holding_them(tmp_path):
    """The whole account's export reaches day 8 (s-1, s-2, s-3), its billing profile's day 11
    (s-1, s-2), a subscription's day 14 (s-1): each day of each subscription counts once, through
    the export reaching furthest that holds it (24 + 6 + 3; 36 before, s-1's days 9-11 twice)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    october_run(landing, "ba-actual", ACCOUNT_PATH, 1, [own_form({s: range(1, 9) for s in ("s-1", "s-2", "s-3")})])
    october_run(landing, "bp-actual", PROFILE, 2, [own_form({"s-1": range(1, 12), "s-2": range(1, 12)})])
    october_run(landing, "team-actual", "/subscriptions/s-1", 3, [own_form({"s-1": range(1, 15)})])
    assert october_totals(landing, warehouse) == (Decimal(33), Decimal(33))
    verdicts = slice_verdicts(warehouse)
    assert verdicts["bp-actual#actual"] == (True, "whole account: ba-actual", ["2026-10-09 00:00/2026-10-12 00:00"])
    assert verdicts["team-actual#actual"] == (True, "wider scope: bp-actual", ["2026-10-12 00:00/2026-10-15 00:00"])
    with connect(warehouse, read_only=True) as conn:
        assert fetch_all(conn, """SELECT SubAccountId, x_ExportName, min(ChargePeriodStart)::DATE::VARCHAR, sum(BilledCost)
                                  FROM core.cost_lines GROUP BY ALL ORDER BY 1, 3""") == [
            ("s-1", "ba-actual", "2026-10-01", Decimal(8)), ("s-1", "bp-actual", "2026-10-09", Decimal(3)),
            ("s-1", "team-actual", "2026-10-12", Decimal(3)),
            ("s-2", "ba-actual", "2026-10-01", Decimal(8)), ("s-2", "bp-actual", "2026-10-09", Decimal(3)),
            ("s-3", "ba-actual", "2026-10-01", Decimal(8))]


@pytest.mark.parametrize("with_subscription", [False, True])
def test_a_subscriptions_export_holds_its_resource_groups_and_the_groups_add_up(tmp_path, with_subscription):
    """Two resource groups' exports of one subscription are different charges and add up; the
    subscription's own export holds both."""
    landing = tmp_path / "landing"
    group_a = in_resource_group(own_form({"s-1": range(1, 15)}), "rg-a")
    group_b = in_resource_group(own_form({"s-1": range(1, 15)}), "rg-b")
    october_run(landing, "rg-a-actual", "/subscriptions/s-1/resourceGroups/rg-a", 1, [group_a])
    october_run(landing, "rg-b-actual", "/subscriptions/s-1/resourceGroups/rg-b", 2, [group_b])
    if with_subscription:
        october_run(landing, "team-actual", "/subscriptions/s-1", 3, [group_a, group_b.split("\n", 1)[1]])
    assert october_totals(landing, tmp_path / "wh.duckdb") == (Decimal(28), Decimal(28))


def test_a_subscription_moved_out_of_a_billing_profile_mid_month_counts_its_later_days(tmp_path):
    """The profile's export bills s-2 through day 9 only (moved to another profile on day 10), s-1
    through day 14: it holds s-2's charges as far as its lines of s-2 reach, so the subscription's
    own export counts s-2's days 10-14 (they were lost: 23 for 28)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    october_run(landing, "bp-actual", PROFILE, 1, [own_form({"s-1": range(1, 15), "s-2": range(1, 10)})])
    october_run(landing, "team-actual", "/subscriptions/s-2", 2, [own_form({"s-2": range(1, 15)})])
    assert october_totals(landing, warehouse) == (Decimal(28), Decimal(28))
    assert slice_verdicts(warehouse)["team-actual#actual"] == \
        (True, "wider scope: bp-actual", ["2026-10-10 00:00/2026-10-15 00:00"])


def test_a_subscription_moved_into_a_billing_profile_mid_month_counts_its_earlier_days(tmp_path):
    """The profile's export bills s-2 from day 10 only (moved in from a profile not exported): it
    holds s-2's charges from its first line of s-2, so the subscription's own export counts days
    1-9 (they were lost: 19 for 28) and, were the profile to lag, its days past the profile's."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    october_run(landing, "bp-actual", PROFILE, 1, [own_form({"s-1": range(1, 15), "s-2": range(10, 15)})])
    october_run(landing, "team-actual", "/subscriptions/s-2", 2, [own_form({"s-2": range(1, 15)})])
    assert october_totals(landing, warehouse) == (Decimal(28), Decimal(28))
    assert slice_verdicts(warehouse)["team-actual#actual"] == \
        (True, "wider scope: bp-actual", ["2026-10-01 00:00/2026-10-10 00:00"])
    with connect(warehouse, read_only=True) as conn:
        assert fetch_all(conn, "SELECT delivery_note FROM raw.files WHERE path LIKE 'team-actual/%' AND kind = 'billing'")[0][0] \
            .endswith("its lines count only for charges from 2026-10-01 00:00 to 2026-10-10 00:00 (UTC); at other times through "
                      "the export of a scope holding it, bp-actual")


def test_a_month_long_line_does_not_make_a_profile_hold_a_subscription_from_the_1st(tmp_path):
    """The profile's FocusCost export bills s-2 from day 10, and a month-long fee of s-2 that starts
    on the 1st: when a subscription's lines begin is read from its lines of a day or less, so the
    subscription's own export still counts days 1-9 (14 + 9 + 5 + the fee's 5)."""
    landing = tmp_path / "landing"
    fee = ",".join(["Microsoft", ACCOUNT_PATH, "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z", "2026-10-01T00:00:00Z",
                    "2026-11-01T00:00:00Z", "5.00", "5.00", "USD", "Usage", "Support", "/subscriptions/s-2"]) + "\n"
    october_run(landing, "bp-focus", PROFILE, 1,
                [focus_with_subscriptions({"s-1": range(1, 15), "s-2": range(10, 15)}) + fee], kind="FocusCost")
    october_run(landing, "team-actual", "/subscriptions/s-2", 2, [own_form({"s-2": range(1, 15)})])
    assert october_totals(landing, tmp_path / "wh.duckdb") == (Decimal(33), Decimal(33))


def test_a_lagging_billing_profile_and_its_invoice_section_count_each_day_once(tmp_path):
    """The profile's export reaches day 8 (s-1); its invoice section's day 14, with s-2 new from
    day 10. The section lies under the profile, so it counts past the profile's reach, and a
    subscription new to the section never makes it hold its profile (19, not 11)."""
    landing = tmp_path / "landing"
    october_run(landing, "bp-actual", PROFILE, 1, [own_form({"s-1": range(1, 9)})])
    october_run(landing, "is-actual", PROFILE + "/invoiceSections/is-1", 2,
                [own_form({"s-1": range(1, 15), "s-2": range(10, 15)})])
    assert october_totals(landing, tmp_path / "wh.duckdb") == (Decimal(19), Decimal(19))


def test_a_subscriptions_export_beside_its_billing_profiles_focus_export_counts_once(tmp_path):
    """The profile's FocusCost export states each subscription as its path (/subscriptions/s-1):
    it holds the team's actual export of s-1 in the other form."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    october_run(landing, "bp-focus", PROFILE, 1, [focus_with_subscriptions({"s-1": range(1, 15), "s-2": range(1, 15)})],
                kind="FocusCost")
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 15)})])
    assert october_totals(landing, warehouse) == (Decimal(28), Decimal(28))
    assert slice_verdicts(warehouse)["team-actual#actual"] == (False, "wider scope: bp-focus", None)


@pytest.mark.parametrize("earlier", ["no column", "an earlier shape"])
def test_a_warehouse_from_before_the_subscriptions_were_recorded_gets_them_from_the_lake(tmp_path, earlier):
    """A warehouse whose facts lack the subscriptions each file bills (dropped here, as an older
    release had it), or hold them in an earlier shape (without when each begins), gets them from
    its lines on the next run, which then counts s-1 once."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    october_run(landing, "bp-actual", PROFILE, 1, [own_form({"s-1": range(1, 15), "s-2": range(1, 15)})])
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 15)})])
    assert october_totals(landing, warehouse) == (Decimal(28), Decimal(28))
    with connect(warehouse) as conn:
        conn.execute("ALTER TABLE raw.file_slices DROP COLUMN sub_account_reach")
        if earlier == "an earlier shape":
            conn.execute("ALTER TABLE raw.file_slices ADD COLUMN sub_account_reach "
                         "STRUCT(id VARCHAR, last_start TIMESTAMPTZ, last_start_end TIMESTAMPTZ)[]")
    assert october_totals(landing, warehouse) == (Decimal(28), Decimal(28))
    with connect(warehouse, read_only=True) as conn:
        assert fetch_all(conn, """SELECT path LIKE 'bp-actual/%', list_transform(sub_account_reach, lambda r: r.id),
                                         list_transform(sub_account_reach, lambda r: strftime(r.last_start_end, '%d %H:%M'))
                                  FROM raw.file_slices ORDER BY 1""") == \
            [(False, ["s-1"], ["15 00:00"]), (True, ["s-1", "s-2"], ["15 00:00", "15 00:00"])]


def test_the_run_says_a_subscriptions_export_counts_only_past_its_billing_profiles(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing = tmp_path / "landing"
    october_run(landing, "bp-actual", PROFILE, 1, [own_form({"s-1": range(1, 11), "s-2": range(1, 11)})])
    october_run(landing, "team-actual", "/subscriptions/s-1", 2, [own_form({"s-1": range(1, 15)})])
    args = ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--reports", str(tmp_path / "reports")]
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output[-2000:]
    team = "team-actual/20261001-20261031/00000002-aaaa-4bbb-8ccc-000000000000/part_0_0001.csv"
    assert (f"counts in part: {team} — its lines count only for charges from 2026-10-11 00:00 to 2026-10-15 00:00 (UTC); "
            "at other times bp-actual (the export of a scope that holds this one's) holds them") in " ".join(result.output.split()), result.output[-2000:]
    october_run(landing, "bp-actual", PROFILE, 3, [own_form({"s-1": range(1, 15), "s-2": range(1, 15)})])
    caught_up = CliRunner().invoke(app, args, terminal_width=400)
    assert caught_up.exit_code == 0, caught_up.output[-2000:]
    assert (f"superseded: {team} — its lines no longer count: the export of a scope that holds this one's (bp-actual) "
            "holds its charges") in " ".join(caught_up.output.split()), caught_up.output[-2000:]
