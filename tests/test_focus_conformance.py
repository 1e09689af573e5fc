"""FOCUS 1.2 conformance of core.cost_lines: the project's own check of focus-validator 2.2.1's
root-column and dataset rules (pipelines/warehouse/focus_conformance.py) passes on the demo and on a
warehouse of every shared billing sample. `make focus-validate` runs the validator itself."""

import duckdb
import pytest

from models.focus import FOCUS_12_MANDATORY_COLUMNS, SERVICE_SUBCATEGORIES, UNIT_FORMAT_REGEX
from pipelines.warehouse.focus_conformance import _line_violations, check, rules
from pipelines.warehouse.connection import SQL_DIR
from tests.conftest import run_pipeline, sample


@pytest.fixture(scope="module")
def samples_warehouse(tmp_path_factory):
    """Every shared billing sample in one warehouse (four of them do not load: the run says so)."""
    warehouse = tmp_path_factory.mktemp("focus_samples") / "warehouse.duckdb"
    run_pipeline(sample("billing"), warehouse)
    return warehouse


def _failures(path) -> list[dict]:
    conn = duckdb.connect(str(path), read_only=True)
    try:
        return check(conn)
    finally:
        conn.close()


def test_demo_conforms_to_focus_12(demo_run):
    assert _failures(demo_run.out / "warehouse.duckdb") == []


def test_every_sample_conforms_to_focus_12(samples_warehouse):
    conn = duckdb.connect(str(samples_warehouse), read_only=True)
    providers = {r[0] for r in conn.execute("SELECT DISTINCT x_Connector FROM core.cost_lines").fetchall()}
    conn.close()
    assert {"aws_cur", "azure_cost", "gcp_billing", "oci_cost", "focus"} <= providers
    assert _failures(samples_warehouse) == []


def test_the_check_covers_every_mandatory_column():
    checked = {r.column for r in rules() if r.id.startswith("CostAndUsage-D-")}
    assert checked == set(FOCUS_12_MANDATORY_COLUMNS)


def test_the_check_finds_what_the_validator_would(samples_warehouse):
    """A conformant table, broken one rule at a time: each break is reported under its rule id."""
    conn = duckdb.connect()
    conn.execute(f"ATTACH '{samples_warehouse}' AS wh (READ_ONLY)")
    conn.execute("CREATE SCHEMA core; CREATE TABLE core.cost_lines AS SELECT * FROM wh.core.cost_lines")
    rowid = "(SELECT min(rowid) FROM core.cost_lines WHERE BilledCost <> 0 AND ChargeCategory = 'Usage')"
    conn.execute(f"""UPDATE core.cost_lines SET ContractedCost = NULL, PricingUnit = 'GB-Month', PricingQuantity = 1,
                     InvoiceIssuerName = 'Some Reseller Ltd', InvoiceId = NULL, ServiceSubcategory = 'Other (Web)'
                     WHERE rowid = {rowid}""")
    conn.execute("UPDATE core.cost_lines SET ChargeFrequency = 'Usage-Based' WHERE rowid = "
                 "(SELECT min(rowid) FROM core.cost_lines WHERE ChargeCategory = 'Purchase')")
    conn.execute("ALTER TABLE core.cost_lines DROP COLUMN BillingPeriodEnd")
    found = {f["rule"] for f in check(conn)}
    assert {"ContractedCost-C-003-M", "PricingUnit-C-003-O", "BilledCost-C-005-C", "InvoiceId-C-003-C",
            "ServiceSubcategory-C-004-M", "ServiceName-C-008-C", "ChargeFrequency-C-004-C",
            "CostAndUsage-D-010-M"} <= found


def test_every_line_rule_counted_in_one_pass_as_alone_and_samples_stay_few(samples_warehouse):
    """The line rules are counted in one pass; each count equals its rule run alone, and a rule broken
    on every line reports every line but only a few samples (the lines are never all fetched)."""
    conn = duckdb.connect()
    conn.execute(f"ATTACH '{samples_warehouse}' AS wh (READ_ONLY)")
    conn.execute("CREATE SCHEMA core; CREATE TABLE core.cost_lines AS "
                 "SELECT * FROM wh.core.cost_lines, range(20)")  # every line twenty times
    lines = conn.execute("SELECT count(*) FROM core.cost_lines").fetchone()[0]
    conn.execute("UPDATE core.cost_lines SET ChargeClass = 'Bogus ' || (rowid % 97), "
                 "BillingCurrency = lower(BillingCurrency) WHERE rowid % 3 = 0")
    line_rules = [r for r in rules() if r.where]
    counted = _line_violations(conn, "core.cost_lines", line_rules)
    params = {"unit_format": UNIT_FORMAT_REGEX}
    for rule in line_rules:
        query = rule.query.replace("{t}", "core.cost_lines")
        alone = conn.execute(f"SELECT count(*) FROM ({query})", params if "$unit_format" in query else None).fetchone()[0]
        assert counted[rule.id] == alone, rule.id
    found = {f["rule"]: f for f in check(conn)}
    broken = (lines + 2) // 3
    assert found["ChargeClass allowed values"]["violations"] == broken
    assert len(found["ChargeClass allowed values"]["sample"]) == 5
    assert found["BillingCurrency format"]["violations"] == broken


@pytest.mark.parametrize("unit,expected", [
    ("GB-Month", "GB-Months"), ("gibibyte month", "GiB-Months"), ("gibibyte", "GiB"), ("tebibyte", "TiB"),
    ("hour", "Hours"), ("Hrs", "Hours"), ("GB Hours", "GB-Hours"), ("OCPU Per Hour", "OCPU/Hour"),
    ("Gigabyte Per Hour", "GB/Hour"), ("Lambda-GB-Seconds", "Lambda GB-Seconds"),
    ("GiB/Second-Months", "GiB Per Second-Months"), ("GPU-Hours", "GPU-Hours"), ("API Requests", "API Requests"),
    ("Units/Month", "Units/Month"), (None, None),
    # A block keeps its count (FOCUS's '<quantity> <unit>'); a block of one is the unit.
    ("10 Hours", "10 Hours"), ("10000 Units", "10000 Units"), ("1 Hour", "Hours"), ("1 GB/Month", "GB/Month"),
    ("Units/3 Months", "Units/3 Months"),
])
def test_pricing_units_take_focus_unit_format(unit, expected):
    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    got = conn.execute("SELECT focus_unit(?)", [unit]).fetchone()[0]
    assert got == expected
    if got is not None:
        assert conn.execute("SELECT regexp_matches(?, ?)", [got, UNIT_FORMAT_REGEX]).fetchone()[0]


def test_every_azure_distinct_unit_takes_focus_unit_format():
    """The Azure connector writes the pricing-unit table's distinct units as ConsumedUnit and
    PricingUnit: each must leave core.cost_lines (focus_unit) in FOCUS's UnitFormat."""
    import csv

    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    path = SQL_DIR.parent / "models" / "data" / "azure_pricing_units.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        units = {r["DistinctUnits"] for r in csv.DictReader(fh)}
    failing = [(u, f) for u in sorted(units) for f in [conn.execute("SELECT focus_unit(?)", [u]).fetchone()[0]]
               if f is None or not conn.execute("SELECT regexp_matches(?, ?)", [f, UNIT_FORMAT_REGEX]).fetchone()[0]]
    assert len(units) > 50 and failing == []


def test_subcategory_parents_match_the_spec_table():
    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    for sub, parent in SERVICE_SUBCATEGORIES.items():
        assert conn.execute("SELECT focus_subcategory_parent(?)", [sub]).fetchone()[0] == parent, sub
    assert conn.execute("SELECT focus_subcategory_parent('Other (Nonsense)')").fetchone()[0] is None
    assert conn.execute("SELECT focus_subcategory_parent('GPU Clouds')").fetchone()[0] is None
