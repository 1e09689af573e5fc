"""The asset graph: landing → raw.* → core.* → marts.*. Assets are thin: the work is in
`pipelines.ingest.landing` (Python) and in `sql/` (one file per table)."""


import warnings
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from dagster import AssetExecutionContext, AssetKey, AssetSpec, BetaWarning, MaterializeResult, MetadataValue, asset, multi_asset
from dagster_duckdb import DuckDBResource

from models.phase_rules import load_charge_rules, load_rules
from models.schemas import RAW_TABLES
from pipelines.analysis import tco
from pipelines.orchestration.daily_assets import DAILY_ASSETS
from pipelines.orchestration.partitions import MONTHS, ONE_RUN, day_range, only_changed
from pipelines.engines.resource import SqlEngineResource
from connectors.gpu_rental import invalid_mappings
from connectors.registry import all_connectors
from pipelines.ingest.landing import ingest_landing
from pipelines.ingest.fx_reference import FX_INPUT_SCHEMA, ecb_rates
from pipelines.settings import BUNDLED_PRICE_CATALOG, FinopsSettings
from pipelines.text import for_terminal
from pipelines.warehouse.table_docs import apply_docs
from pipelines.warehouse import builds, periods
from pipelines.warehouse.connection import fetch_value, is_set_up, set_up
from pipelines.warehouse.periods import PERIOD_MODELS
from pipelines.warehouse.run_state import model_salt

# Every asset writes the one DuckDB file: a single pool keeps one writer at a time.
POOL = "duckdb_warehouse"
RAW_ASSETS = ["raw.files", *RAW_TABLES.values(), "raw.quarantine", "raw.manifests", "raw.deliveries", "raw.delivery_slices",
              "raw.file_slices"]


def key_of(table: str) -> AssetKey:
    return AssetKey(table.split("."))


def prepare(conn, always_set_up: bool = False) -> None:
    # Sessions speak UTC so day and minute boundaries never depend on the machine's zone.
    conn.execute("SET TimeZone = 'UTC'").fetchall()  # DuckDB 2: every result drained before the next statement
    # Large CREATE TABLE AS need not keep row order: DuckDB then streams and spills in bounded memory.
    conn.execute("SET preserve_insertion_order = false").fetchall()
    # Schemas, raw views and macros, unless this code already set this warehouse up (the ingest always does).
    if always_set_up or not is_set_up(conn):
        set_up(conn)


@multi_asset(
    specs=[AssetSpec(key_of(t), group_name="raw", description=f"{t}: rows as read from landing files") for t in RAW_ASSETS],
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


@dataclass(frozen=True)
class SqlModel:
    deps: tuple[str, ...]
    inputs: object  # (settings) -> {name: Arrow table}, or None


# Every SQL asset's table, what it reads and its inputs: what another engine needs to build the
# same models in the same order (pipelines/engines/spark.py).
SQL_MODELS: dict[str, SqlModel] = {}


def sql_model_order() -> list[str]:
    """The SQL models in dependency order (each after the models it reads), stable by definition order."""
    done: list[str] = []

    def visit(table: str) -> None:
        if table in done or table not in SQL_MODELS:
            return
        for dep in SQL_MODELS[table].deps:
            visit(dep)
        done.append(table)

    for table in SQL_MODELS:
        visit(table)
    return done


def sql_asset(table: str, deps: list[str], description: str, group: str, inputs=None):
    """An asset that (re)builds `table` by running `sql/<schema>/<table>.sql`.

    `inputs(settings)` may return Arrow tables the SQL reads by name (reference data, rules).
    """
    SQL_MODELS[table] = SqlModel(tuple(deps), inputs)
    partitioned = table in PERIOD_MODELS

    with warnings.catch_warnings():  # backfill_policy is marked beta; one run per backfill is what we want
        warnings.simplefilter("ignore", BetaWarning)
        decorate = asset(key=key_of(table), deps=[key_of(d) for d in deps], group_name=group, description=description, pool=POOL,
                         partitions_def=MONTHS if partitioned else None, backfill_policy=ONE_RUN if partitioned else None)

    @decorate
    def _build(context: AssetExecutionContext, warehouse: DuckDBResource, settings: FinopsSettings,
               sql_engine: SqlEngineResource) -> MaterializeResult:
        built = {}
        with warehouse.get_connection() as conn:
            prepare(conn)
            if partitioned:
                built = build_partitioned(context, conn, table, settings, sql_engine)
                apply_docs(conn, "core.period_builds")
            else:
                built = build_unless_unchanged(conn, table, tuple(deps), settings, inputs, sql_engine)
                apply_docs(conn, "core.period_builds")
            apply_docs(conn, table)  # after the build, either engine: CREATE OR REPLACE drops comments (tables and views alike)
            rows = fetch_value(conn, f"SELECT count(*) FROM {table}")
        schema, name = table.split(".")
        return MaterializeResult(metadata={"table": table, "rows": rows, "sql": f"sql/{schema}/{name}.sql", **built})

    return _build


def build_partitioned(context: AssetExecutionContext, conn, table: str, settings: FinopsSettings,
                      sql_engine: SqlEngineResource) -> dict:
    """Build the periods of a history-sized table that the run's day range asks for (only the
    changed ones in a plain `finops run`), in place; the whole table when it is new, its columns
    changed, or the engine is Spark (which rebuilds whole)."""
    salt, params = model_salt(settings), settings.sql_params()
    if sql_engine.engine == "duckdb" and not periods.needs_full_build(conn, table):
        plan = periods.plan(conn, table, salt, day_range(context), only_changed(context))
        if not plan.periods:
            return {"built": "nothing changed", "periods": MetadataValue.json([])}
        if periods.build_periods(conn, table, params, plan.periods):
            periods.record_built(conn, plan)
            context.log.info(f"{table}: rebuilt {len(plan.periods)} period(s): {', '.join(plan.periods[:12])}")
            return {"built": "periods", "periods": MetadataValue.json(plan.periods)}
    sql_engine.build(conn, table, params, {})
    whole = periods.everything_of(conn, table, salt)
    periods.record_built(conn, whole, everything=True)
    return {"built": "whole table", "periods": MetadataValue.json(whole.periods)}


def build_unless_unchanged(conn, table: str, deps: tuple[str, ...], settings: FinopsSettings, inputs,
                           sql_engine: SqlEngineResource) -> dict:
    """Build `table` unless its inputs are as they were when it was last built
    (pipelines/warehouse/builds.py): a run after new telemetry leaves the billing marts alone, and
    the FX rates (660k ECB rates) are rebuilt only with new reference data, settings or code. Spark
    builds every model, and records nothing: what reads it is rebuilt on the next DuckDB run."""
    on_duckdb = sql_engine.engine == "duckdb"
    fingerprint = builds.inputs_fingerprint(conn, table, deps, model_salt(settings)) if on_duckdb else None
    if builds.built_from(conn, table, fingerprint):
        return {"built": "unchanged: its inputs are as they were"}
    sql_engine.build(conn, table, settings.sql_params(), inputs(settings) if inputs else {})  # DuckDB or Spark
    builds.record(conn, table, fingerprint)
    return {"built": "whole table"}


def fx_rates_input(settings: FinopsSettings) -> dict[str, pa.Table]:
    """The ECB's daily reference rates (pipelines/ingest/fx_reference.py, priority 1) and the user's own
    table (priority 0: it wins for the pairs it covers)."""
    tables = [ecb_rates()]
    if settings.fx_rates_file:
        t = pacsv.read_csv(Path(settings.fx_rates_file), convert_options=pacsv.ConvertOptions(column_types={
            "rate_date": pa.date32(), "from_currency": pa.string(), "to_currency": pa.string(),
            "rate": pa.string(), "source": pa.string()}))  # parsed by the SQL, at 12 decimals
        if "source" not in t.column_names:
            t = t.append_column("source", pa.nulls(t.num_rows, pa.string()))
        t = t.select(["rate_date", "from_currency", "to_currency", "rate", "source"])
        # Each line records which table converted it: a row without a source of its own says "user table".
        source = pc.fill_null(pc.if_else(pc.equal(pc.utf8_trim_whitespace(t["source"]), ""), None, t["source"]), "user table")
        t = t.set_column(4, "source", source)
        tables.append(t.append_column("priority", pa.array([0] * t.num_rows, pa.int32())).cast(FX_INPUT_SCHEMA))
    return {"fx_rates_input": pa.concat_tables(tables)}


def price_catalog_input(settings: FinopsSettings) -> dict[str, pa.Table]:
    """The bundled catalog and the user's file (priority 0: the user's price wins)."""
    sources = [(BUNDLED_PRICE_CATALOG, 1)] + ([(Path(settings.price_catalog_file), 0)] if settings.price_catalog_file else [])
    text = {c: pa.string() for c in ("provider", "sku", "gpu_model", "term", "currency", "unit", "region", "path", "source", "as_of")}
    tables = []
    for path, priority in sources:
        t = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types={**text, "gpu_count": pa.int32(), "price": pa.decimal128(18, 6)}))
        tables.append(t.select(list(PRICE_CATALOG_COLUMNS)).append_column("priority", pa.array([priority] * t.num_rows, pa.int32())))
    return {"price_catalog_input": pa.concat_tables(tables)}


PRICE_CATALOG_COLUMNS = ("provider", "sku", "gpu_model", "gpu_count", "term", "price", "currency", "unit", "region", "path",
                         "source", "as_of")


def phase_rules_input(settings: FinopsSettings) -> dict[str, pa.Table]:
    return {"phase_rules": load_rules(Path(settings.phase_rules_file) if settings.phase_rules_file else None)}


def charge_rules_input(settings: FinopsSettings) -> dict[str, pa.Table]:
    return {"charge_rules": load_charge_rules(Path(settings.charge_rules_file) if settings.charge_rules_file else None)}


fx_rates_asset = sql_asset("core.fx_rates", [], "core.fx_rates: FX rates by day and pair, the ECB's daily reference rates plus your own table",
                           "core", inputs=fx_rates_input)
core_billing_lines = sql_asset("core.billing_lines", ["raw.cost_lines", "raw.files", "raw.deliveries", "raw.delivery_slices"],
                               "core.billing_lines: the raw cost lines that count after the ledger's delivery rules, each once",
                               "core")
core_cost_lines = sql_asset("core.cost_lines", ["core.billing_lines", "core.fx_rates"],
                            "core.cost_lines: FOCUS charge rows, reporting currency beside billing currency", "core")
core_gpu_samples = sql_asset("core.gpu_samples", ["raw.gpu_samples", "raw.files"],
                             "core.gpu_samples: one GPU at one instant, UTC", "core")
core_gpu_minutes = sql_asset("core.gpu_minutes", ["core.gpu_samples"],
                             "core.gpu_minutes: one GPU-minute with samples; missing minutes have no row", "core")
core_workloads = sql_asset("core.workloads", ["raw.workloads", "raw.files"],
                           "core.workloads: one job or service with its phase (explicit or by rule) and GPUs", "core",
                           inputs=phase_rules_input)
core_storage_events = sql_asset("core.storage_events", ["raw.storage_events", "raw.files"],
                                "core.storage_events: checkpoint writes and transfers", "core")
marts_cost_attribution = sql_asset("marts.cost_attribution", ["core.cost_lines", "core.workloads", "core.gpu_minutes"],
                                   "marts.cost_attribution: each charge split into phases, with method and evidence", "marts",
                                   inputs=charge_rules_input)
marts_daily_cost = sql_asset("marts.daily_cost", ["marts.cost_attribution", "core.cost_lines"],
                             "marts.daily_cost: day × provider × service × phase", "marts")
marts_spend_by_phase = sql_asset("marts.spend_by_phase", ["marts.cost_attribution", "core.cost_lines", "core.gpu_minutes",
                                                          "core.workloads"],
                                 "marts.spend_by_phase: cost, share, GPU-hours paid and busy per phase", "marts")

price_catalog_asset = sql_asset("core.price_catalog", [], "core.price_catalog: GPU and egress prices with provenance",
                                "core", inputs=price_catalog_input)
marts_gpu_hour_prices = sql_asset("marts.gpu_hour_prices", ["core.cost_lines"],
                                  "marts.gpu_hour_prices: each GPU charge's own price per GPU-hour", "marts")
findings_egress = sql_asset("findings.egress", ["core.cost_lines", "core.storage_events", "core.price_catalog"],
                            "findings.egress: egress money, with repeated downloads priced as avoidable", "findings")
findings_slow_disk_idle = sql_asset("findings.slow_disk_idle",
                                    ["core.storage_events", "core.workloads", "core.gpu_minutes", "marts.gpu_hour_prices", "core.price_catalog"],
                                    "findings.slow_disk_idle: GPUs waiting on checkpoint writes to slow disks", "findings")
findings_unused_gpu = sql_asset("findings.unused_gpu",
                                ["core.gpu_minutes", "core.workloads", "core.cost_lines", "marts.gpu_hour_prices", "core.price_catalog"],
                                "findings.unused_gpu: idle runs, paid GPUs without telemetry, unused GPU commitments", "findings")
findings_unused_commitment = sql_asset("findings.unused_commitment", ["core.cost_lines"],
                                       "findings.unused_commitment: unused commitments and reservations for anything but GPUs",
                                       "findings")
findings_overprovisioned_inference = sql_asset(
    "findings.overprovisioned_inference", ["core.gpu_minutes", "core.workloads", "marts.gpu_hour_prices", "core.price_catalog"],
    "findings.overprovisioned_inference: inference paid at peak around the clock, with autoscaling savings", "findings")
findings_hidden_costs = sql_asset("findings.hidden_costs",
                                  ["findings.egress", "findings.slow_disk_idle", "findings.unused_gpu", "findings.unused_commitment",
                                   "findings.overprovisioned_inference", "core.fx_rates"],
                                  "findings.hidden_costs: one leak per kind, thing to act on and month, ranked by avoidable cost",
                                  "findings")
marts_daily_series = sql_asset("marts.daily_series", ["marts.cost_attribution", "core.cost_lines"],
                               "marts.daily_series: day × provider × sub-account × service × phase: cost, GPU-hours, egress GB",
                               "marts")
marts_gpu_hours_profile = sql_asset("marts.gpu_hours_profile", ["core.workloads", "core.gpu_minutes", "core.cost_lines"],
                                    "marts.gpu_hours_profile: hour × phase: GPU-hours held, busy, and GPUs paid", "marts")


@multi_asset(
    specs=[AssetSpec(key_of("marts.tco_scenarios"), deps=[key_of("marts.gpu_hours_profile")], group_name="marts",
                     description="marts.tco_scenarios: 3-year cost of each purchasing strategy for the measured usage"),
           AssetSpec(key_of("marts.tco_break_even"), deps=[key_of("marts.gpu_hours_profile")], group_name="marts",
                     description="marts.tco_break_even: fleet utilization at which two strategies cost the same")],
    pool=POOL,
    name="tco",
)
def tco_asset(warehouse: DuckDBResource, settings: FinopsSettings):
    """Price buy, monthly, commitments, on-demand, spot and hybrid over the measured profile."""
    with warehouse.get_connection() as conn:
        prepare(conn)
        try:
            result = tco.compute(conn, settings.tco_params_file)
        except tco.NoUsageMeasured as exc:
            tco.write(conn, [], [])
            apply_docs(conn, "marts.tco_scenarios", "marts.tco_break_even")
            for key in ("marts.tco_scenarios", "marts.tco_break_even"):
                yield MaterializeResult(asset_key=key_of(key), metadata={"rows": 0, "note": str(exc)})
            return
        tco.write(conn, result.scenarios, result.break_even)
        apply_docs(conn, "marts.tco_scenarios", "marts.tco_break_even")
    best = tco.cheapest(result.scenarios)
    yield MaterializeResult(asset_key=key_of("marts.tco_scenarios"), metadata={
        "rows": len(result.scenarios), "cheapest": best["scenario"], "cheapest_tco": f"{best['tco']} {best['currency']}"})
    yield MaterializeResult(asset_key=key_of("marts.tco_break_even"), metadata={"rows": len(result.break_even)})


ALL_ASSETS = [
    ingest_landing_asset, fx_rates_asset, core_billing_lines, core_cost_lines, core_gpu_samples, core_gpu_minutes,
    core_workloads, core_storage_events, marts_cost_attribution, marts_daily_cost, marts_spend_by_phase, marts_gpu_hours_profile, tco_asset,
    price_catalog_asset, marts_gpu_hour_prices, findings_egress, findings_slow_disk_idle, findings_unused_gpu,
    findings_unused_commitment, findings_overprovisioned_inference, findings_hidden_costs, marts_daily_series, *DAILY_ASSETS,
]
