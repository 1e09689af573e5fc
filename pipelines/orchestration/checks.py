"""Asset checks: data quality of the core tables (Great Expectations where its expectations fit,
plain SQL elsewhere) and the money invariants of the marts.

Each check is a function of a warehouse connection, registered with the table it checks. The
steps that build a table run its checks on the same connection right after it (the ingest step for
raw.files, the SQL models' step for the rest: pipelines/orchestration/assets.py), so the checks
cost their queries, not a Dagster step and a connection each. In Dagster they are the tables'
asset checks as before; a blocking check that fails stops its step, so bad money is never published.
"""

from collections.abc import Callable
from dataclasses import dataclass

from dagster import AssetCheckKey, AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey, MetadataValue

from models.focus import CHARGE_CATEGORIES, CHARGE_FREQUENCIES, PRICING_CATEGORIES, REQUIRED_COLUMNS, SERVICE_CATEGORIES
from models.gpus import known_models
from pipelines.orchestration.expectations import validate
from pipelines.warehouse.connection import fetch_all, fetch_dicts


@dataclass(frozen=True)
class Check:
    name: str
    table: str  # the asset it checks, schema.table
    description: str
    run: Callable  # (connection) -> AssetCheckResult
    blocking: bool = False
    expectations: bool = False  # judged by Great Expectations (pipelines/orchestration/expectations.py)
    # Judges only the periods (billing months) of its table that this run built: `run(conn, periods)`,
    # periods None for a table built whole. Blocking checks only: one that fails publishes nothing,
    # so every period of a published warehouse was judged when it was built, and a new delivery's
    # check costs its own month, not the history.
    by_period: bool = False

    @property
    def asset_key(self) -> AssetKey:
        return AssetKey(self.table.split("."))

    @property
    def key(self) -> AssetCheckKey:
        return AssetCheckKey(self.asset_key, self.name)

    def spec(self) -> AssetCheckSpec:
        return AssetCheckSpec(self.name, asset=self.asset_key, description=self.description, blocking=self.blocking)

    def evaluate(self, conn, periods: list[str] | None = None) -> AssetCheckResult:
        result = self.run(conn, periods) if self.by_period else self.run(conn)
        return AssetCheckResult(asset_key=self.asset_key, check_name=self.name, passed=result.passed,
                                severity=result.severity, metadata=result.metadata)


CHECKS: list[Check] = []


def check(table: str, description: str, blocking: bool = False, expectations: bool = False, by_period: bool = False):
    """Register the decorated function of a connection as a check of `table`."""
    if by_period and not blocking:
        # A warning left on a month no later run rebuilds would vanish from the next run's result.
        raise ValueError(f"{table}: only a blocking check may judge just the periods a run built")

    def register(run: Callable) -> Callable:
        CHECKS.append(Check(run.__name__, table, description, run, blocking, expectations, by_period))
        return run

    return register


def checks_of(table: str) -> list[Check]:
    return [c for c in CHECKS if c.table == table]


REQUIRED_EXPECTATIONS = [("ExpectColumnValuesToNotBeNull", {"column": c}) for c in REQUIRED_COLUMNS]
ALLOWED_VALUE_EXPECTATIONS = [
    ("ExpectColumnValuesToBeInSet", {"column": "ChargeCategory", "value_set": list(CHARGE_CATEGORIES)}),
    ("ExpectColumnValuesToBeInSet", {"column": "PricingCategory", "value_set": list(PRICING_CATEGORIES)}),
    ("ExpectColumnValuesToBeInSet", {"column": "ChargeFrequency", "value_set": list(CHARGE_FREQUENCIES)}),
    ("ExpectColumnValuesToBeInSet", {"column": "ServiceCategory", "value_set": list(SERVICE_CATEGORIES)}),
]


def _frame(conn, sql: str):
    return conn.sql(sql).df()


def _ge_result(outcome, **metadata) -> AssetCheckResult:
    return AssetCheckResult(
        passed=outcome.success,
        metadata={"expectations": outcome.evaluated, "failures": MetadataValue.json(outcome.failures), **metadata},
    )


# core.cost_lines runs to tens of millions of lines: DuckDB reduces it first and the expectations
# judge what it leaves, which fails exactly when the whole column would (as for utilization below).

@check("core.cost_lines", "FOCUS columns a charge cannot do without are never null", expectations=True)
def focus_required_not_null(conn) -> AssetCheckResult:
    # One row per distinct pattern of null and filled required columns (a handful): a column has a
    # null in it exactly when it has one here. The exact count of lines per column is DuckDB's.
    patterns = ", ".join(f'CASE WHEN "{c}" IS NOT NULL THEN 1 END AS "{c}"' for c in REQUIRED_COLUMNS)
    counts = ", ".join(f'count(*) - count("{c}") AS "{c}"' for c in REQUIRED_COLUMNS)
    frame = _frame(conn, f"SELECT DISTINCT {patterns} FROM core.cost_lines")
    null_lines = fetch_dicts(conn, f"SELECT count(*) AS lines, {counts} FROM core.cost_lines")[0]
    lines = null_lines.pop("lines")
    outcome = validate(frame, REQUIRED_EXPECTATIONS, "cost_lines_required")
    for failure in outcome.failures:
        failure["unexpected_count"] = null_lines.get(failure["column"])  # lines, not patterns
    return _ge_result(outcome, rows=lines)


@check("core.cost_lines", "categorical columns hold FOCUS's allowed values (providers do deviate: a warning)", expectations=True)
def focus_allowed_values(conn) -> AssetCheckResult:
    # The distinct combinations with their line counts: every value is allowed exactly when every
    # distinct one is; a failure's count is of lines, from the combinations' counts.
    columns = [kwargs["column"] for _, kwargs in ALLOWED_VALUE_EXPECTATIONS]
    frame = _frame(conn, f"SELECT {', '.join(columns)}, count(*) AS lines FROM core.cost_lines GROUP BY ALL")
    outcome = validate(frame, ALLOWED_VALUE_EXPECTATIONS, "cost_lines_allowed")
    allowed = {kwargs["column"]: set(kwargs["value_set"]) for _, kwargs in ALLOWED_VALUE_EXPECTATIONS}
    for failure in outcome.failures:
        column = failure["column"]
        outside = frame[frame[column].notna() & ~frame[column].isin(allowed[column])]
        failure["unexpected_count"] = int(outside["lines"].sum())
    result = _ge_result(outcome, rows=int(frame["lines"].sum()) if len(frame) else 0)
    return AssetCheckResult(passed=result.passed, severity=AssetCheckSeverity.WARN, metadata=result.metadata)


@check("core.cost_lines", "FOCUS 1.2 conformance: every mandatory column present and filled, "
       "the root-column and dataset rules of focus-validator 2.2.1 (pipelines/warehouse/focus_conformance.py)")
def focus_12_conformance(conn) -> AssetCheckResult:
    from pipelines.warehouse.focus_conformance import check as failing_rules, rules

    failures = failing_rules(conn)
    # A warning, as for allowed values: a user's own FOCUS file may lack a mandatory value
    # (BillingAccountId, say), which the run should report, not fail on.
    return AssetCheckResult(passed=not failures, severity=AssetCheckSeverity.WARN, metadata={
        "rules": len(rules()), "failing": MetadataValue.json([{k: str(v) for k, v in f.items()} for f in failures])})


@check("core.cost_lines", "every line has a reporting-currency amount (an FX rate was found)")
def fx_rates_found(conn) -> AssetCheckResult:
    missing = fetch_dicts(conn, """
        SELECT BillingCurrency AS currency, x_ReportingCurrency AS reporting_currency,
               count(*) AS lines, min(utc_day(ChargePeriodStart)) AS first_day
        FROM core.cost_lines WHERE x_FxStatus = 'missing_rate' GROUP BY ALL""")
    return AssetCheckResult(
        passed=not missing, severity=AssetCheckSeverity.WARN,
        metadata={"missing": MetadataValue.json([{k: str(v) for k, v in m.items()} for m in missing])},
    )


@check("core.gpu_samples", "utilization is within 0–100 % wherever it is known", expectations=True)
def utilization_in_range(conn) -> AssetCheckResult:
    # Telemetry runs to hundreds of millions of rows: DuckDB reduces it to one row per host and
    # signal first, and the expectations judge those extremes (all values in range ⇔ extremes in range).
    frame = _frame(conn, """
        SELECT host, util_kind, min(util_pct) AS min_util_pct, max(util_pct) AS max_util_pct, count(util_pct) AS samples
        FROM core.gpu_samples WHERE util_pct IS NOT NULL GROUP BY ALL""")
    outcome = validate(frame, [
        ("ExpectColumnValuesToBeBetween", {"column": "min_util_pct", "min_value": 0, "max_value": 100}),
        ("ExpectColumnValuesToBeBetween", {"column": "max_util_pct", "min_value": 0, "max_value": 100}),
    ], "gpu_samples")
    return _ge_result(outcome, hosts=len(frame), samples=int(frame["samples"].sum()) if len(frame) else 0)


@check("core.gpu_minutes", "busy fraction and GPU share within 0–1, a card's MIG shares at most 1, sample counts consistent")
def gpu_minutes_consistent(conn) -> AssetCheckResult:
    bad = fetch_all(conn, """
        SELECT count(*) FROM core.gpu_minutes
        WHERE busy_fraction NOT BETWEEN 0 AND 1 OR busy_samples > samples OR samples < 1
           OR gpu_share IS NULL OR gpu_share NOT BETWEEN 0 AND 1""")[0][0]
    # A card's MIG instances share it: never more than one card a minute.
    overfull = fetch_all(conn, """
        SELECT count(*) FROM (
            SELECT minute FROM core.gpu_minutes WHERE mig_instance IS NOT NULL
            GROUP BY mig_card_key(gpu_key, mig_instance), minute
            HAVING sum(gpu_share) > 1 + 1e-9)""")[0][0]
    return AssetCheckResult(passed=bad == 0 and overfull == 0,
                            metadata={"inconsistent_minutes": bad, "overfull_card_minutes": overfull})


@check("marts.gpu_busy_by_workload_hour", "no workload is busier in an hour than the cards it holds in that hour "
       "(busy GPU-minutes at most its cards × the minutes it held them)")
def busy_within_cards_held(conn) -> AssetCheckResult:
    # A workload holds its cards for the part of each minute it ran (held_in_minute): in an hour,
    # for the time from its start to its end within the hour.
    over = fetch_dicts(conn, """
        WITH busy AS (
            SELECT hour, host, workload_id, sum(busy_gpu_minutes) AS busy_gpu_minutes
            FROM marts.gpu_busy_by_workload_hour WHERE workload_id IS NOT NULL GROUP BY ALL
        ),
        held AS (
            SELECT b.hour, b.host, b.workload_id, any_value(b.busy_gpu_minutes) AS busy_gpu_minutes,
                   sum(workload_cards(w.gpu_cards, w.gpu_count)
                       * held_us(w.started_at, w.ended_at, b.hour, b.hour + INTERVAL 1 HOUR) / 60000000.0) AS held_card_minutes
            FROM busy AS b
            JOIN core.workloads AS w ON w.workload_id = b.workload_id AND w.host = b.host AND w.gpu_count > 0
            GROUP BY ALL
        )
        SELECT hour, host, workload_id, round(busy_gpu_minutes, 3) AS busy_gpu_minutes, round(held_card_minutes, 3) AS held_card_minutes
        FROM held WHERE busy_gpu_minutes > held_card_minutes + 1e-6
        ORDER BY busy_gpu_minutes - held_card_minutes DESC LIMIT 20""")
    return AssetCheckResult(passed=not over, metadata={"busier_than_held": MetadataValue.json([{k: str(v) for k, v in o.items()} for o in over])})


@check("marts.gpu_busy_by_host_hour", "busy GPU-minutes are conserved: per host and hour, marts.gpu_busy_by_workload_hour's "
       "split adds up to the host's busy GPU-minutes")
def busy_split_conserved(conn) -> AssetCheckResult:
    # Both round each row to 9 decimals: a host-hour of many rows may differ by their rounding.
    broken = fetch_dicts(conn, """
        SELECT hour, host, round(h.busy_gpu_minutes, 6) AS host_busy, round(w.busy_gpu_minutes, 6) AS split_busy
        FROM marts.gpu_busy_by_host_hour AS h
        FULL JOIN (SELECT hour, host, sum(busy_gpu_minutes) AS busy_gpu_minutes FROM marts.gpu_busy_by_workload_hour GROUP BY ALL) AS w
          USING (hour, host)
        WHERE abs(coalesce(h.busy_gpu_minutes, 0) - coalesce(w.busy_gpu_minutes, 0)) > 1e-6
        ORDER BY hour, host LIMIT 20""")
    return AssetCheckResult(passed=not broken, metadata={"unbalanced_host_hours": MetadataValue.json([{k: str(v) for k, v in b.items()} for b in broken])})


@check("marts.cost_attribution", blocking=True, by_period=True,
       description="money is conserved: each charge's phase parts add up to its EffectiveCost exactly "
                   "(in the billing months the run attributed)")
def attribution_conserves_money(conn, months: list[str] | None) -> AssetCheckResult:
    return _money_in_months(conn, months, "unbalanced_charges", """
        SELECT c.x_ChargeId, c.EffectiveCost, sum(a.amount_billing) AS attributed,
               c.x_EffectiveCostReporting, sum(a.amount_reporting) AS attributed_reporting
        FROM core.cost_lines AS c
        LEFT JOIN (SELECT * FROM marts.cost_attribution WHERE in_listed_months(billing_period_start, $months)) AS a
          USING (x_ChargeId)
        WHERE in_listed_months(c.BillingPeriodStart, $months)
        GROUP BY ALL
        HAVING attributed IS DISTINCT FROM c.EffectiveCost
            OR attributed_reporting IS DISTINCT FROM c.x_EffectiveCostReporting
        LIMIT 20""")


@check("marts.daily_series_by_billing_month", blocking=True, by_period=True,
       description="the daily series the anomalies score hold every usage part's money: per billing month, "
                   "their cost adds up to the usage charges' attributed amounts (reporting currency) exactly")
def daily_series_conserve_money(conn, months: list[str] | None) -> AssetCheckResult:
    # Parts without an FX rate have no reporting amount and no cost in the series: both sums skip them.
    return _money_in_months(conn, months, "unbalanced_months", """
        WITH parts AS (
            SELECT a.billing_period_start, sum(a.amount_reporting) AS attributed
            FROM marts.cost_attribution AS a
            JOIN core.cost_lines AS c USING (x_ChargeId)
            WHERE c.ChargeCategory = 'Usage' AND in_listed_months(a.billing_period_start, $months)
            GROUP BY ALL
        ),
        series AS (
            SELECT billing_period_start, sum(cost) AS in_series FROM marts.daily_series_by_billing_month
            WHERE in_listed_months(billing_period_start, $months)
            GROUP BY ALL
        )
        SELECT billing_period_start, attributed, in_series
        FROM parts FULL JOIN series USING (billing_period_start)
        WHERE attributed IS DISTINCT FROM in_series
        ORDER BY billing_period_start""")


def _money_in_months(conn, months: list[str] | None, listed_as: str, sql: str) -> AssetCheckResult:
    """A money check of the billing months a run built: `sql` lists what does not add up in `$months`
    (None: a whole build, every month, '*' to macro in_listed_months; []: nothing built, nothing to
    judge). The months judged and what broke are the result's metadata."""
    months = ["*"] if months is None else months
    broken = fetch_dicts(conn, sql, {"months": months}) if months else []
    return AssetCheckResult(passed=not broken, metadata={
        "months_checked": MetadataValue.json(months),
        listed_as: MetadataValue.json([{k: str(v) for k, v in b.items()} for b in broken])})


@check("marts.spend_by_phase", "in every period the phases add up to that period's cost lines (reporting currency)")
def phases_add_up(conn) -> AssetCheckResult:
    phases, lines = fetch_all(conn, """
        SELECT (SELECT sum(cost_reporting) FROM marts.spend_by_phase WHERE period = 'all'),
               (SELECT coalesce(sum(x_EffectiveCostReporting), 0) FROM core.cost_lines)""")[0]
    months = fetch_all(conn, """
        SELECT s.period, sum(s.cost_reporting) AS phases,
               (SELECT coalesce(sum(x_EffectiveCostReporting), 0) FROM core.cost_lines
                WHERE strftime(utc_day(ChargePeriodStart), '%Y-%m') = s.period) AS lines
        FROM marts.spend_by_phase AS s WHERE s.period <> 'all' GROUP BY s.period HAVING phases <> lines""")
    return AssetCheckResult(passed=phases == lines and not months,
                            metadata={"phases_total": str(phases), "cost_lines_total": str(lines),
                                      "unbalanced_months": MetadataValue.json([[str(v) for v in m] for m in months])})


@check("raw.files", "per file, rows read = rows loaded + rows quarantined, and the raw tables hold exactly the loaded rows")
def raw_rows_reconcile(conn) -> AssetCheckResult:
    broken = fetch_dicts(conn, """
        WITH landed AS (
            SELECT x_SourceFile, x_SourceSha256, count(*) AS n FROM raw.cost_lines GROUP BY ALL
            UNION ALL SELECT x_SourceFile, x_SourceSha256, count(*) FROM raw.gpu_samples GROUP BY ALL
            UNION ALL SELECT x_SourceFile, x_SourceSha256, count(*) FROM raw.workloads GROUP BY ALL
            UNION ALL SELECT x_SourceFile, x_SourceSha256, count(*) FROM raw.storage_events GROUP BY ALL
        ),
        held AS (SELECT x_SourceFile, x_SourceSha256, sum(n) AS n FROM landed GROUP BY ALL),
        quarantined AS (SELECT x_SourceFile, x_SourceSha256, count(*) AS n FROM raw.quarantine GROUP BY ALL)
        SELECT f.path, f.rows_read, f.rows_loaded, f.rows_quarantined,
               coalesce(h.n, 0) AS rows_in_raw, coalesce(q.n, 0) AS rows_in_quarantine
        FROM raw.files AS f
        LEFT JOIN held AS h ON h.x_SourceFile = f.path AND h.x_SourceSha256 = f.sha256
        LEFT JOIN quarantined AS q ON q.x_SourceFile = f.path AND q.x_SourceSha256 = f.sha256
        WHERE f.rows_read <> f.rows_loaded + f.rows_quarantined
           OR coalesce(h.n, 0) <> f.rows_loaded
           OR coalesce(q.n, 0) <> f.rows_quarantined""")
    return AssetCheckResult(passed=not broken, metadata={"unreconciled_files": MetadataValue.json([{k: str(v) for k, v in b.items()} for b in broken])})


@check("raw.files", blocking=True,
       description="per billing file, the money it states = the money loaded + the money quarantined, exactly (to 10^-10)")
def billing_money_reconciles(conn) -> AssetCheckResult:
    broken = fetch_dicts(conn, """
        WITH loaded AS (
            SELECT x_SourceFile, x_SourceSha256, sum(x_SourceCost) AS loaded_total
            FROM raw.cost_lines GROUP BY ALL
        )
        SELECT f.path, f.source_total, coalesce(l.loaded_total, 0) AS loaded_total, f.quarantined_total
        FROM raw.files AS f
        LEFT JOIN loaded AS l ON l.x_SourceFile = f.path AND l.x_SourceSha256 = f.sha256
        WHERE f.kind = 'billing' AND f.source_total IS NOT NULL
          AND f.source_total <> coalesce(l.loaded_total, 0) + f.quarantined_total""")  # exact, at money's 10 decimals
    files = fetch_all(conn, "SELECT count(*) FROM raw.files WHERE kind = 'billing' AND source_total IS NOT NULL")[0][0]
    return AssetCheckResult(passed=not broken, metadata={
        "billing_files": files, "unreconciled": MetadataValue.json([{k: str(v) for k, v in b.items()} for b in broken])})


@check("raw.files", "no landing file failed to load")
def no_failed_files(conn) -> AssetCheckResult:
    failed = fetch_dicts(conn, "SELECT path, detail FROM raw.files WHERE status = 'failed' ORDER BY path")
    return AssetCheckResult(passed=not failed, severity=AssetCheckSeverity.WARN, metadata={"failed": MetadataValue.json(failed)})


@check("raw.files", "no landing file had every row quarantined (a wrong or incomplete mapping, usually)")
def no_fully_quarantined_files(conn) -> AssetCheckResult:
    files = fetch_dicts(conn, "SELECT path, connector, detail FROM raw.files WHERE status = 'quarantined' ORDER BY path")
    return AssetCheckResult(passed=not files, severity=AssetCheckSeverity.WARN, metadata={"quarantined": MetadataValue.json(files)})


@check("raw.files", "some landing file is one a connector reads (a folder of files none of them reads, a wrong folder or "
       "an export no connector or mapping knows, loads nothing)")
def some_file_recognised(conn) -> AssetCheckResult:
    # The schedule's side of `finops run`'s `nothing recognised` (exit 1): the run itself succeeds.
    # Each path by its latest version, over every path the warehouse has read: a folder emptied of
    # the export it loaded before is `finops run`'s to catch (it scans the folder), not this check's.
    latest = """SELECT path, arg_max(status, ingested_at) AS status FROM raw.files GROUP BY path"""
    statuses = dict(fetch_all(conn, f"SELECT status, count(*) FROM ({latest}) GROUP BY status"))
    nothing_read = bool(statuses) and set(statuses) <= {"unrecognized", "refused"}
    unread = [p for (p,) in fetch_all(conn, f"SELECT path FROM ({latest}) ORDER BY path LIMIT 20")] if nothing_read else []
    return AssetCheckResult(passed=not nothing_read, severity=AssetCheckSeverity.WARN,
                            metadata={"files": sum(statuses.values()), "unread": MetadataValue.json(unread)})


@check("raw.files", "every GPU-rental mapping file passed its schema check")
def mapping_files_valid(conn) -> AssetCheckResult:
    from connectors.gpu_rental import invalid_mappings
    from connectors.registry import all_connectors

    broken = [str(m.error) for m in invalid_mappings(all_connectors())]
    return AssetCheckResult(passed=not broken, severity=AssetCheckSeverity.WARN, metadata={"invalid_mappings": MetadataValue.json(broken)})


@check("core.gpu_minutes", "every GPU model telemetry names is one models/data/gpu_models.csv knows "
       "(an unknown name stays in gpu_model as its own text: a warning)")
def gpu_models_known_in_telemetry(conn) -> AssetCheckResult:
    unknown = fetch_dicts(conn, """
        SELECT gpu_model_name AS name, count(DISTINCT gpu_key) AS gpus, count(*) AS minutes FROM core.gpu_minutes
        WHERE NOT gpu_model_known GROUP BY ALL ORDER BY name""")
    return AssetCheckResult(passed=not unknown, severity=AssetCheckSeverity.WARN,
                            metadata={"unknown_gpu_models": MetadataValue.json(unknown)})


@check("core.cost_lines", "every GPU model a charge names is one models/data/gpu_models.csv knows "
       "(an unknown name stays in x_GpuModel as its own text: a warning)")
def gpu_models_known_in_billing(conn) -> AssetCheckResult:
    unknown = fetch_dicts(conn, """
        SELECT x_GpuModel AS name, count(*) AS lines FROM core.cost_lines
        WHERE x_GpuModel IS NOT NULL AND x_GpuModel NOT IN (SELECT unnest($known)) GROUP BY ALL ORDER BY name""",
                          {"known": list(known_models())})
    return AssetCheckResult(passed=not unknown, severity=AssetCheckSeverity.WARN,
                            metadata={"unknown_gpu_models": MetadataValue.json(unknown)})

