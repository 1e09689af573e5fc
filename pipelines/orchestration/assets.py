"""The asset graph: landing → raw.* → core.* → marts.* → findings.* → reports. Assets are thin:
the work is in `pipelines.ingest.landing` (Python), `sql/` (one file per table, listed in
pipelines/warehouse/models.py) and pipelines/analysis.

Each step does a layer's work over one connection, as dagster-dbt runs a dbt project in one step:
the ingest (the raw tables and their checks), the SQL models (every core, mart and finding table
with its checks, in dependency order), the purchasing model, anomalies, the report and its
delivery. Every table is still its own asset, with its own lineage, materializations and checks; a
run from the UI may select any of them (the steps are subsettable). A step each per table cost
about 0.1 s of Dagster events and connection set-up each: 3-4 s a run, whatever the data.
"""

import time
import warnings
from pathlib import Path

from dagster import (AssetExecutionContext, AssetKey, AssetSpec, BetaWarning, Failure, MaterializeResult, MetadataValue,
                     multi_asset)
from dagster_duckdb import DuckDBResource

from connectors.gpu_rental import invalid_mappings
from connectors.registry import all_connectors
from models.schemas import RAW_TABLES
from pipelines.analysis import tco
from pipelines.engines.resource import SqlEngineResource
from pipelines.ingest.landing import ingest_landing
from pipelines.orchestration.checks import Check, checks_of
from pipelines.orchestration.daily_assets import DAILY_ASSETS
from pipelines.orchestration.expectations import stop_worker as stop_expectations_worker
from pipelines.orchestration.partitions import MONTHS, ONE_RUN, day_range, only_changed
from pipelines.settings import FinopsSettings
from pipelines.text import for_terminal
from pipelines.warehouse.connection import fetch_value, prepare
from pipelines.warehouse.models import SQL_MODELS, UNCHANGED, build_model, sql_model_order
from pipelines.warehouse.table_docs import apply_docs

# Every asset writes the one DuckDB file: a single pool keeps one writer at a time.
POOL = "duckdb_warehouse"
RAW_ASSETS = ["raw.files", *RAW_TABLES.values(), "raw.quarantine", "raw.manifests", "raw.deliveries", "raw.delivery_slices",
              "raw.file_slices"]


def key_of(table: str) -> AssetKey:
    return AssetKey(table.split("."))


def table_of(key: AssetKey) -> str:
    return ".".join(key.path)


def run_checks(context: AssetExecutionContext, conn, table: str, periods: list[str] | None = None):
    """The selected checks of `table`, on the step's connection; a blocking one that fails stops
    the step after it is recorded (so nothing downstream is built, and the run publishes nothing).
    `periods`: the periods of `table` this step built (None: all of it), for checks by period."""
    selected = context.selected_asset_check_keys
    for check in checks_of(table):
        if check.key not in selected:
            continue
        result = check.evaluate(conn, periods)
        yield result
        if check.blocking and not result.passed:
            raise Failure(f"blocking check {table}:{check.name} failed", metadata=dict(result.metadata))


def built_periods(built: dict) -> list[str] | None:
    """The periods a model's build wrote (build_model's result), for the checks that judge only
    those: None where it built the whole table, none where it built nothing."""
    if built["built"] == "periods":
        return list(built["periods"])
    if built["built"] in ("nothing changed", UNCHANGED):
        return []
    return None


def last_table_judged_by_expectations(tables: list[str], selected_checks) -> str | None:
    """Of `tables` (in build order), the last with a selected check that Great Expectations judges."""
    judged = [t for t in tables if any(c.expectations and c.key in selected_checks for c in checks_of(t))]
    return judged[-1] if judged else None


def check_specs(tables) -> list:
    return [c.spec() for t in tables for c in checks_of(t)]


@multi_asset(
    specs=[AssetSpec(key_of(t), group_name="raw", description=f"{t}: rows as read from landing files") for t in RAW_ASSETS],
    check_specs=check_specs(["raw.files"]),
    pool=POOL,
    name="ingest_landing",
)
def ingest_landing_asset(context: AssetExecutionContext, warehouse: DuckDBResource, settings: FinopsSettings):
    """Load every new landing file through its connector; one transaction per file."""
    with warehouse.get_connection() as conn:
        prepare(conn, always_set_up=True)
        summary = ingest_landing(conn, Path(settings.landing_dir), timezone=settings.timezone)
        apply_docs(conn, *RAW_ASSETS)  # models/data/table_docs.yaml: the warehouse explains itself
        counts = {t: fetch_value(conn, f"SELECT count(*) FROM {t}") for t in RAW_ASSETS}
        yield from _ingest_results(context, summary, counts)
        yield from run_checks(context, conn, "raw.files")


def _ingest_results(context: AssetExecutionContext, summary, counts: dict):
    for broken in invalid_mappings(all_connectors()):
        context.log.error(f"invalid mapping, not used: {broken.error}")
    for d in summary.incomplete:
        context.log.warning(for_terminal(f"delivery {d['delivery_id']} ({d['provider']} {d['export_name']}): "
                                         f"{d['parts_seen']} of {d['parts_expected']} parts so far, marked incomplete"))
    for o in summary.outcomes:
        if o.status == "failed":
            context.log.error(for_terminal(o.detail))  # the console shows it: no control characters from file names
        elif o.status == "quarantined":
            context.log.error(for_terminal(f"{o.path}: {o.detail}"))
        elif o.status == "refused":
            context.log.warning(for_terminal(f"{o.path}: refused, {o.detail}"))
        elif o.status == "unrecognized":
            context.log.info(for_terminal(f"{o.path}: skipped, {o.detail}"))
    files_meta = {
        "new_files": len(summary.outcomes),
        "already_loaded": summary.already_loaded,
        "loaded": len(summary.by_status("loaded")),
        "incomplete_deliveries": MetadataValue.json([{k: str(v) for k, v in d.items()} for d in summary.incomplete]),
        "superseded": MetadataValue.json(summary.superseded),
        "failed": MetadataValue.json([{"path": o.path, "error": o.detail} for o in summary.by_status("failed")]),
        "quarantined": MetadataValue.json([{"path": o.path, "reason": o.detail} for o in summary.by_status("quarantined")]),
        "invalid_mappings": MetadataValue.json([str(m.error) for m in invalid_mappings(all_connectors())]),
        "unrecognized": MetadataValue.json([{"path": o.path, "reason": o.detail} for o in summary.by_status("unrecognized")]),
        "refused": MetadataValue.json([{"path": o.path, "reason": o.detail} for o in summary.by_status("refused")]),
        "rows_loaded": summary.rows_loaded,
        "rows_quarantined": summary.rows_quarantined,
    }
    for table in RAW_ASSETS:
        extra = files_meta if table == "raw.files" else {}
        yield MaterializeResult(asset_key=key_of(table), metadata={"table": table, "rows": counts[table], **extra})


def _sql_model_specs() -> list[AssetSpec]:
    return [AssetSpec(key_of(m.table), deps=[key_of(d) for d in m.deps], group_name=m.group, description=m.description,
                      partitions_def=MONTHS if m.partitioned else None, skippable=False)
            for m in SQL_MODELS.values()]


with warnings.catch_warnings():  # backfill_policy is marked beta; one run per backfill is what we want
    warnings.simplefilter("ignore", BetaWarning)

    @multi_asset(specs=_sql_model_specs(), check_specs=check_specs(SQL_MODELS), can_subset=True, pool=POOL, name="sql_models",
                 backfill_policy=ONE_RUN)
    def sql_models_asset(context: AssetExecutionContext, warehouse: DuckDBResource, settings: FinopsSettings,
                         sql_engine: SqlEngineResource):
        """Build the selected SQL models in dependency order (`sql/<schema>/<table>.sql` each), each
        followed by its checks: the partitioned ones over the run's days, the others unless their
        inputs are unchanged (pipelines/warehouse/models.py)."""
        selected = {table_of(k) for k in context.selected_asset_keys}
        partitioned = any(SQL_MODELS[t].partitioned for t in selected)
        days, changed_only = (day_range(context), only_changed(context)) if partitioned else (None, True)
        order = [t for t in sql_model_order() if t in selected]
        last_judged = last_table_judged_by_expectations(order, context.selected_asset_check_keys)
        with warehouse.get_connection() as conn:
            prepare(conn)
            any_built = False
            for table in order:
                started = time.perf_counter()
                built = build_model(conn, table, settings, sql_engine, days, changed_only, log=context.log.info)
                periods = built_periods(built)
                if built["built"] not in ("nothing changed", UNCHANGED):
                    # CREATE OR REPLACE drops comments (tables and views alike), on either engine.
                    apply_docs(conn, table)
                    any_built = True
                if "periods" in built:
                    built["periods"] = MetadataValue.json(built["periods"])
                rows = fetch_value(conn, f"SELECT count(*) FROM {table}")
                schema, name = table.split(".")
                yield MaterializeResult(asset_key=key_of(table), metadata={
                    "table": table, "rows": rows, "sql": f"sql/{schema}/{name}.sql", "seconds": round(time.perf_counter() - started, 3),
                    **built})
                yield from run_checks(context, conn, table, periods)
                if table == last_judged:
                    # Nothing later in this step asks Great Expectations: its worker's memory (0.3 GB)
                    # goes back before the marts are built.
                    stop_expectations_worker()
            if any_built:
                # The builds' bookkeeping tables are created on first use and never replaced: their
                # comments once a step, not once a table (20 ms a table: 0.7 s of a first run).
                apply_docs(conn, "core.period_builds", "core.lake_builds")


@multi_asset(
    specs=[AssetSpec(key_of("marts.tco_scenarios"), deps=[key_of("marts.gpu_hours_profile")], group_name="marts",
                     description="marts.tco_scenarios: the cost of each purchasing strategy over the parameters' years (3 by default) for the measured usage"),
           AssetSpec(key_of("marts.tco_break_even"), deps=[key_of("marts.gpu_hours_profile")], group_name="marts",
                     description="marts.tco_break_even: fleet utilization at which two strategies cost the same")],
    pool=POOL,
    name="tco",
)
def tco_asset(context: AssetExecutionContext, warehouse: DuckDBResource, settings: FinopsSettings):
    """Price buy, monthly, commitments, on-demand, spot and hybrid over the measured profile."""
    with warehouse.get_connection() as conn:
        prepare(conn)
        try:
            result = tco.compute(conn, settings.tco_params_file)
        except tco.NotPriced as exc:
            if not isinstance(exc, tco.NoUsageMeasured):  # the user's parameters: say so on the terminal too
                context.log.warning(f"purchasing strategies not priced: {exc}")
            tco.write(conn, [], [])
            apply_docs(conn, "marts.tco_scenarios", "marts.tco_break_even")
            for key in ("marts.tco_scenarios", "marts.tco_break_even"):
                yield MaterializeResult(asset_key=key_of(key), metadata={"rows": 0, "note": str(exc)})
            return
        tco.write(conn, result.scenarios, result.break_even)
        apply_docs(conn, "marts.tco_scenarios", "marts.tco_break_even")
    best = tco.cheapest(result.scenarios)
    cheapest = ({"cheapest": best["scenario"], "cheapest_tco": f"{best['tco']} {best['currency']}"} if best
                else {"cheapest": f"none priced for the fleet: no price for {', '.join(tco.unpriced_models(result.scenarios))}"})
    yield MaterializeResult(asset_key=key_of("marts.tco_scenarios"), metadata={"rows": len(result.scenarios), **cheapest})
    yield MaterializeResult(asset_key=key_of("marts.tco_break_even"), metadata={"rows": len(result.break_even)})


ALL_ASSETS = [ingest_landing_asset, sql_models_asset, tco_asset, *DAILY_ASSETS]
