"""The data-quality checks on core.cost_lines judge what DuckDB reduces the table to (distinct
patterns, distinct values with their line counts): they must fail exactly when the whole column
would, and say how many lines are wrong."""

import duckdb
import pytest

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
    conn = duckdb.connect(str(path), read_only=True)
    try:
        return check(conn)
    finally:
        conn.close()


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


@pytest.mark.parametrize("table, name", [("marts.cost_attribution", "attribution_conserves_money"),
                                         ("marts.daily_series_by_billing_month", "daily_series_conserve_money"),
                                         ("raw.files", "billing_money_reconciles")])
def test_a_failing_blocking_check_stops_its_step_and_the_run_publishes_nothing(tmp_path, table, name):
    """The checks run inside the steps that build their tables: a blocking one that fails is
    recorded, stops the step there (nothing downstream is built) and the warehouse is not published;
    a second run with the check passing publishes as usual."""
    import shutil
    from dataclasses import replace

    from dagster import AssetCheckResult

    from pipelines.orchestration import checks
    from tests.conftest import run_pipeline, sample

    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(sample("billing/focus10_sample_multicloud_1000.csv"), landing / "focus.csv")
    warehouse = tmp_path / "wh.duckdb"
    position = next(i for i, c in enumerate(checks.CHECKS) if (c.table, c.name) == (table, name))
    failing = replace(checks.CHECKS[position], run=lambda conn, *periods: AssetCheckResult(passed=False, metadata={"planted": True}))
    original, checks.CHECKS[position] = checks.CHECKS[position], failing
    try:
        outcome = run_pipeline(landing, warehouse)
    finally:
        checks.CHECKS[position] = original
    assert not outcome.success and not outcome.published
    assert f"{table.replace('.', '/')}:{name}" in outcome.failed_checks
    assert not warehouse.exists()  # the first run's warehouse was never published
    outcome = run_pipeline(landing, warehouse)
    assert outcome.success and outcome.published
    conn = duckdb.connect(str(warehouse), read_only=True)
    assert conn.execute("SELECT count(*) > 0 FROM marts.daily_cost").fetchall() == [(True,)]
    conn.close()


def test_the_money_check_judges_the_billing_months_the_run_attributed(tmp_path):
    """A run that attributes one billing month checks that month's charges (a new delivery's check
    costs its own month); a whole build checks every month; a run that attributed nothing, none."""
    from pipelines.orchestration.checks import attribution_conserves_money
    from pipelines.warehouse.connection import SQL_DIR

    conn = duckdb.connect(str(tmp_path / "wh.duckdb"))
    conn.execute((SQL_DIR / "macros.sql").read_text())
    conn.execute("CREATE SCHEMA core; CREATE SCHEMA marts")
    conn.execute("""CREATE TABLE core.cost_lines AS SELECT * FROM (VALUES
        ('aug-1', TIMESTAMPTZ '2026-08-01 00:00:00+00', 10.00::DECIMAL(38, 10), 10.00::DECIMAL(38, 10)),
        ('sep-1', TIMESTAMPTZ '2026-09-01 00:00:00+00', 7.00::DECIMAL(38, 10), 7.00::DECIMAL(38, 10)))
        AS t(x_ChargeId, BillingPeriodStart, EffectiveCost, x_EffectiveCostReporting)""")
    # August's parts add up to 9.99 of its 10.00: broken. September's add up.
    conn.execute("""CREATE TABLE marts.cost_attribution AS SELECT * FROM (VALUES
        ('aug-1', DATE '2026-08-01', 4.99::DECIMAL(38, 10), 4.99::DECIMAL(38, 10)),
        ('aug-1', DATE '2026-08-01', 5.00::DECIMAL(38, 10), 5.00::DECIMAL(38, 10)),
        ('sep-1', DATE '2026-09-01', 7.00::DECIMAL(38, 10), 7.00::DECIMAL(38, 10)))
        AS t(x_ChargeId, billing_period_start, amount_billing, amount_reporting)""")

    def unbalanced(months):
        result = attribution_conserves_money(conn, months)
        return result.passed, [b["x_ChargeId"] for b in result.metadata["unbalanced_charges"].value]

    assert unbalanced(["2026-09"]) == (True, [])
    assert unbalanced(["2026-08"]) == (False, ["aug-1"])
    assert unbalanced(None) == (False, ["aug-1"])  # built whole: every month
    assert unbalanced([]) == (True, [])  # nothing attributed in this run
    conn.execute("DELETE FROM marts.cost_attribution WHERE x_ChargeId = 'sep-1'")
    assert unbalanced(["2026-09"]) == (False, ["sep-1"])  # a charge without parts


def test_the_daily_series_check_finds_a_month_whose_series_lost_or_gained_money(tmp_path):
    """Per billing month, the series' cost against the usage parts' reporting amounts: purchases are
    not in the series, a part without an FX rate is in neither sum, and a month the run did not
    build is not judged."""
    from pipelines.orchestration.checks import daily_series_conserve_money
    from pipelines.warehouse.connection import SQL_DIR

    conn = duckdb.connect(str(tmp_path / "wh.duckdb"))
    conn.execute((SQL_DIR / "macros.sql").read_text())
    conn.execute("CREATE SCHEMA core; CREATE SCHEMA marts")
    conn.execute("""CREATE TABLE core.cost_lines AS SELECT * FROM (VALUES
        ('aug-1', 'Usage'), ('aug-2', 'Purchase'), ('aug-3', 'Usage'), ('sep-1', 'Usage'))
        AS t(x_ChargeId, ChargeCategory)""")
    conn.execute("""CREATE TABLE marts.cost_attribution AS SELECT * FROM (VALUES
        ('aug-1', TIMESTAMPTZ '2026-08-01 00:00:00+00', 4.00::DECIMAL(38, 10)),
        ('aug-1', TIMESTAMPTZ '2026-08-01 00:00:00+00', 6.00::DECIMAL(38, 10)),
        ('aug-2', TIMESTAMPTZ '2026-08-01 00:00:00+00', 100.00::DECIMAL(38, 10)),
        ('aug-3', TIMESTAMPTZ '2026-08-01 00:00:00+00', NULL::DECIMAL(38, 10)),
        ('sep-1', TIMESTAMPTZ '2026-09-01 00:00:00+00', 7.00::DECIMAL(38, 10)))
        AS t(x_ChargeId, billing_period_start, amount_reporting)""")
    # August's series holds 6.00 of its usage parts' 10.00 (a part lost, as a charge's two parts of
    # one phase were); September's holds its 7.00 over two days.
    conn.execute("""CREATE TABLE marts.daily_series_by_billing_month AS SELECT * FROM (VALUES
        (TIMESTAMPTZ '2026-08-01 00:00:00+00', 6.00::DECIMAL(38, 10)),
        (TIMESTAMPTZ '2026-09-01 00:00:00+00', 3.50::DECIMAL(38, 10)),
        (TIMESTAMPTZ '2026-09-01 00:00:00+00', 3.50::DECIMAL(38, 10)))
        AS t(billing_period_start, cost)""")

    def unbalanced(months):
        result = daily_series_conserve_money(conn, months)
        return result.passed, [(b["attributed"], b["in_series"]) for b in result.metadata["unbalanced_months"].value]

    assert unbalanced(["2026-09"]) == (True, [])
    assert unbalanced(["2026-08"]) == (False, [("10.0000000000", "6.0000000000")])
    assert unbalanced(None) == (False, [("10.0000000000", "6.0000000000")])  # built whole: every month
    assert unbalanced([]) == (True, [])  # nothing built in this run
    conn.execute("UPDATE marts.daily_series_by_billing_month SET cost = 4.00 WHERE cost = 6.00")
    conn.execute("INSERT INTO marts.daily_series_by_billing_month VALUES (TIMESTAMPTZ '2026-08-01 00:00:00+00', 6.00)")
    assert unbalanced(None) == (True, [])
    conn.execute("DELETE FROM marts.daily_series_by_billing_month WHERE billing_period_start = TIMESTAMPTZ '2026-09-01 00:00:00+00'")
    assert unbalanced(["2026-09"]) == (False, [("7.0000000000", "None")])  # a month without its series


def test_only_a_blocking_check_may_judge_just_the_periods_built():
    from pipelines.orchestration.checks import check

    with pytest.raises(ValueError, match="only a blocking check"):
        check("marts.cost_attribution", "a warning", by_period=True)


def test_the_gpu_minutes_check_fails_a_card_whose_mig_instances_add_up_to_more_than_one(tmp_path):
    from pipelines.orchestration.checks import gpu_minutes_consistent
    from pipelines.warehouse.connection import SQL_DIR

    conn = duckdb.connect(str(tmp_path / "wh.duckdb"))
    conn.execute((SQL_DIR / "macros.sql").read_text())
    conn.execute("CREATE SCHEMA core")
    # One card's two instances at 4/7 and 3/7 (a whole card), a whole GPU beside them at 1.
    conn.execute("""CREATE TABLE core.gpu_minutes AS SELECT * FROM (VALUES
        ('h/GPU-a/mig1', '1', 4 / 7), ('h/GPU-a/mig2', '2', 3 / 7), ('h/GPU-b', NULL, 1.0))
        AS t(gpu_key, mig_instance, gpu_share), (SELECT TIMESTAMPTZ '2026-09-01 00:00:00+00' AS minute, 0.5 AS busy_fraction,
                                                  1 AS samples, 1 AS busy_samples)""")
    assert gpu_minutes_consistent(conn).passed
    conn.execute("UPDATE core.gpu_minutes SET gpu_share = 4 / 7 WHERE gpu_key = 'h/GPU-a/mig2'")  # 8/7 of a card
    result = gpu_minutes_consistent(conn)
    assert not result.passed and result.metadata["overfull_card_minutes"].value == 1


def test_the_busy_checks_fail_a_workload_busier_than_its_cards_and_a_split_that_loses_minutes(tmp_path):
    from pipelines.orchestration.checks import busy_split_conserved, busy_within_cards_held
    from pipelines.warehouse.connection import SQL_DIR

    conn = duckdb.connect(str(tmp_path / "wh.duckdb"))
    conn.execute((SQL_DIR / "macros.sql").read_text())
    conn.execute("CREATE SCHEMA core; CREATE SCHEMA marts")
    # job-1 holds 2 GPUs from 10:00:30 to 10:30: 29.5 minutes (half of 10:00 and 10:01-10:29),
    # 59 card-minutes; pod-1 holds a 1g.10gb slice (1/7 of a card) from 09:00 on: 60/7 in the hour.
    conn.execute("""CREATE TABLE core.workloads AS SELECT * FROM (VALUES
        ('job-1', 'h1', 2, NULL, TIMESTAMPTZ '2026-09-01 10:00:30+00', TIMESTAMPTZ '2026-09-01 10:30:00+00'),
        ('pod-1', 'h1', 1, 1 / 7, TIMESTAMPTZ '2026-09-01 09:00:00+00', NULL))
        AS t(workload_id, host, gpu_count, gpu_cards, started_at, ended_at)""")
    conn.execute("""CREATE TABLE marts.gpu_busy_by_workload_hour AS SELECT * FROM (VALUES
        ('job-1', 58.0), ('pod-1', 60 / 7), (NULL, 30.0))
        AS t(workload_id, busy_gpu_minutes), (SELECT TIMESTAMPTZ '2026-09-01 10:00:00+00' AS hour, 'h1' AS host)""")
    conn.execute("""CREATE TABLE marts.gpu_busy_by_host_hour AS
        SELECT TIMESTAMPTZ '2026-09-01 10:00:00+00' AS hour, 'h1' AS host, 88 + 60 / 7 AS busy_gpu_minutes""")
    assert busy_within_cards_held(conn).passed and busy_split_conserved(conn).passed

    conn.execute("UPDATE marts.gpu_busy_by_workload_hour SET busy_gpu_minutes = 59.5 WHERE workload_id = 'job-1'")
    over = busy_within_cards_held(conn)
    assert not over.passed and [(o["workload_id"], o["busy_gpu_minutes"], o["held_card_minutes"])
                                for o in over.metadata["busier_than_held"].value] == [("job-1", "59.5", "59.0")]
    lost = busy_split_conserved(conn)  # the split now holds 1.5 minutes more than the host's
    assert not lost.passed and [(b["host"], b["host_busy"], b["split_busy"]) for b in lost.metadata["unbalanced_host_hours"].value] == [
        ("h1", "96.571429", "98.071429")]


def test_a_warned_check_says_what_it_found_in_one_line():
    """`finops run` prints each check that warned or failed with the first few things it found:
    a FOCUS rule with its own words and how many lines break it, files by path, then how many more."""
    from dagster import MetadataValue

    from pipelines.orchestration.runner import check_findings

    conformance = {"rules": 118, "failing": MetadataValue.json([
        {"rule": "BillingAccountId-C-001-M", "text": "BillingAccountId MUST NOT be null", "violations": "1", "sample": []},
        {"rule": "InvoiceId-C-004-C", "text": "InvoiceId MUST be null when ...", "violations": "12", "sample": []}])}
    assert check_findings(conformance) == ("BillingAccountId-C-001-M: BillingAccountId MUST NOT be null (1 line), "
                                           "InvoiceId-C-004-C: InvoiceId MUST be null when ... (12 lines)")
    files = {"quarantined": MetadataValue.json([{"path": f"f{i}.csv", "connector": "focus", "detail": "x"} for i in range(5)])}
    assert check_findings(files) == "f0.csv, f1.csv, f2.csv, and 2 more"
    assert check_findings({"failures": MetadataValue.json([]), "expectations": 4}) == ""
