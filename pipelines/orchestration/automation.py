"""When the graph runs on its own: every morning at 06:00 UTC, and when new files land.

Both start the ingest (job `finops_ingest`); when it succeeds, `models_after_ingest` starts the
models (job `finops_models`, partitioned by month) over the periods whose inputs changed, as
`finops run` does in one process. The run's date goes to the daily assets as config, so a late or
retried run still reports the day it was scheduled for. A backfill of days is the models job over
a range of partitions, launched from the UI (single run) or by `finops run --since/--until`.
"""

import hashlib
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from dagster import (AssetSelection, DagsterRunStatus, DefaultScheduleStatus, DefaultSensorStatus, RunRequest,
                     RunStatusSensorContext, ScheduleEvaluationContext, SensorEvaluationContext, SkipReason, define_asset_job,
                     run_status_sensor, schedule, sensor)

from dagster_duckdb import DuckDBResource

from pipelines.orchestration.assets import ALL_ASSETS, RAW_ASSETS, key_of
from pipelines.orchestration.daily_assets import ANOMALY_OP, REPORT_OP, WEBHOOK_OP
from pipelines.orchestration.partitions import MONTHS, range_tags
from pipelines.ingest.landing import landing_files
from pipelines.settings import FinopsSettings
from pipelines.warehouse.periods import PERIOD_MODELS, dirty_day_range, needs_full_build
from pipelines.warehouse.run_state import model_salt

# The graph's two runs: the ingest (with the registry's checks), then every model.
INGEST = AssetSelection.assets(*(key_of(t) for t in RAW_ASSETS))
MODELS = AssetSelection.all() - INGEST
PARTITIONED_KEYS = {key_of(t) for t in PERIOD_MODELS}
PARTITIONED = AssetSelection.assets(*PARTITIONED_KEYS)

ingest_job = define_asset_job("finops_ingest", selection=INGEST,
                              description="Read new landing files into the lake and the registry.")
models_job = define_asset_job("finops_models", selection=MODELS, partitions_def=MONTHS,
                              description="Build core, marts, findings and the report; the partitioned core tables "
                                          "over the run's days.")
AS_OF_TAG = "finops/as_of"


@dataclass(frozen=True)
class ModelsRun:
    selection: AssetSelection
    tags: dict[str, str]


def plan_models_run(conn, settings: FinopsSettings, today: date, days: tuple[date, date] | None = None) -> ModelsRun:
    """The models' run after an ingest: every model, the partitioned ones over the days whose
    inputs changed (or over `days`, a backfill: rebuilt whether changed or not). With nothing
    changed, the partitioned models stay out of the run."""
    if days is not None:
        return ModelsRun(MODELS, range_tags(*days, only_changed=False))
    changed = dirty_day_range(conn, model_salt(settings), today)
    if changed is None and not any(needs_full_build(conn, table) for table in PERIOD_MODELS):
        return ModelsRun(MODELS - PARTITIONED, {})
    return ModelsRun(MODELS, range_tags(*(changed or (today, today)), only_changed=True))


def daily_run_config(as_of: str | None) -> dict:
    """The run's date for each daily asset (None: today, UTC)."""
    return {"ops": {op: {"config": {"as_of": as_of}} for op in (ANOMALY_OP, REPORT_OP, WEBHOOK_OP)}}


def build_daily_schedule(default_status: DefaultScheduleStatus = DefaultScheduleStatus.RUNNING):
    """The 06:00 schedule; the demo's code location gets it STOPPED (see pipelines/orchestration/definitions.py)."""

    @schedule(job=ingest_job, cron_schedule="0 6 * * *", execution_timezone="UTC", default_status=default_status,
              name="daily_report_schedule",
              description="Every morning at 06:00 UTC: ingest what arrived, recompute, publish the day's report.")
    def daily_report_schedule(context: ScheduleEvaluationContext) -> RunRequest:
        as_of = context.scheduled_execution_time.date().isoformat()
        return RunRequest(run_key=f"daily-{as_of}", tags={AS_OF_TAG: as_of})  # the models' run reports that day

    return daily_report_schedule


daily_report_schedule = build_daily_schedule()


def landing_digest(landing: Path) -> tuple[str, int]:
    """A digest of every landing file's path, size and modification time, and the file count."""
    files = landing_files(landing)
    h = hashlib.sha256()
    for path in files:
        stat = path.stat()
        h.update(f"{path.relative_to(landing).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return h.hexdigest()[:24], len(files)


@sensor(job=ingest_job, minimum_interval_seconds=60, default_status=DefaultSensorStatus.STOPPED,
        description="Starts a run when files are added to or changed in the landing folder.")
def landing_sensor(context: SensorEvaluationContext, settings: FinopsSettings):
    landing = Path(settings.landing_dir)
    if not landing.is_dir():
        return SkipReason(f"landing folder {landing} does not exist")
    digest, count = landing_digest(landing)
    if digest == context.cursor:
        return SkipReason("no new or changed files in the landing folder")
    # The cursor is one digest, so it stays small however many files land; the ingest itself knows
    # by sha256 which files are new, so a run started by any change loads exactly those.
    context.update_cursor(digest)
    today = datetime.now(UTC).date().isoformat()
    return RunRequest(run_key=f"landing-{digest}",
                      tags={"finops/trigger": "landing", "finops/landing_files": str(count), AS_OF_TAG: today})


def build_models_sensor(default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING):
    """After each successful ingest run, the models' run over the days it changed."""

    @run_status_sensor(run_status=DagsterRunStatus.SUCCESS, monitored_jobs=[ingest_job], request_job=models_job,
                       default_status=default_status, name="models_after_ingest",
                       description="Starts the models over the days whose inputs changed, after each ingest.")
    def models_after_ingest(context: RunStatusSensorContext, settings: FinopsSettings, warehouse: DuckDBResource):
        from pipelines.warehouse.connection import connect

        as_of = context.dagster_run.tags.get(AS_OF_TAG) or datetime.now(UTC).date().isoformat()
        conn = connect(warehouse.database, read_only=True)
        try:
            run = plan_models_run(conn, settings, date.fromisoformat(as_of))
        finally:
            conn.close()
        # Nothing partitioned to build: the job's other assets only (a partitioned job's run needs days otherwise).
        selection = None if PARTITIONED_KEYS <= set(run.selection.resolve(ALL_ASSETS)) else \
            sorted(run.selection.resolve(ALL_ASSETS), key=lambda k: k.to_user_string())
        return RunRequest(run_key=f"models-after-{context.dagster_run.run_id}", run_config=daily_run_config(as_of),
                          asset_selection=selection, tags={**run.tags, AS_OF_TAG: as_of})

    return models_after_ingest
