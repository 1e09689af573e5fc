"""The Dagster code location: `dagster dev -m pipelines.definitions` (or `make ui`)."""

from __future__ import annotations

from contextlib import contextmanager

from dagster import Definitions, in_process_executor
from dagster_duckdb import DuckDBResource

from pipelines.assets import ALL_ASSETS
from pipelines.automation import daily_report_schedule, finops_job, landing_sensor
from pipelines.checks import ALL_CHECKS
from pipelines.settings import FinopsSettings, settings_from_env


class WarehouseResource(DuckDBResource):
    """DuckDBResource that closes its connection even when the asset using it fails, so the
    process can reopen the file afterwards (DuckDB refuses a second, differently configured one)."""

    @contextmanager
    def get_connection(self):
        with super().get_connection() as conn:
            try:
                yield conn
            finally:
                conn.close()


def warehouse_resource(path: str) -> DuckDBResource:
    return WarehouseResource(database=path)


def build_definitions(settings: FinopsSettings, warehouse_path: str) -> Definitions:
    return Definitions(
        assets=ALL_ASSETS,
        asset_checks=ALL_CHECKS,
        jobs=[finops_job],
        schedules=[daily_report_schedule],
        sensors=[landing_sensor],
        resources={"warehouse": warehouse_resource(warehouse_path), "settings": settings},
        # One process writes the DuckDB file: DuckDB allows a single writer process per file.
        executor=in_process_executor,
    )


defs = build_definitions(*settings_from_env())
