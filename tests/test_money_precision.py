"""Money of any size and precision (issue "The ledger", item 5): amounts up to ±10^12 in any
currency and as small as 10^-10 are kept exactly from the file to every mart, a second run on the
same warehouse succeeds, and a warehouse made with the old DECIMAL(18,6) columns is widened."""

import csv
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import duckdb
import pytest

from models.schemas import COST_LINE, RAW_TABLES, SCHEMAS, duckdb_columns
from pipelines.warehouse.connection import WarehouseSchemaError, connect, ensure_warehouse, is_widening, sql_text, widen_column
from tests.conftest import run_pipeline, sample

HEADER = ("BilledCost", "EffectiveCost", "BillingCurrency", "ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd",
          "ServiceName", "ResourceId", "Tags")
# (amount, currency, resource, phase tag): big lines past DECIMAL(18,6), a 10-decimal line, one at 10^-10.
LINES = [
    ("1000000.00", "USD", "big-usd", "pretraining"),
    ("1234567890123.45", "JPY", "big-jpy", "inference"),
    ("999999999999.9999999999", "KRW", "big-krw", "finetuning"),
    ("0.0000000001", "USD", "tiny", "inference"),
    ("0.1234567891", "USD", "ten-decimals", None),  # no tag: attributed by rule or left unattributed
    ("-999999999999.9999999999", "KRW", "krw-credit", "finetuning"),
    ("987654321098.7654321098", "KRW", "krw-2", "pretraining"),
]


def write_rates(path: Path) -> str:
    """A treasury's own rates for the day (the bundled table has no KRW)."""
    path.write_text("rate_date,from_currency,to_currency,rate,source\n"
                    "2026-09-01,USD,JPY,147.123456,test treasury\n2026-09-01,USD,KRW,1389.654321,test treasury\n")
    return str(path)


def write_landing(landing: Path, day: str = "2026-09-01") -> dict[str, Decimal]:
    landing.mkdir(parents=True, exist_ok=True)
    with open(landing / "focus_big_money.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER)
        for amount, currency, resource, phase in LINES:
            w.writerow((amount, amount, currency, "Usage", f"{day}T00:00:00Z", f"{day}T01:00:00Z", "Compute",
                        resource, f'{{"phase": "{phase}"}}' if phase else ""))
    totals: dict[str, Decimal] = {}
    for amount, currency, _, _ in LINES:
        totals[currency] = totals.get(currency, Decimal(0)) + Decimal(amount)
    return totals


def by_currency(conn, sql: str) -> dict[str, Decimal]:
    return {c: v for c, v in conn.execute(sql).fetchall()}


def assert_exact(conn, totals: dict[str, Decimal]) -> None:
    assert by_currency(conn, "SELECT BillingCurrency, sum(BilledCost) FROM core.cost_lines GROUP BY 1") == totals
    assert by_currency(conn, "SELECT BillingCurrency, sum(EffectiveCost) FROM core.cost_lines GROUP BY 1") == totals
    assert by_currency(conn, """SELECT c.BillingCurrency, sum(a.amount_billing) FROM marts.cost_attribution AS a
                                JOIN core.cost_lines AS c USING (x_ChargeId) GROUP BY 1""") == totals
    assert by_currency(conn, "SELECT billing_currency, sum(cost_billing) FROM marts.daily_cost GROUP BY 1") == totals
    # Each line's parts add up to it exactly, in the billing and in the reporting currency.
    assert conn.execute("""
        SELECT count(*) FROM (
            SELECT c.x_ChargeId FROM core.cost_lines AS c JOIN marts.cost_attribution AS a USING (x_ChargeId)
            GROUP BY c.x_ChargeId, c.EffectiveCost, c.x_EffectiveCostReporting
            HAVING sum(a.amount_billing) <> c.EffectiveCost
                OR sum(a.amount_reporting) IS DISTINCT FROM c.x_EffectiveCostReporting)""").fetchone()[0] == 0
    # Every line exactly as the file states it.
    stored = {r: v for r, v in conn.execute("SELECT ResourceId, BilledCost FROM core.cost_lines").fetchall()}
    assert stored == {resource: Decimal(amount) for amount, _, resource, _ in LINES}
    # marts.spend_by_phase: the amounts of all periods ('all') add up to the cost lines' exactly.
    assert conn.execute("SELECT sum(cost_reporting) FROM marts.spend_by_phase WHERE period = 'all'").fetchone()[0] == \
        conn.execute("SELECT sum(x_EffectiveCostReporting) FROM core.cost_lines").fetchone()[0]
    assert by_currency(conn, """SELECT e.key, sum(e.value) FROM (
        SELECT unnest(map_entries(cost_by_billing_currency)) AS e FROM marts.spend_by_phase WHERE period = 'all') GROUP BY 1""") == totals
    # raw.files: the file's own total, exactly (no rounding to the cent or the micro-unit).
    assert conn.execute("SELECT source_total FROM raw.files WHERE path = 'focus_big_money.csv'").fetchone()[0] == \
        sum((Decimal(a) for a, _, _, _ in LINES), Decimal(0))


@pytest.mark.parametrize("reporting", ["USD", "KRW"])
def test_huge_and_tiny_amounts_are_kept_exactly_through_every_mart_and_a_second_run(tmp_path, reporting):
    totals = write_landing(tmp_path / "landing")
    warehouse = tmp_path / "wh.duckdb"
    for _ in range(2):  # a second run on the same warehouse succeeds and changes nothing
        result = run_pipeline(tmp_path / "landing", warehouse, reporting_currency=reporting,
                              fx_rates_file=write_rates(tmp_path / "rates.csv"))
        assert result.success and not result.failed_checks, result
        conn = connect(warehouse, read_only=True)
        try:
            assert_exact(conn, totals)
            assert conn.execute("SELECT count(*) FROM core.cost_lines WHERE x_FxStatus = 'missing_rate'").fetchone()[0] == 0
            converted = dict(conn.execute(
                "SELECT ResourceId, x_EffectiveCostReporting FROM core.cost_lines WHERE x_FxStatus <> 'missing_rate'").fetchall())
            # USD → KRW converts 1,000,000 USD into ~10^9 KRW, KRW → USD 10^12 KRW into ~10^9 USD: no overflow.
            assert converted["big-usd"] > 0 and converted["big-krw"] > 0
            if reporting == "USD":
                assert converted["tiny"] == Decimal("0.0000000001") and converted["ten-decimals"] == Decimal("0.1234567891")
            else:
                assert converted["big-usd"] == Decimal("1389654321.0000000000")  # 1,000,000 × 1389.654321, exact
        finally:
            conn.close()


def test_cur_fixture_total_equals_the_files_own_sum_exactly(tmp_path):
    source = sample("billing/aws_cur_legacy_csv_focusconverters_fixture.csv")
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / source.name).write_bytes(source.read_bytes())
    with open(source, newline="") as fh:
        expected = sum((Decimal(r["lineItem/UnblendedCost"]) for r in csv.DictReader(fh) if r["lineItem/UnblendedCost"].strip()),
                       Decimal(0))
    result = run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD")
    assert result.success, result
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        loaded = conn.execute("SELECT sum(BilledCost) FROM core.cost_lines").fetchone()[0]
        assert loaded == expected  # was off by 1.8e-5 when lines were rounded to 6 decimals
        assert conn.execute("SELECT source_total FROM raw.files").fetchone()[0] == expected
    finally:
        conn.close()


def test_fx_conversion_never_overflows_and_rounds_once_to_10_decimals():
    """DECIMAL(38,10) × DECIMAL(38,12) is DECIMAL(38,22): 10^12 × a rate of 10^5 overflows it.
    convert_money multiplies the whole part and the fraction apart."""
    from pipelines.warehouse.connection import SQL_DIR

    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    for amount, rate in [("999999999999.9999999999", "140000.123456789012"), ("-999999999999.9999999999", "0.000723456789"),
                         ("1234567890123.45", "9.123456789012"), ("0.0000000001", "0.5"), ("0.0000000001", "1.000000000000")]:
        got = conn.execute("SELECT convert_money(CAST(? AS DECIMAL(38, 10)), CAST(? AS DECIMAL(38, 12)))", [amount, rate]).fetchone()[0]
        # DuckDB rounds half away from zero (ROUND_HALF_UP in Python's terms).
        assert got == (Decimal(amount) * Decimal(rate)).quantize(Decimal("1e-10"), ROUND_HALF_UP), (amount, rate, got)
    assert conn.execute("SELECT typeof(convert_money(1.5, 2.0))").fetchone()[0] == "DECIMAL(38,10)"



def test_rounded_quotient_rounds_an_exact_half_away_from_zero_whatever_the_signs():
    """marts.spend_by_phase rounds its hours, shares and utilization from exact integers: a DOUBLE
    quotient rounded gave 12.592 for 12.5925 on DuckDB (its binary value is 12.59249999…) and 12.593
    on Spark (Spark rounds the shortest decimal text)."""
    from pipelines.warehouse.connection import SQL_DIR

    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    assert conn.execute("SELECT round(12592.5 / 1000, 3)").fetchone()[0] == 12.592  # the trap itself
    cases = [(125925, 10, 12593), (-125925, 10, -12593), (125925, -10, -12593), (-125925, -10, 12593),
             (9 * 1000, 3600, 3), (7, 3, 2), (-7, 3, -2), (0, 5, 0), (10 ** 30 + 1, 2, 5 * 10 ** 29 + 1)]
    for n, d, expected in cases:
        assert conn.execute("SELECT rounded_quotient(CAST(? AS HUGEINT), CAST(? AS HUGEINT))", [str(n), str(d)]).fetchone()[0] == expected, (n, d)
    assert conn.execute("SELECT rounded_quotient(5, 0), rounded_quotient(NULL, 3), rounded_quotient(3, NULL)").fetchone() == (None, None, None)

OLD_MONEY = "DECIMAL(18,6)"


def old_warehouse(path: Path) -> None:
    """A warehouse as the previous version made it: money columns DECIMAL(18,6), raw.files totals
    DECIMAL(38,6), findings.anomalies amounts DECIMAL(18,6), with a row already loaded."""
    conn = duckdb.connect(str(path))
    for schema in ("raw", "core", "marts", "findings"):
        conn.execute(f"CREATE SCHEMA {schema}")
    from pipelines.warehouse.connection import RAW_REGISTRY_DDL

    conn.execute(RAW_REGISTRY_DDL.replace("DECIMAL(38, 10)", "DECIMAL(38, 6)"))
    for kind, table in RAW_TABLES.items():
        conn.execute(f"CREATE TABLE {table} ({duckdb_columns(SCHEMAS[kind]).replace('DECIMAL(38,10)', OLD_MONEY)})")
    conn.execute(sql_text("findings.anomalies").split("-- merge")[0].replace("DECIMAL(38, 10)", "DECIMAL(18, 6)"))
    conn.execute("INSERT INTO raw.files (path, sha256, size_bytes, status, source_total, quarantined_total, ingested_at) "
                 "VALUES ('old.csv', 'x', 1, 'replaced', 1.123456, 0, now())")
    conn.close()


def test_old_decimal_18_6_warehouse_is_widened_not_refused(tmp_path):
    warehouse = tmp_path / "wh.duckdb"
    old_warehouse(warehouse)
    assert "DECIMAL(18,6)" in duckdb_columns(COST_LINE).replace("DECIMAL(38,10)", OLD_MONEY)
    totals = write_landing(tmp_path / "landing")
    result = run_pipeline(tmp_path / "landing", warehouse, reporting_currency="USD")
    assert result.success and not result.failed_checks, result
    conn = connect(warehouse, read_only=True)
    try:
        types = dict(conn.execute("""SELECT table_schema || '.' || table_name || '.' || column_name, data_type
                                     FROM information_schema.columns""").fetchall())
        assert types["raw.cost_lines.BilledCost"] == types["raw.cost_lines.x_SourceCost"] == "DECIMAL(38,10)"
        assert types["raw.files.source_total"] == types["findings.anomalies.actual"] == "DECIMAL(38,10)"
        assert conn.execute("SELECT source_total FROM raw.files WHERE path = 'old.csv'").fetchone()[0] == Decimal("1.123456")
        assert_exact(conn, totals)
    finally:
        conn.close()


def test_only_widening_is_an_allowed_migration(tmp_path):
    assert is_widening("DECIMAL(18,6)", "DECIMAL(38,10)") and is_widening("DECIMAL(18, 6)", "DECIMAL(38,10)")
    assert not is_widening("DECIMAL(38,10)", "DECIMAL(18,6)")  # fewer digits
    assert not is_widening("DECIMAL(38,6)", "DECIMAL(38,12)")  # 32 integer digits cannot fit in 26
    assert not is_widening("VARCHAR", "DECIMAL(38,10)")
    conn = duckdb.connect(str(tmp_path / "t.duckdb"))
    conn.execute("CREATE SCHEMA raw")
    conn.execute("CREATE TABLE raw.t (x DECIMAL(38,10))")
    with pytest.raises(WarehouseSchemaError, match="raw.t.x is DECIMAL"):
        widen_column(conn, "raw.t", "x", "DECIMAL(18, 6)")  # would lose decimals
    # More decimals at the same width: allowed while every stored value fits the integer digits left.
    conn.execute("CREATE TABLE raw.u (x DECIMAL(38,6), y DECIMAL(38,6))")
    conn.execute("INSERT INTO raw.u VALUES (123456789012345678.123456, 10000000000000000000000000000.5)")
    widen_column(conn, "raw.u", "x", "DECIMAL(38, 10)")
    assert conn.execute("SELECT x FROM raw.u").fetchone()[0] == Decimal("123456789012345678.123456")
    with pytest.raises(WarehouseSchemaError, match="raw.u.y"):
        widen_column(conn, "raw.u", "y", "DECIMAL(38, 10)")  # 10^28 does not fit 28 integer digits
    ensure_warehouse(conn)  # a current warehouse is left as it is
    conn.close()
