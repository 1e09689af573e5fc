"""The Dagster code location: `dagster dev -m pipelines.orchestration.definitions` (or `make ui`)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import duckdb
from dagster import DagsterEventType, DefaultScheduleStatus, DefaultSensorStatus, Definitions, InitResourceContext, in_process_executor
from dagster_duckdb import DuckDBResource
from pydantic import Field, PrivateAttr

from pipelines.orchestration.assets import ALL_ASSETS
from pipelines.orchestration.automation import (build_daily_schedule, build_models_sensor, daily_report_schedule, ingest_job,
                                                 landing_sensor, models_job)
from pipelines.orchestration.daily_assets import WEBHOOK_OP
from pipelines.engines.resource import SqlEngineResource
from pipelines.lake.layout import lake_of
from pipelines.settings import FinopsSettings, is_demo_deployment, settings_from_env
from pipelines.warehouse.connection import keep_block_memory, memory_limit
from pipelines.warehouse.publish import StagedWrite


class WarehouseResource(DuckDBResource):
    """The warehouse as a run writes it: into a staging copy that is published whole when the run
    ends (pipelines/warehouse/publish.py), under the warehouse's writer lock.

    Dagster sets a resource up once per run and tears it down once at its end; the code location
    runs every step in one process (in_process_executor), so one staging file serves the whole run.
    The copy starts at the run's first connection: `dagster job execute` (execute_job) sets the
    resource up a second time after the run, to load outputs, and that must not copy and publish again.
    """

    start_empty: bool = Field(default=False, description="Build from an empty warehouse instead of a copy of the published one.")
    staging_file: str | None = Field(default=None, description="A staging copy begun by the caller, who publishes it: "
                                                                "`finops run` spans two Dagster runs (ingest, then the "
                                                                "models) with one published snapshot.")
    _context: InitResourceContext | None = PrivateAttr(default=None)
    _write: StagedWrite | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._context = None if self.staging_file else context

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        write, self._write, self._context = self._write, None, None
        if write is None:
            return  # no step opened the warehouse
        failed = _failed_steps(context)
        if write.finish(publish_it=not failed):
            context.log.info(f"published {self.database}")
        else:
            context.log.warning(f"{self.database} left as it was before the run: steps failed: {', '.join(failed)}")

    def _staging(self) -> str:
        """The file this run writes: its staging copy inside a run, the warehouse itself outside one."""
        if self.staging_file:
            return self.staging_file
        if self._context is None:
            return self.database
        if self._write is None:
            log = self._context.log

            def waiting(holder) -> None:
                log.warning(f"waiting for the warehouse {self.database}: held by {holder.describe()}")

            self._write = StagedWrite.begin(Path(self.database), fresh=self.start_empty, on_wait=waiting)
        return str(self._write.staging)

    @contextmanager
    def get_connection(self):
        # Closed even when the asset using it fails, so the staging file can be checkpointed and published.
        # Spilled data goes under the lake, not beside the staging file (whose name a next run sweeps).
        spill = str(lake_of(self.database) / "_spill")
        conn = duckdb.connect(self._staging(), config={"custom_user_agent": "dagster", "temp_directory": spill,
                                                       **self.connection_config})
        try:
            keep_block_memory(conn)
            yield conn
        finally:
            conn.close()


# The webhook step writes nothing to the warehouse; its failure (a chat server down) must not throw
# away the run's anomaly state, which the report files on disk already show.
_STEPS_THAT_DO_NOT_BLOCK_PUBLISHING = {WEBHOOK_OP}


def _failed_steps(context: InitResourceContext) -> list[str]:
    if context.instance is None or context.run_id is None:
        return []
    return failed_steps(context.instance, context.run_id)


def failed_steps(instance, run_id: str) -> list[str]:
    """Steps of a run that started and did not succeed, from its event log (all written by now:
    one process). Started-minus-succeeded also catches a step cut short by a cancel, which may log
    no failure; a blocking check that fails stops its step too, so bad money is never published."""

    def steps(kind: DagsterEventType) -> set[str]:
        return {r.dagster_event.step_key for r in instance.all_logs(run_id, of_type=kind)
                if r.dagster_event is not None and r.dagster_event.step_key}

    unfinished = steps(DagsterEventType.STEP_START) - steps(DagsterEventType.STEP_SUCCESS)
    return sorted(unfinished - _STEPS_THAT_DO_NOT_BLOCK_PUBLISHING)


def warehouse_resource(path: str, start_empty: bool = False, staging_file: str | None = None) -> WarehouseResource:
    return WarehouseResource(database=path, start_empty=start_empty, staging_file=staging_file,
                             # DuckDB's working memory (spilling under the lake beyond it): a run's peak stays bounded whatever the history.
                             connection_config={"memory_limit": memory_limit()})


def sql_engine_from_env() -> SqlEngineResource:
    """The SQL models' engine: FINOPS_ENGINE (duckdb | spark), FINOPS_SPARK_MASTER, FINOPS_SPARK_LAKE.
    A run launched from the UI may also set it in its run config (resources: sql_engine: config: ...)."""
    return SqlEngineResource(engine=os.environ.get("FINOPS_ENGINE", "duckdb").strip().lower() or "duckdb",
                             spark_master=os.environ.get("FINOPS_SPARK_MASTER") or "local[2]",
                             spark_lake=os.environ.get("FINOPS_SPARK_LAKE") or None)


def build_definitions(settings: FinopsSettings, warehouse_path: str) -> Definitions:
    # Over the demo nothing starts on its own: a 06:00 run dated the real today would rescore the
    # scenario's dated state. Turn the schedule on in the UI (Automation) if you want it.
    demo = is_demo_deployment(settings, warehouse_path)
    schedule = build_daily_schedule(DefaultScheduleStatus.STOPPED) if demo else daily_report_schedule
    models_sensor = build_models_sensor(DefaultSensorStatus.STOPPED if demo else DefaultSensorStatus.RUNNING)
    return Definitions(
        assets=ALL_ASSETS,
        jobs=[ingest_job, models_job],
        schedules=[schedule],
        sensors=[landing_sensor, models_sensor],  # landing_sensor: STOPPED by default everywhere
        resources={"warehouse": warehouse_resource(warehouse_path), "settings": settings, "sql_engine": sql_engine_from_env()},
        # One process writes the DuckDB file: DuckDB allows a single writer process per file.
        executor=in_process_executor,
    )


defs = build_definitions(*settings_from_env())
