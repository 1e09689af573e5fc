"""The SQL models: each table of core, marts and findings that a `sql/<schema>/<table>.sql` file
builds, what it reads, the reference data it is given, and how a run builds it.

This is the one list of them. The Dagster graph (pipelines/orchestration/assets.py) makes each an
asset; the Spark engine (pipelines/engines/spark.py) builds the same models in the same order.
Nothing here knows Dagster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from models.host_names import load_host_names
from models.phase_rules import load_charge_rules, load_rules
from pipelines.ingest.fx_reference import FX_INPUT_SCHEMA, ecb_rates
from pipelines.settings import BUNDLED_PRICE_CATALOG, FinopsSettings
from pipelines.warehouse import builds, periods, reference_cache
from pipelines.warehouse.periods import PERIOD_MODELS
from pipelines.warehouse.run_state import model_salt


@dataclass(frozen=True)
class SqlModel:
    table: str
    deps: tuple[str, ...]  # the tables its SQL reads (a test holds them equal)
    description: str
    group: str
    inputs: Callable[[FinopsSettings], dict[str, pa.Table]] | None = None  # Arrow tables the SQL reads by name

    @property
    def partitioned(self) -> bool:
        return self.table in PERIOD_MODELS


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


PRICE_CATALOG_COLUMNS = ("provider", "sku", "gpu_model", "gpu_count", "term", "price", "currency", "unit", "region", "path",
                         "source", "as_of")


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


def phase_rules_input(settings: FinopsSettings) -> dict[str, pa.Table]:
    return {"phase_rules": load_rules(Path(settings.phase_rules_file) if settings.phase_rules_file else None)}


def host_names_input(settings: FinopsSettings) -> dict[str, pa.Table]:
    """The user's host names of billed resources (models/host_names.py); none without a file."""
    return {"host_names_input": load_host_names([Path(p) for p in settings.host_names_files])}


def charge_rules_input(settings: FinopsSettings) -> dict[str, pa.Table]:
    return {"charge_rules": load_charge_rules(Path(settings.charge_rules_file) if settings.charge_rules_file else None)}


_MODELS = [
    SqlModel("core.fx_rates", (), "core.fx_rates: FX rates by day and pair, the ECB's daily reference rates plus your own table",
             "core", fx_rates_input),
    SqlModel("core.billing_lines", ("raw.cost_lines", "raw.files", "raw.deliveries", "raw.delivery_slices"),
             "core.billing_lines: the raw cost lines that count after the ledger's delivery rules, each once", "core"),
    SqlModel("core.service_names_by_billing_month", ("core.billing_lines",),
             "core.service_names_by_billing_month: lines per billing month, ServiceName, category and subcategory", "core"),
    SqlModel("core.cost_lines", ("core.billing_lines", "core.fx_rates", "core.service_names_by_billing_month"),
             "core.cost_lines: FOCUS charge rows, reporting currency beside billing currency", "core"),
    SqlModel("core.gpu_samples", ("raw.gpu_samples", "raw.files"), "core.gpu_samples: one GPU at one instant, UTC", "core"),
    SqlModel("core.gpu_minutes", ("core.gpu_samples",),
             "core.gpu_minutes: one GPU-minute with samples; missing minutes have no row", "core"),
    SqlModel("core.workloads", ("raw.workloads", "raw.files"),
             "core.workloads: one job or service with its phase (explicit or by rule) and GPUs", "core", phase_rules_input),
    SqlModel("core.host_names", ("core.workloads",),
             "core.host_names: the host telemetry names a billed resource by (your file, else its workloads)", "core",
             host_names_input),
    SqlModel("core.storage_events", ("raw.storage_events", "raw.files"), "core.storage_events: checkpoint writes and transfers",
             "core"),
    SqlModel("marts.cost_attribution", ("core.cost_lines", "core.workloads", "core.gpu_minutes", "core.host_names"),
             "marts.cost_attribution: each charge split into phases, with method and evidence", "marts", charge_rules_input),
    SqlModel("marts.daily_cost_by_billing_month", ("marts.cost_attribution", "core.cost_lines"),
             "marts.daily_cost_by_billing_month: day × billing month × provider × service × phase", "marts"),
    SqlModel("marts.daily_cost", ("marts.daily_cost_by_billing_month",),
             "marts.daily_cost: day × provider × service × phase", "marts"),
    SqlModel("marts.gpu_busy_by_workload_hour", ("core.gpu_minutes", "core.workloads"),
             "marts.gpu_busy_by_workload_hour: busy GPU-minutes per UTC hour, host and workload", "marts"),
    SqlModel("marts.gpu_busy_by_host_hour", ("core.gpu_minutes",),
             "marts.gpu_busy_by_host_hour: busy GPU-minutes per UTC hour and host, whatever ran", "marts"),
    SqlModel("marts.spend_by_phase", ("marts.daily_cost_by_billing_month", "marts.gpu_busy_by_workload_hour"),
             "marts.spend_by_phase: cost, share, GPU-hours paid and busy per phase", "marts"),
    SqlModel("core.price_catalog", (), "core.price_catalog: GPU and egress prices with provenance", "core", price_catalog_input),
    SqlModel("marts.gpu_hour_prices", ("core.cost_lines", "core.host_names"),
             "marts.gpu_hour_prices: what a GPU-hour was paid, per resource and stretch of its charges", "marts"),
    SqlModel("marts.egress_lines_by_billing_month", ("core.cost_lines",),
             "marts.egress_lines_by_billing_month: each billing line that moves data out, its GB and path", "marts"),
    SqlModel("findings.egress", ("marts.egress_lines_by_billing_month", "core.storage_events", "core.price_catalog"),
             "findings.egress: egress money, with repeated downloads priced as avoidable", "findings"),
    SqlModel("marts.gpu_spans_by_day", ("core.gpu_minutes",),
             "marts.gpu_spans_by_day: each GPU's stretches of minutes with telemetry, idle or not, per UTC day", "marts"),
    SqlModel("marts.gpu_minutes_in_storage_writes", ("core.gpu_minutes", "core.storage_events"),
             "marts.gpu_minutes_in_storage_writes: per host-minute a storage write covers, its GPUs' busy signal", "marts"),
    SqlModel("findings.slow_disk_idle",
             ("core.storage_events", "core.workloads", "marts.gpu_minutes_in_storage_writes", "marts.gpu_spans_by_day",
              "marts.gpu_hour_prices", "core.price_catalog"),
             "findings.slow_disk_idle: GPUs waiting on checkpoint writes to slow disks", "findings"),
    SqlModel("findings.overprovisioned_inference",
             ("marts.gpu_busy_by_host_hour", "marts.gpu_busy_by_workload_hour", "core.workloads", "marts.gpu_hour_prices",
              "core.price_catalog"),
             "findings.overprovisioned_inference: inference paid at peak around the clock, with autoscaling savings, "
             "or on more replicas than a flat load needs", "findings"),
    SqlModel("findings.unused_gpu",
             ("marts.gpu_spans_by_day", "core.workloads", "core.cost_lines", "marts.gpu_hour_prices", "core.price_catalog",
              "findings.overprovisioned_inference", "findings.slow_disk_idle"),
             "findings.unused_gpu: idle runs, paid GPUs without telemetry, unused GPU commitments", "findings"),
    SqlModel("findings.unused_commitment", ("core.cost_lines",),
             "findings.unused_commitment: unused commitments and reservations for anything but GPUs", "findings"),
    SqlModel("findings.hidden_costs",
             ("findings.egress", "findings.slow_disk_idle", "findings.unused_gpu", "findings.unused_commitment",
              "findings.overprovisioned_inference", "core.fx_rates"),
             "findings.hidden_costs: one leak per kind, thing to act on and month, ranked by avoidable cost", "findings"),
    SqlModel("marts.daily_series_by_billing_month", ("marts.cost_attribution", "core.cost_lines", "marts.egress_lines_by_billing_month"),
             "marts.daily_series_by_billing_month: day × billing month × series: usage cost, GPU-seconds, egress GB", "marts"),
    SqlModel("marts.daily_series", ("marts.daily_series_by_billing_month", "marts.daily_cost_by_billing_month"),
             "marts.daily_series: day × provider × sub-account × service × phase: cost, GPU-hours, egress GB", "marts"),
    SqlModel("marts.gpu_hours_profile",
             ("core.workloads", "marts.gpu_spans_by_day", "marts.gpu_busy_by_workload_hour", "marts.gpu_busy_by_host_hour",
              "core.cost_lines", "core.host_names"),
             "marts.gpu_hours_profile: hour × phase: GPU-hours held, busy, and GPUs paid", "marts"),
]
SQL_MODELS: dict[str, SqlModel] = {m.table: m for m in _MODELS}


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


UNCHANGED = "unchanged: its inputs are as they were"


def build_model(conn, table: str, settings: FinopsSettings, engine, days: tuple[date, date] | None = None,
                only_changed: bool = True, log: Callable[[str], None] = lambda message: None) -> dict:
    """(Re)build one model on `conn` (prepared) with `engine` (pipelines/engines/resource.py), as a
    run does; returns what was built, for the run's metadata.

    A partitioned table builds the periods `days` asks for (only the changed ones when
    `only_changed`), in place; any other model is left alone when its inputs are as they were
    when it was last built (pipelines/warehouse/builds.py). Spark builds every model whole and
    records nothing, so the next DuckDB run rebuilds what reads it."""
    model = SQL_MODELS[table]
    salt, params = model_salt(settings), settings.sql_params()
    on_duckdb = engine.engine == "duckdb"
    if model.partitioned:
        if on_duckdb and not periods.needs_full_build(conn, table):
            plan = periods.plan(conn, table, salt, days, only_changed)
            if not plan.periods:
                return {"built": "nothing changed", "periods": []}
            batches = periods.batches(conn, table, plan.periods)
            if periods.build_periods(conn, table, params, batches):
                periods.record_built(conn, plan)
                log(f"{table}: rebuilt {len(plan.periods)} period(s): {', '.join(plan.periods[:12])}")
                return {"built": "periods", "periods": plan.periods, "statements": len(batches)}
        whole = periods.everything_of(conn, table, salt)
        statements = 1
        if on_duckdb:  # a few periods per statement, so memory stays bounded by the batch, not the history
            batches = periods.batches(conn, table, whole.periods)
            periods.build_fresh(conn, table, params, batches)
            statements = max(1, len(batches))
            log(f"{table}: built {len(whole.periods)} period(s) in {statements} statement(s)")
        else:
            engine.build(conn, table, params, {})
        periods.record_built(conn, whole, everything=True)
        return {"built": "whole table", "periods": whole.periods, "statements": statements}
    fingerprint = builds.inputs_fingerprint(conn, table, model.deps, salt) if on_duckdb else None
    if table in periods.DERIVED_MARTS and on_duckdb:
        return _build_derived_mart(conn, model, settings, fingerprint, days, only_changed, log)
    if builds.built_from(conn, table, fingerprint):
        return {"built": UNCHANGED}

    def build() -> None:
        engine.build(conn, table, params, model.inputs(settings) if model.inputs else {})  # DuckDB or Spark

    if on_duckdb and table in reference_cache.CACHED_TABLES:  # reference data alone: kept once per machine
        how = reference_cache.build_cached(conn, table, fingerprint, build)
        builds.record(conn, table, fingerprint)
        return {"built": "whole table" if how == "built" else "whole table, copied from the reference cache"}
    build()
    builds.record(conn, table, fingerprint)
    return {"built": "whole table"}


def _build_derived_mart(conn, model: SqlModel, settings: FinopsSettings, fingerprint: str | None,
                        days: tuple[date, date] | None, only_changed: bool, log: Callable[[str], None]) -> dict:
    """A mart built per billing month or UTC day of the table it reads (periods.DERIVED_MARTS) on
    DuckDB: left alone when no input changed; else the periods whose inputs changed (and, in a
    backfill, the periods of its days) are rebuilt in place; built whole when it is new, or its
    columns changed."""
    table, salt, params = model.table, model_salt(settings), settings.sql_params()
    if only_changed and builds.built_from(conn, table, fingerprint):
        return {"built": UNCHANGED}
    inputs = model.inputs(settings) if model.inputs else {}
    for name, arrow_table in inputs.items():
        conn.register(name, arrow_table)
    try:
        if not periods.needs_full_build(conn, table):
            plan = periods.plan(conn, table, salt, days, only_changed)
            batches = periods.batches(conn, table, plan.periods)
            if periods.build_periods(conn, table, params, batches):
                periods.record_built(conn, plan, whole=fingerprint)
                log(f"{table}: rebuilt {len(plan.periods)} period(s): {', '.join(plan.periods[:12])}")
                return {"built": "periods", "periods": plan.periods, "statements": len(batches)}
        whole = periods.everything_of(conn, table, salt)
        batches = periods.batches(conn, table, whole.periods)
        periods.build_fresh(conn, table, params, batches)
        periods.record_built(conn, whole, everything=True, whole=fingerprint)
        return {"built": "whole table", "periods": whole.periods, "statements": max(1, len(batches))}
    finally:
        for name in inputs:
            conn.unregister(name)
