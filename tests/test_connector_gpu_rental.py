"""GPU-rental invoices through the declarative mappings: English and Chinese headers."""

import csv
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa

from connectors.base import ConnectorError
from connectors.gpu_rental import GpuRentalConnector, MAPPINGS_DIR
from connectors.registry import detect
from models.schemas import COST_LINE
from tests.conftest import read_context

GENERIC = """Invoice ID,Account ID,Instance ID,Instance Name,Region,GPU Model,GPU Count,Billing Mode,Start Time,End Time,Hours,Unit Price (per GPU-hour),Amount,Currency,Project
INV-1,acc-9,ins-1,gpu-node-01,us-west,NVIDIA A100-SXM4-80GB,8,Monthly,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,720,1.25,7200.00,usd,llm
INV-1,acc-9,ins-2,gpu-node-02,us-west,NVIDIA H100 80GB HBM3,1,On-Demand,2026-09-03T00:00:00Z,2026-09-03T10:00:00Z,10,2.49,24.90,USD,llm
INV-1,acc-9,ins-3,gpu-node-03,us-west,L40S,2,barter,2026-09-03T00:00:00Z,2026-09-03T10:00:00Z,10,1.00,20.00,USD,llm
"""
CHINESE = """账单编号,账号ID,实例ID,实例名称,地域,GPU型号,GPU数量,计费方式,开始时间,结束时间,时长(小时),单价(元/卡时),金额,币种
B-1,u-7,ins-a,gpu-a100-01,华东1,A100 80G,8,包月,2026-09-01 08:00:00,2026-09-02 08:00:00,24,1.85,355.20,CNY
B-1,u-7,ins-r,gpu-rtx6000-01,华东1,RTX 6000 Ada,1,按量计费,2026-09-01 08:00:00,2026-09-01 09:00:00,1,0.58,0.58,CNY
B-1,u-7,ins-x,gpu-x,华东1,A100 80G,1,包月,昨天,2026-09-01 09:00:00,1,1.85,1.85,CNY
"""


def read(mapping, text, tmp_path, name):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    connector = GpuRentalConnector.from_file(MAPPINGS_DIR / mapping)
    assert detect(path).connector.name == connector.name
    ctx = read_context(name)
    return pa.Table.from_batches(list(connector.read(path, ctx)), schema=COST_LINE).to_pylist(), ctx


def test_english_invoice_becomes_focus_charges(tmp_path):
    rows, ctx = read("gpu_rental_generic.yaml", GENERIC, tmp_path, "invoice.csv")
    monthly, on_demand = rows
    assert (monthly["BilledCost"], monthly["BillingCurrency"], monthly["x_GpuModel"], monthly["x_GpuCount"]) == (
        Decimal("7200.000000"), "USD", "A100-80GB", 8)
    assert (monthly["PricingCategory"], monthly["ChargeFrequency"], monthly["ConsumedQuantity"]) == ("Committed", "Recurring", Decimal("5760"))
    assert monthly["ListCost"] == Decimal("7200.000000")  # 5,760 card-hours × 1.25
    assert (on_demand["PricingCategory"], on_demand["x_GpuModel"], on_demand["ResourceName"]) == ("Standard", "H100-80GB", "gpu-node-02")
    assert monthly["x_ExtraColumns"] == '{"Project":"llm"}'
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(3, "billing mode 'barter' is not in the mapping")]


def test_chinese_invoice_in_china_standard_time(tmp_path):
    rows, ctx = read("gpu_rental_cn.yaml", CHINESE, tmp_path, "账单.csv")
    a100, rtx = rows
    assert a100["ChargePeriodStart"] == datetime(2026, 9, 1, tzinfo=UTC)  # 08:00 in Shanghai
    assert (a100["BilledCost"], a100["PricingCategory"], a100["ProviderName"], a100["x_GpuCount"]) == (
        Decimal("355.200000"), "Committed", "GPU 云", 8)
    assert (rtx["BilledCost"], rtx["PricingCategory"], rtx["x_GpuModel"]) == (Decimal("0.580000"), "Standard", "RTX-6000-Ada")
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(3, "start '昨天' is not a time")]


def test_currencies_must_be_iso_codes_and_months_are_billing_periods(tmp_path):
    bad = GENERIC.replace(",usd,llm", ",[/],llm")
    rows, ctx = read("gpu_rental_generic.yaml", bad, tmp_path, "invoice.csv")
    assert [q["reason"] for q in ctx.quarantined][:1] == ["currency '[/]' is not an ISO 4217 code"]
    rows, _ = read("gpu_rental_cn.yaml", CHINESE, tmp_path, "账单.csv")
    # 2026-09-01 08:00 in Shanghai opens September there: the period starts at 2026-08-31 16:00 UTC.
    assert rows[0]["BillingPeriodStart"] == datetime(2026, 8, 31, 16, tzinfo=UTC)
    assert rows[0]["BillingPeriodEnd"] == datetime(2026, 9, 30, 16, tzinfo=UTC)


def test_a_gbk_encoded_invoice_reads_with_its_mapping(tmp_path):
    import yaml

    mapping = yaml.safe_load((MAPPINGS_DIR / "gpu_rental_cn.yaml").read_text(encoding="utf-8"))
    mapping["encoding"] = "gbk"  # many Chinese consoles export GBK
    path = tmp_path / "gbk.csv"
    path.write_bytes(CHINESE.encode("gbk"))
    ctx = read_context("gbk.csv")
    rows = pa.Table.from_batches(list(GpuRentalConnector(mapping).read(path, ctx)), schema=COST_LINE).to_pylist()
    assert [r["BilledCost"] for r in rows] == [Decimal("355.200000"), Decimal("0.580000")]


# --- Mapping files without code: schema check, defaults, computed fields (README "Mapping files") ---

import shutil  # noqa: E402
from datetime import timedelta  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from connectors import registry  # noqa: E402
from connectors.gpu_rental import InvalidMapping, mapping_connectors  # noqa: E402
from connectors.mapping_schema import MappingError, load_mapping, validate_mapping  # noqa: E402
from pipelines.cli.main import app  # noqa: E402
from pipelines.ingest.landing import ingest_landing  # noqa: E402
from pipelines.warehouse.connection import connect, fetch_all  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402

CNY_INVOICE = FIXTURES / "gpu_rental_cny_daily.csv"
CNY_MAPPING = FIXTURES / "mappings" / "gpu_rental_cny_daily.yaml"


@pytest.fixture
def user_mappings(tmp_path, monkeypatch):
    """A FINOPS_MAPPINGS folder; the registry rediscovers mappings while the test runs."""
    folder = tmp_path / "mappings"
    folder.mkdir()
    monkeypatch.setenv("FINOPS_MAPPINGS", str(folder))
    registry.all_connectors.cache_clear()
    yield folder
    monkeypatch.delenv("FINOPS_MAPPINGS")
    registry.all_connectors.cache_clear()


def ingest(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    shutil.copy(CNY_INVOICE, landing / "cny_daily.csv")
    conn = connect(tmp_path / "wh.duckdb")
    try:
        summary = ingest_landing(conn, landing, timezone="UTC")
        files = fetch_all(conn, "SELECT status, connector, rows_loaded, rows_quarantined, source_total, quarantined_total, detail FROM raw.files")
        lines = fetch_all(conn, "SELECT ChargePeriodStart, ChargePeriodEnd, ConsumedQuantity, BilledCost, BillingCurrency, "
                                "x_GpuModel, x_GpuCount, PricingCategory, RegionId FROM raw.cost_lines ORDER BY x_SourceRow")
        quarantine = fetch_all(conn, "SELECT reason FROM raw.quarantine ORDER BY x_SourceRow")
    finally:
        conn.close()
    return summary, files, lines, quarantine


def test_the_cny_daily_invoice_loads_through_its_mapping_alone(tmp_path, user_mappings):
    shutil.copy(CNY_MAPPING, user_mappings)
    _, files, lines, quarantine = ingest(tmp_path)
    assert [f[:5] for f in files] == [("loaded", "gpu_rental_cny_daily", 21, 0, Decimal("14640.000000"))]
    assert quarantine == []
    assert len(lines) == 21 and sum(line[3] for line in lines) == Decimal("14640.00")
    for start, end, hours, *_ in lines:
        assert end - start == timedelta(hours=float(hours))  # computed: end = start + hours
    first, third_a100 = lines[0], lines[7]
    assert first[0] == datetime(2026, 8, 31, 16, tzinfo=UTC)  # 2026-09-01 00:00 in Shanghai
    assert first[4:] == ("CNY", "A100-80GB", 1, "Standard", "cn-east")  # defaults: currency, gpu_count, on_demand, region
    assert third_a100[1] - third_a100[0] == timedelta(hours=18, minutes=30)
    assert {line[5] for line in lines} == {"A100-80GB", "RTX-4090"}


def test_without_its_defaults_every_row_is_quarantined_and_the_file_says_so(tmp_path, user_mappings):
    mapping = yaml.safe_load(CNY_MAPPING.read_text(encoding="utf-8"))
    del mapping["defaults"]
    (user_mappings / "cny.yaml").write_text(yaml.safe_dump(mapping, allow_unicode=True), encoding="utf-8")
    summary, files, lines, quarantine = ingest(tmp_path)
    status, connector, loaded, quarantined, source_total, quarantined_total, detail = files[0]
    assert (status, loaded, quarantined, lines) == ("quarantined", 0, 21, [])
    assert summary.outcomes[0].status == "quarantined"
    assert source_total == quarantined_total == Decimal("14640.000000")  # the money still reconciles
    assert quarantine == [("GPU count '' is not a whole number",)] * 21
    assert detail.startswith("every row quarantined (21)")
    # Fix the mapping: the next run reads the file again, and its quarantine rows give way.
    shutil.copy(CNY_MAPPING, user_mappings / "cny.yaml")
    registry.all_connectors.cache_clear()
    _, files, lines, quarantine = ingest(tmp_path)
    assert [f[:4] for f in files] == [("loaded", "gpu_rental_cny_daily", 21, 0)] and quarantine == []


def test_an_unknown_key_is_an_error_naming_the_file_and_the_key(tmp_path):
    text = CNY_MAPPING.read_text(encoding="utf-8").replace("  amount: amount", "  amout: amount")
    bad = tmp_path / "x.yaml"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(MappingError) as caught:
        load_mapping(bad)
    assert str(caught.value) == (f"{bad}: columns.amount: required field missing; "
                                 "columns.amout: unknown field; did you mean amount?")
    bad.write_text(text.replace("amout", "amount").replace("defaults:", "defualts:"), encoding="utf-8")
    with pytest.raises(MappingError, match=r"x.yaml: defualts: unknown field; did you mean defaults\?"):
        load_mapping(bad)


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(computed={"end": "start * hours"}), "computed.end: input should be 'start + hours' (got 'start * hours')"),
    (lambda m: m.pop("computed"), "columns.end: required field missing; or declare computed: {end: start + hours}"),
    (lambda m: m["defaults"].update(billing_mode="hourly"), "defaults.billing_mode: input should be"),
    (lambda m: m["defaults"].update(gpu_count="one"), "defaults.gpu_count: input should be a valid integer"),
    (lambda m: m.update(timezone="Asia/Beijing"), "timezone: unknown IANA time zone 'Asia/Beijing'"),
    (lambda m: m.update(required=["start", "end"]), "required: 'end' has no column under columns"),
    (lambda m: m.update(billing_modes={"on_demand": ["hourly"], "spot": ["Hourly"]}), "billing_modes.spot: 'Hourly' is also a word for on_demand"),
    (lambda m: m.update(delimiter=";;"), "delimiter: ';;' is not a field separator"),
    (lambda m: m.update(numbers={"decimal_separator": ","}), "numbers.decimal_separator: ',' is also the delimiter"),
    (lambda m: m.update(numbers={"decimal_separator": ",", "thousands_separator": ","}),
     "numbers: thousands_separator: ',' is also the decimal separator"),
    (lambda m: m.update(numbers={"decimal": ","}), "numbers.decimal: unknown field"),
    (lambda m: m.update(numbers={"currency_symbol": "US$1"}), "numbers: currency_symbol: 'US$1' holds a digit"),
    (lambda m: m.update(numbers={"currency_symbol": "$ "}), "numbers: currency_symbol: '$ ' holds a digit"),
    (lambda m: m.update(numbers={"thousands_separator": ",", "currency_symbol": ".,"}),
     "numbers: currency_symbol: '.,' holds a digit, a sign, a bracket or spaces around it, or only separators"),
    (lambda m: m.update(numbers={"negative": "red"}), "numbers.negative: input should be 'leading_minus', 'brackets' or 'trailing_minus' (got 'red')"),
])
def test_schema_errors_say_which_key_and_why(tmp_path, change, message):
    mapping = yaml.safe_load(CNY_MAPPING.read_text(encoding="utf-8"))
    change(mapping)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(mapping, allow_unicode=True), encoding="utf-8")
    with pytest.raises(MappingError) as caught:
        load_mapping(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_hours_are_computed_from_start_and_end_when_declared(tmp_path):
    mapping = yaml.safe_load((MAPPINGS_DIR / "gpu_rental_generic.yaml").read_text(encoding="utf-8"))
    del mapping["columns"]["hours"]
    mapping["computed"] = {"hours": "end - start"}
    path = tmp_path / "invoice.csv"
    path.write_text(GENERIC.replace(",Hours,", ",Duration,"), encoding="utf-8")
    rows = pa.Table.from_batches(list(GpuRentalConnector(mapping).read(path, read_context())), schema=COST_LINE).to_pylist()
    assert [r["ConsumedQuantity"] for r in rows] == [Decimal("5760"), Decimal("10")]  # 720 h × 8 GPUs; 10 h × 1


def test_the_first_release_spelling_default_currency_still_reads():
    assert load_mapping(MAPPINGS_DIR / "gpu_rental_cn.yaml").defaults.currency == "CNY"


def test_invalid_mappings_are_listed_with_their_error_and_never_crash(tmp_path, user_mappings):
    (user_mappings / "nameless.yaml").write_text("provider: X\ncolumns: {start: s, end: e, amount: a}\n", encoding="utf-8")
    (user_mappings / "broken.yaml").write_text("name: [unclosed\n", encoding="utf-8")
    (user_mappings / "focus.yaml").write_text("name: focus\nprovider: X\ncolumns: {start: s, end: e, amount: a}\n", encoding="utf-8")
    shutil.copy(CNY_MAPPING, user_mappings)
    assert [c.name for c in mapping_connectors() if not isinstance(c, InvalidMapping)] == [
        "gpu_rental_cn", "gpu_rental_generic", "focus", "gpu_rental_cny_daily"]
    connectors = registry.all_connectors()
    assert [c.name for c in connectors if isinstance(c, GpuRentalConnector)] == ["gpu_rental_cn", "gpu_rental_generic", "gpu_rental_cny_daily"]
    assert sorted(c.error.source.rsplit("/", 1)[-1] for c in connectors if isinstance(c, InvalidMapping)) == [
        "broken.yaml", "focus.yaml", "nameless.yaml"]
    listing = CliRunner().invoke(app, ["connectors"], terminal_width=400)
    # Exit 0: one bad file of a user's must not hide the other connectors from the listing.
    assert listing.exit_code == 0, listing.output
    text = " ".join(listing.output.replace("│", " ").split())  # the table's cells, unwrapped
    assert "nameless.yaml: name: required field missing" in text
    assert "broken.yaml: not valid YAML" in text
    assert "focus.yaml: name: 'focus' is a built-in connector's name" in text
    assert "gpu_rental_cny_daily" in text and "INVALID" in text
    # A run goes on with the valid mappings, names the file a broken mapping left unread, and reports it.
    _, files, _, _ = ingest(tmp_path)
    assert files[0][0] == "loaded"
    (user_mappings / "gpu_rental_cny_daily.yaml").unlink()
    registry.all_connectors.cache_clear()
    detection = registry.detect(CNY_INVOICE)
    assert detection.connector is None and "not tried: invalid mapping" in detection.reason and "nameless.yaml" in detection.reason


def test_a_run_reports_a_fully_quarantined_file_and_an_invalid_mapping(tmp_path, user_mappings, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    mapping = yaml.safe_load(CNY_MAPPING.read_text(encoding="utf-8"))
    del mapping["defaults"]
    (user_mappings / "cny.yaml").write_text(yaml.safe_dump(mapping, allow_unicode=True), encoding="utf-8")
    (user_mappings / "typo.yaml").write_text(CNY_MAPPING.read_text(encoding="utf-8").replace("name: gpu_rental_cny_daily", "name: typo")
                                             .replace("defaults:", "defualts:"), encoding="utf-8")
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(CNY_INVOICE, landing / "cny_daily.csv")
    result = CliRunner().invoke(app, ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb")])
    text = " ".join(result.output.split())
    assert result.exit_code == 1  # a broken mapping and a file that loaded nothing both fail the run
    assert "invalid mapping: " in text and "typo.yaml — defualts: unknown field; did you mean defaults?" in text
    assert "quarantined: cny_daily.csv — every row quarantined (21 rows, nothing loaded), e.g. GPU count '' is not a whole number" in text
    assert "check warned: raw/files:no_fully_quarantined_files — cny_daily.csv" in text
    assert "check warned: raw/files:mapping_files_valid — " in text and "defualts: unknown field" in text.split("mapping_files_valid — ")[1]
    assert "check failed" not in text  # per-file money still reconciles: 14,640 CNY stated, all of it quarantined


WITH_CREDITS = (GENERIC.splitlines()[0] + ",Type\n"
                + "INV-2,acc-9,ins-1,gpu-node-01,us-west,NVIDIA H100 80GB HBM3,8,On-Demand,2026-11-02T00:00:00Z,2026-11-02T10:00:00Z,10,2.50,200.00,EUR,llm,charge\n"
                + "INV-2,acc-9,,,us-west,,,,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,,,-150.00,EUR,llm,Service Credit\n"
                + "INV-2,acc-9,,,,,,,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,,,9.50,EUR,,VAT\n"
                + "INV-2,acc-9,ins-1,gpu-node-01,us-west,NVIDIA H100 80GB HBM3,8,On-Demand,2026-11-03T00:00:00Z,2026-11-03T01:00:00Z,1,2.50,20.00,EUR,llm,\n"
                + "INV-2,acc-9,,,,,,,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,,,5.00,EUR,,rebate?\n")


def credits_mapping() -> dict:
    mapping = yaml.safe_load((MAPPINGS_DIR / "gpu_rental_generic.yaml").read_text(encoding="utf-8"))
    mapping["columns"]["charge_category"] = "Type"
    mapping["charge_categories"] = {"usage": ["charge"], "credit": ["service credit"], "tax": ["vat"]}
    return mapping


def test_credits_and_taxes_are_their_own_charge_categories(tmp_path):
    """A credit names no GPUs nor billing mode: it loads as a FOCUS Credit (no quantity, unit price or
    pricing category), not quarantined as a bad GPU count; an unknown category word is quarantined."""
    path = tmp_path / "invoice.csv"
    path.write_text(WITH_CREDITS, encoding="utf-8")
    ctx = read_context("invoice.csv")
    rows = pa.Table.from_batches(list(GpuRentalConnector(credits_mapping()).read(path, ctx)), schema=COST_LINE).to_pylist()
    assert [(r["ChargeCategory"], r["BilledCost"]) for r in rows] == [
        ("Usage", Decimal("200.00")), ("Credit", Decimal("-150.00")), ("Tax", Decimal("9.50")), ("Usage", Decimal("20.00"))]
    credit = rows[1]
    assert (credit["PricingCategory"], credit["ConsumedQuantity"], credit["ListUnitPrice"], credit["SkuId"], credit["x_GpuCount"]) == (
        None, None, None, None, None)
    assert (credit["ChargeFrequency"], credit["ListCost"], credit["ChargeDescription"]) == ("One-Time", Decimal("-150.00"), "Credit (Service Credit)")
    assert (rows[0]["PricingCategory"], rows[0]["ConsumedQuantity"]) == ("Standard", Decimal("80"))
    assert [q["reason"] for q in ctx.quarantined] == ["charge category 'rebate?' is not in the mapping"]
    assert ctx.source_total == Decimal("84.50") and ctx.quarantined_total == Decimal("5.00")


def test_category_words_need_their_column_and_mean_one_category(tmp_path):
    mapping = credits_mapping()
    del mapping["columns"]["charge_category"]
    with pytest.raises(MappingError, match="charge_categories: the words need a column"):
        validate_mapping(mapping, "m.yaml")
    mapping = credits_mapping()
    mapping["charge_categories"]["usage"].append("VAT")
    with pytest.raises(MappingError, match="'vat' is also a word for|'VAT' is also a word for"):
        validate_mapping(mapping, "m.yaml")


def test_a_users_mapping_naming_more_of_the_header_wins_over_the_bundled_one(tmp_path, user_mappings):
    """The bundled generic mapping's columns are all in this invoice's header, and so are the user's
    mapping's, which also names the Type column: the file is the user's (before, the first listed,
    the bundled one, took it and quarantined its credit)."""
    mapping = {**credits_mapping(), "name": "nimbus", "provider": "Nimbus GPU"}
    mapping["required"] = [*mapping["required"], "charge_category"]
    (user_mappings / "nimbus.yaml").write_text(yaml.safe_dump(mapping), encoding="utf-8")
    path = tmp_path / "invoice.csv"
    path.write_text(WITH_CREDITS, encoding="utf-8")
    detection = detect(path)
    assert detection.connector.name == "nimbus"
    assert detection.reason == "recognised by nimbus (also matched: gpu_rental_generic)"
    # An invoice without the Type column is not the user's mapping's: the generic one reads it.
    plain = tmp_path / "plain.csv"
    plain.write_text(GENERIC, encoding="utf-8")
    assert detect(plain).connector.name == "gpu_rental_generic"


def test_a_credit_and_a_tax_reach_the_warehouse_conformant_and_money_is_conserved(tmp_path, user_mappings, monkeypatch):
    from tests.conftest import run_pipeline

    (user_mappings / "nimbus.yaml").write_text(yaml.safe_dump({**credits_mapping(), "name": "nimbus"}), encoding="utf-8")
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "invoice.csv").write_text(WITH_CREDITS, encoding="utf-8")
    outcome = run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="EUR")
    assert outcome.success and not outcome.failed_checks and not outcome.warned_checks, (outcome.failed_checks, outcome.warned_checks)
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        lines = dict(fetch_all(conn, "SELECT ChargeCategory, sum(BilledCost) FROM core.cost_lines GROUP BY ALL"))
        assert lines == {"Usage": Decimal("220.00"), "Credit": Decimal("-150.00"), "Tax": Decimal("9.50")}
        # Every cent reaches a phase: the attribution conserves the credit and the tax too.
        assert fetch_all(conn, "SELECT sum(amount_billing) FROM marts.cost_attribution") == [(Decimal("79.50"),)]
        assert fetch_all(conn, "SELECT reason FROM raw.quarantine") == [("charge category 'rebate?' is not in the mapping",)]
    finally:
        conn.close()


def test_a_mapping_without_a_zone_reads_times_and_months_in_the_runs_zone(tmp_path):
    """`timezone: null` means --timezone for a time without an offset and for the billing month it
    falls in: midnight of 1 September in Shanghai is 16:00 UTC on 31 August, in September's bill."""
    local = GENERIC.replace("2026-09-01T00:00:00Z,2026-10-01T00:00:00Z", "2026-09-01 00:00:00,2026-10-01 00:00:00")
    path = tmp_path / "invoice.csv"
    path.write_text(local, encoding="utf-8")
    connector = GpuRentalConnector.from_file(MAPPINGS_DIR / "gpu_rental_generic.yaml")
    assert connector.mapping.timezone is None
    ctx = read_context("invoice.csv", timezone="Asia/Shanghai")
    monthly = pa.Table.from_batches(list(connector.read(path, ctx)), schema=COST_LINE).to_pylist()[0]
    assert monthly["ChargePeriodStart"] == datetime(2026, 8, 31, 16, tzinfo=UTC)
    assert (monthly["BillingPeriodStart"], monthly["BillingPeriodEnd"]) == (
        datetime(2026, 8, 31, 16, tzinfo=UTC), datetime(2026, 9, 30, 16, tzinfo=UTC))


def test_a_usage_line_of_negative_hours_is_quarantined(tmp_path):
    rows, ctx = read("gpu_rental_generic.yaml", GENERIC.replace(",10,2.49,24.90,", ",-10,2.49,24.90,"), tmp_path, "invoice.csv")
    assert [r["ResourceName"] for r in rows] == ["gpu-node-01"]
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [
        (2, "hours '-10' is negative"), (3, "billing mode 'barter' is not in the mapping")]


def test_a_mapped_column_the_header_lacks_is_announced_not_silently_defaulted(tmp_path):
    """A misspelt optional column (`Wahrung` for `Währung`) would leave its default, or nothing, on
    every line unannounced: the file's load says which column is missing and what stands in."""
    text = GENERIC.replace(",Region,", ",Zone,")
    rows, ctx = read("gpu_rental_generic.yaml", text, tmp_path, "invoice.csv")
    assert len(rows) == 2 and all(r["RegionId"] is None for r in rows)
    assert ctx.warnings == ["columns.region: the header has no column 'Region'; it is left empty on every line"]
    _, whole = read("gpu_rental_generic.yaml", GENERIC, tmp_path, "whole.csv")
    assert whole.warnings == []


def test_an_inclusive_end_date_ends_the_charge_at_the_next_local_midnight(tmp_path):
    """`end_date_inclusive: true`: an invoice's `30.09.2026` is its last day billed, so the charge ends
    at 1 October 00:00 in the mapping's zone (22:00 UTC on 30 September in Berlin), not a day short.
    An end with a time is kept; without the key a date alone is its own midnight, as before."""
    mapping = yaml.safe_load((MAPPINGS_DIR / "gpu_rental_generic.yaml").read_text(encoding="utf-8"))
    mapping.update(timezone="Europe/Berlin", time_formats=["%d.%m.%Y %H:%M", "%d.%m.%Y"], end_date_inclusive=True)
    text = GENERIC.replace("2026-09-01T00:00:00Z,2026-10-01T00:00:00Z", "01.09.2026,30.09.2026") \
                  .replace("2026-09-03T00:00:00Z,2026-09-03T10:00:00Z", "03.09.2026 00:00,03.09.2026 10:00")
    path = tmp_path / "invoice.csv"
    path.write_text(text, encoding="utf-8")

    def ends(m):
        rows = pa.Table.from_batches(list(GpuRentalConnector(m).read(path, read_context())), schema=COST_LINE).to_pylist()
        return [r["ChargePeriodEnd"] for r in rows]

    assert ends(mapping) == [datetime(2026, 9, 30, 22, tzinfo=UTC), datetime(2026, 9, 3, 8, tzinfo=UTC)]
    assert ends({**mapping, "end_date_inclusive": False})[0] == datetime(2026, 9, 29, 22, tzinfo=UTC)


def test_a_european_invoice_with_semicolons_and_decimal_commas_reads_to_the_cent(tmp_path):
    """`delimiter: ';'` and `numbers: {decimal_separator: ',', thousands_separator: '.'}`: a console
    that writes `7.200,00` in a `;`-separated file. Defaults keep their own (YAML) numbers."""
    mapping = yaml.safe_load((MAPPINGS_DIR / "gpu_rental_generic.yaml").read_text(encoding="utf-8"))
    mapping.update(name="gpu_rental_eu", delimiter=";", numbers={"decimal_separator": ",", "thousands_separator": "."})
    mapping["defaults"] = {**(mapping.get("defaults") or {}), "unit_price": "0.5"}
    rows_in = [line.split(",") for line in GENERIC.strip().splitlines()]
    header = ";".join(rows_in[0])
    body = ["INV-1;acc-9;ins-1;gpu-node-01;us-west;NVIDIA A100-SXM4-80GB;8;Monthly;2026-09-01T00:00:00Z;"
            "2026-10-01T00:00:00Z;720;1,25;7.200,00;EUR;llm",
            "INV-1;acc-9;ins-2;gpu-node-02;us-west;NVIDIA H100 80GB HBM3;1;On-Demand;2026-09-03T00:00:00Z;"
            "2026-09-03T10:00:00Z;10,5;;26,145;EUR;llm"]
    path = tmp_path / "rechnung.csv"
    path.write_text("\n".join([header, *body]) + "\n", encoding="utf-8")
    connector = GpuRentalConnector(mapping)
    assert connector.detect(path, path.read_bytes()[:4096])
    ctx = read_context("rechnung.csv")
    rows = pa.Table.from_batches(list(connector.read(path, ctx)), schema=COST_LINE).to_pylist()
    assert [(r["BilledCost"], r["ListUnitPrice"], r["ConsumedQuantity"]) for r in rows] == [
        (Decimal("7200.00"), Decimal("1.25"), Decimal("5760")), (Decimal("26.145"), Decimal("0.5"), Decimal("10.5"))]
    assert ctx.quarantined == [] and ctx.warnings == []


@pytest.mark.parametrize(("numbers", "cells", "read", "quarantined"), [
    # An invoice in dollars: a symbol, commas between thousands, credits in brackets.
    ({"thousands_separator": ",", "currency_symbol": "$", "negative": "brackets"},
     ["$7,200.00", "($12.50)", "$-3.00", "-$4.00", "$ 5.00", "(0.25)", "12.50-", "\u20ac5.00", "($1,2.00)", "$1,234.5$"],
     ["7200.00", "-12.50", "-3.00", "-4.00", "5.00", "-0.25"], ["12.50-", "\u20ac5.00", "($1,2.00)", "$1,234.5$"]),
    # A ledger export in euros: decimal comma, the symbol after the number, a trailing minus.
    ({"decimal_separator": ",", "thousands_separator": ".", "currency_symbol": "\u20ac", "negative": "trailing_minus"},
     ["1.234,56 \u20ac", "12,50-", "12,50 \u20ac-", "-3,00", "(4,00)", "5,00$"],
     ["1234.56", "-12.50", "-12.50", "-3.00"], ["(4,00)", "5,00$"]),
    # A Danish console: `kr.` holds the thousands separator, and is still read as nothing, before or after.
    ({"decimal_separator": ",", "thousands_separator": ".", "currency_symbol": "kr.", "negative": "trailing_minus"},
     ["kr. 1.234,56", "1.234,56 kr.", "12,50 kr.-", "kr.7,00", "kr. 1.234,56 kr.", "1.234,56 kr"],
     ["1234.56", "1234.56", "-12.50", "7.00"], ["kr. 1.234,56 kr.", "1.234,56 kr"]),
    # Rupees: `Rs.` holds the decimal point.
    ({"thousands_separator": ",", "currency_symbol": "Rs.", "negative": "brackets"},
     ["Rs. 1,234.50", "(Rs.12.00)", "Rs 5.00"], ["1234.50", "-12.00"], ["Rs 5.00"]),
    # A blank amount is said to be empty, not quoted as ''.
    ({"thousands_separator": ","}, ["1,000.00", "", "  "], ["1000.00"], ["", "  "]),
])
def test_currency_symbols_and_negatives_read_as_the_mapping_says(tmp_path, numbers, cells, read, quarantined):
    """`numbers: {currency_symbol, negative}`: the symbol before or after the number is read as
    nothing (the currency is the mapping's own), and a negative may be `(12.50)` or `12.50-`. Any
    other way is quarantined quoting the file (an amount in brackets is no positive charge)."""
    mapping = yaml.safe_load((MAPPINGS_DIR / "gpu_rental_generic.yaml").read_text(encoding="utf-8"))
    delimiter = ";" if numbers.get("decimal_separator") == "," else ","
    mapping.update(name="gpu_rental_invoice", delimiter=delimiter, numbers=numbers)
    header = delimiter.join(GENERIC.splitlines()[0].split(","))
    fields = ["INV-1", "acc-9", "ins-{n}", "node-{n}", "eu", "NVIDIA H100 80GB HBM3", "1", "On-Demand", "2026-09-03T00:00:00Z",
              "2026-09-03T10:00:00Z", "10", "", "{amount}", "USD", "llm"]
    with open(tmp_path / "invoice.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, delimiter=delimiter)
        writer.writerow(header.split(delimiter))
        for n, amount in enumerate(cells):
            writer.writerow([f.format(n=n, amount=amount) for f in fields])
    ctx = read_context("invoice.csv")
    rows = pa.Table.from_batches(list(GpuRentalConnector(mapping).read(tmp_path / "invoice.csv", ctx)), schema=COST_LINE).to_pylist()
    assert [r["BilledCost"] for r in rows] == [Decimal(v) for v in read]
    assert [q["reason"] for q in ctx.quarantined] == [
        f"amount '{c}' is not a number" if c.strip() else "amount is empty" for c in quarantined]


def test_a_number_not_written_as_the_mapping_says_is_quarantined_quoting_the_file(tmp_path):
    """With `.` between thousands, `12.34` is no number of this file (it is not 1234), nor is
    `1.2.3,4` or `1.234,56 €`: each line is quarantined, its reason quoting the file's own text."""
    mapping = yaml.safe_load((MAPPINGS_DIR / "gpu_rental_generic.yaml").read_text(encoding="utf-8"))
    mapping.update(name="gpu_rental_eu", delimiter=";", numbers={"decimal_separator": ",", "thousands_separator": "."})
    header = ";".join(GENERIC.splitlines()[0].split(","))
    line = ("INV-1;acc-9;ins-{n};node-{n};eu;NVIDIA H100 80GB HBM3;1;On-Demand;2026-09-03T00:00:00Z;"
            "2026-09-03T10:00:00Z;{hours};2,49;{amount};EUR;llm")
    cells = [("10", "1.234,56"), ("10", "12.34"), ("10", "1.2.3,4"), ("10", "1.234,56 €"), ("10.5", "24,90"), ("10", "-24,9")]
    path = tmp_path / "rechnung.csv"
    body = [line.format(n=i, hours=h, amount=a) for i, (h, a) in enumerate(cells)]
    path.write_text("\n".join([header, *body]) + "\n", encoding="utf-8")
    ctx = read_context("rechnung.csv")
    rows = pa.Table.from_batches(list(GpuRentalConnector(mapping).read(path, ctx)), schema=COST_LINE).to_pylist()
    assert [r["BilledCost"] for r in rows] == [Decimal("1234.56"), Decimal("-24.9")]
    assert [q["reason"] for q in ctx.quarantined] == [
        "amount '12.34' is not a number", "amount '1.2.3,4' is not a number", "amount '1.234,56 €' is not a number",
        "hours is not a number"]


def test_a_misspelt_currency_column_with_a_default_currency_refuses_the_file(tmp_path):
    """`currency: curency` with `defaults: {currency: USD}` over a header holding `currency` (JPY on
    every line): the default billed 1,782,880 JPY as USD, with a warning, exit 0. The file is refused
    with the column the mapping most likely meant; a misspelt column of another field still warns."""
    text = (MAPPINGS_DIR / "gpu_rental_generic.yaml").read_text()
    mapping = tmp_path / "typo.yaml"
    mapping.write_text(text.replace("name: gpu_rental_generic", "name: gpu_rental_typo")
                       .replace("  currency: Currency", "  currency: Curency\ndefaults:\n  currency: USD"))
    connector = GpuRentalConnector.from_file(mapping)
    path = tmp_path / "invoice.csv"
    path.write_text(GENERIC, encoding="utf-8")
    with pytest.raises(ConnectorError, match="columns.currency: the header has no column 'Curency' but has 'Currency'"):
        list(connector.read(path, read_context("invoice.csv")))
    for other in ("Billing Currency", "Curr", "CCY"):  # a currency column by another name
        path.write_text(GENERIC.replace(",Currency,", f",{other},"), encoding="utf-8")
        with pytest.raises(ConnectorError, match=f"but has '{other}'"):
            list(connector.read(path, read_context("invoice.csv")))
    path.write_text(GENERIC.replace(",Region,", ",Regoin,"), encoding="utf-8")
    mapping.write_text(text.replace("name: gpu_rental_generic", "name: gpu_rental_typo"))
    ctx = read_context("invoice.csv")
    list(GpuRentalConnector.from_file(mapping).read(path, ctx))
    assert ctx.warnings == ["columns.region: the header has no column 'Region' (did you mean 'Regoin'?); "
                            "it is left empty on every line"]


def test_an_invoice_id_cell_saying_pending_is_no_invoice_yet(tmp_path):
    """A GPU cloud writes `Pending` (or `N/A`, `-`) in the invoice column of lines not yet invoiced:
    they have no invoice id, the month to date, not an invoice called 'Pending'. A mapping may
    list its own words (`not_invoiced:`), and `[]` reads every word as an id."""
    text = GENERIC.replace("INV-1,acc-9,ins-2", " Pending ,acc-9,ins-2").replace("INV-1,acc-9,ins-3,gpu-node-03,us-west,L40S,2,barter",
                                                                                "N/A,acc-9,ins-3,gpu-node-03,us-west,L40S,2,On-Demand")
    rows, _ = read("gpu_rental_generic.yaml", text, tmp_path, "usage.csv")
    assert [r["InvoiceId"] for r in rows] == ["INV-1", None, None]
    mapping = load_mapping(MAPPINGS_DIR / "gpu_rental_generic.yaml").model_copy(update={"not_invoiced": []})
    path = tmp_path / "usage.csv"
    kept = pa.Table.from_batches(list(GpuRentalConnector(mapping).read(path, read_context("usage.csv"))), schema=COST_LINE).to_pylist()
    assert [r["InvoiceId"] for r in kept] == ["INV-1", "Pending", "N/A"]
