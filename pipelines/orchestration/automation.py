"""When the graph runs on its own: every morning at 06:00 UTC, and when new files land.

Both start the whole graph, ingest to report (job `finops_all`); the run's date goes to the daily
assets as config, so a late or retried run still reports the day it was scheduled for.
"""

import hashlib
from datetime import UTC, datetime
from pathlib import Path

from dagster import (DefaultScheduleStatus, DefaultSensorStatus, RunRequest, ScheduleEvaluationContext, SensorEvaluationContext,
                     SkipReason, define_asset_job, schedule, sensor)

from pipelines.orchestration.daily_assets import ANOMALY_OP, REPORT_OP, WEBHOOK_OP
from pipelines.ingest.landing import landing_files
from pipelines.settings import FinopsSettings

# The whole graph, ingest to report, as one job.
finops_job = define_asset_job("finops_all", selection="*")


def daily_run_config(as_of: str | None) -> dict:
    """The run's date for each daily asset (None: today, UTC)."""
    return {"ops": {op: {"config": {"as_of": as_of}} for op in (ANOMALY_OP, REPORT_OP, WEBHOOK_OP)}}


def build_daily_schedule(default_status: DefaultScheduleStatus = DefaultScheduleStatus.RUNNING):
    """The 06:00 schedule; the demo's code location gets it STOPPED (see pipelines/orchestration/definitions.py)."""

    @schedule(job=finops_job, cron_schedule="0 6 * * *", execution_timezone="UTC", default_status=default_status,
              name="daily_report_schedule",
              description="Every morning at 06:00 UTC: ingest what arrived, recompute, publish the day's report.")
    def daily_report_schedule(context: ScheduleEvaluationContext) -> RunRequest:
        as_of = context.scheduled_execution_time.date().isoformat()
        return RunRequest(run_key=f"daily-{as_of}", run_config=daily_run_config(as_of), tags={"finops/as_of": as_of})

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


@sensor(job=finops_job, minimum_interval_seconds=60, default_status=DefaultSensorStatus.STOPPED,
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
    return RunRequest(run_key=f"landing-{digest}", run_config=daily_run_config(today),
                      tags={"finops/trigger": "landing", "finops/landing_files": str(count)})
