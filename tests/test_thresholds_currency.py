"""The findings' money thresholds are stated in one currency (USD unless set) and converted into the
reporting currency, so a leak ranks the same in a KRW report as in a USD one."""

from datetime import date
from decimal import Decimal

import pytest

from models.anomalies import AnomalyRules
from pipelines.analysis.anomalies import rules_in_currency
from pipelines.warehouse.connection import connect, fetch_dicts
from tests.conftest import run_pipeline

HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
          "ServiceName,ServiceCategory,ResourceId,ResourceName,ConsumedQuantity,ConsumedUnit,CommitmentDiscountId,"
          "CommitmentDiscountStatus,Tags,x_GpuModel,x_GpuCount\n")
DAY = "2026-09-01T00:00:00Z,2026-09-02T00:00:00Z"
# Two unused commitments, all of them avoidable: 100.00 USD (medium: 50 to 500 USD) and 0.05 USD (under
# the 0.10 USD smallest finding).
CHARGES = HEADER + (f"100.00,100.00,USD,Usage,{DAY},AWS,EC2,Compute,,,,,sp-a,Unused,,,\n"
                    f"0.05,0.05,USD,Usage,{DAY},AWS,EC2,Compute,,,,,sp-b,Unused,,,\n")


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    folder = tmp_path_factory.mktemp("thresholds") / "landing"
    folder.mkdir()
    (folder / "charges.csv").write_text(CHARGES)
    return folder


def findings(landing, warehouse, **settings) -> list[dict]:
    assert run_pipeline(landing, warehouse, **settings).success
    conn = connect(warehouse, read_only=True)
    try:
        return fetch_dicts(conn, """SELECT resource, severity, wasted_cost, currency, reporting_currency,
                                           wasted_cost_reporting > 0 AS rated
                                    FROM findings.hidden_costs ORDER BY resource""")
    finally:
        conn.close()


@pytest.mark.parametrize("reporting_currency", ["USD", "KRW", "EUR"])
def test_a_leak_has_the_same_severity_and_cut_in_any_reporting_currency(landing, tmp_path, reporting_currency):
    rows = findings(landing, tmp_path / "wh.duckdb", reporting_currency=reporting_currency)
    # In KRW, 500 and 0.10 read as won made the 100 USD leak high and kept the 0.05 USD one.
    assert rows == [{"resource": "sp-a", "severity": "medium", "wasted_cost": Decimal("100.0000000000"), "currency": "USD",
                     "reporting_currency": reporting_currency, "rated": True}]


def test_thresholds_stated_in_the_reporting_currency_are_read_as_its_amounts(landing, tmp_path):
    # As every run read them before they had a currency: 0.05 USD is some 70 won, a medium leak.
    rows = findings(landing, tmp_path / "wh.duckdb", reporting_currency="KRW", thresholds_currency="KRW")
    assert [(r["resource"], r["severity"]) for r in rows] == [("sp-a", "high"), ("sp-b", "medium")]


def test_the_anomaly_cost_floor_is_converted_at_the_scored_days_rate(tmp_path):
    conn = connect(tmp_path / "rates.duckdb")
    try:
        conn.execute("CREATE SCHEMA core")
        conn.execute("""CREATE TABLE core.fx_rates AS SELECT * FROM (VALUES
                            (DATE '2026-08-31', 'USD', 'KRW', CAST(1300 AS DECIMAL(38, 12)), 'test'),
                            (DATE '2026-09-01', 'USD', 'KRW', CAST(1400 AS DECIMAL(38, 12)), 'test'),
                            (DATE '2026-09-03', 'USD', 'KRW', CAST(1500 AS DECIMAL(38, 12)), 'test'))
                        AS t(rate_date, from_currency, to_currency, rate, source)""")
        rules = AnomalyRules(cost_floor_currency="USD")
        on_the_2nd = rules_in_currency(conn, rules, "KRW", date(2026, 9, 2))
        assert on_the_2nd.floors == {"cost": 14000.0, "gpu_hours": 8.0, "egress_gb": 50.0}
        assert on_the_2nd.cost_floor_currency is None
        assert rules_in_currency(conn, rules, "USD", date(2026, 9, 2)).floors["cost"] == 10.0
        # No rate links the two: the floor is read in the reporting currency, as before it had a currency.
        assert rules_in_currency(conn, rules, "JPY", date(2026, 9, 2)).floors["cost"] == 10.0
        assert rules_in_currency(conn, rules, "KRW", date(2026, 8, 1)).floors["cost"] == 10.0
    finally:
        conn.close()


def test_a_reporting_currency_only_the_users_table_rates_converts_the_thresholds_through_it(landing, tmp_path, monkeypatch):
    """ARS, which the ECB does not quote, rated by the treasury's table from USD: the thresholds
    convert at its rate, and the run says they need such a rate."""
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    rates = tmp_path / "rates.csv"
    rates.write_text("rate_date,from_currency,to_currency,rate,source\n2026-09-01,USD,ARS,970.5,treasury\n")
    result = CliRunner().invoke(app, ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"),
                                      "--reports", str(tmp_path / "reports"), "--reporting-currency", "ARS",
                                      "--fx-rates", str(rates)], terminal_width=400)
    assert result.exit_code in (0, 1), result.output[-3000:]
    assert "note: the findings' money thresholds are stated in USD" in result.output
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        # 100 USD = 97,050 ARS: medium (500 USD = 485,250 ARS is high); 0.05 USD = 48.53 ARS under 0.10 USD (97.05 ARS).
        assert fetch_dicts(conn, "SELECT resource, severity, wasted_cost_reporting FROM findings.hidden_costs") == [
            {"resource": "sp-a", "severity": "medium", "wasted_cost_reporting": Decimal("97050.0000000000")}]
    finally:
        conn.close()
