"""The data-quality checks on core.cost_lines judge what DuckDB reduces the table to (distinct
patterns, distinct values with their line counts): they must fail exactly when the whole column
would, and say how many lines are wrong."""

import duckdb
import pytest
from dagster_duckdb import DuckDBResource

from models.focus import REQUIRED_COLUMNS
from pipelines.orchestration.checks import focus_allowed_values, focus_required_not_null


@pytest.fixture
def warehouse(tmp_path):
    """A core.cost_lines of 1,000 good lines plus `bad` ones the caller adds."""
    path = tmp_path / "wh.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE SCHEMA core")
    columns = ", ".join(f"'x' AS \"{c}\"" for c in REQUIRED_COLUMNS
                        if c not in ("ChargeCategory", "PricingCategory", "ChargeFrequency", "ServiceCategory"))
    conn.execute(f"""CREATE TABLE core.cost_lines AS
        SELECT {columns}, 'Usage' AS ChargeCategory, 'Standard' AS PricingCategory, 'Usage-Based' AS ChargeFrequency,
               'Compute' AS ServiceCategory
        FROM range(1000)""")
    conn.close()
    return path


def run(check, path):
    return check(warehouse=DuckDBResource(database=str(path)))


def test_clean_lines_pass_both_checks(warehouse):
    required, allowed = run(focus_required_not_null, warehouse), run(focus_allowed_values, warehouse)
    assert required.passed and allowed.passed
    assert required.metadata["rows"].value == allowed.metadata["rows"].value == 1000


def test_a_null_in_a_required_column_fails_with_its_line_count(warehouse):
    column = REQUIRED_COLUMNS[0]
    conn = duckdb.connect(str(warehouse))
    conn.execute(f'UPDATE core.cost_lines SET "{column}" = NULL WHERE rowid < 3')
    conn.close()
    result = run(focus_required_not_null, warehouse)
    assert not result.passed
    failures = result.metadata["failures"].value
    assert [(f["column"], f["unexpected_count"]) for f in failures] == [(column, 3)]


def test_a_value_outside_focus_fails_with_its_line_count_and_sample(warehouse):
    conn = duckdb.connect(str(warehouse))
    conn.execute("UPDATE core.cost_lines SET ChargeCategory = 'Refund' WHERE rowid < 7")
    conn.execute("UPDATE core.cost_lines SET ChargeCategory = NULL WHERE rowid = 7")  # missing: the not-null check's business
    conn.close()
    result = run(focus_allowed_values, warehouse)
    assert not result.passed
    failures = result.metadata["failures"].value
    assert [(f["column"], f["unexpected_count"], f["sample"]) for f in failures] == [("ChargeCategory", 7, ["Refund"])]
