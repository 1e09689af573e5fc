"""Run the whole asset graph in this process, as `finops run` and `finops demo` do."""

import os
import shutil
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from dagster import AssetSelection, DagsterEventType, DagsterInstance, materialize

from pipelines.orchestration.assets import ALL_ASSETS
from pipelines.orchestration.automation import INGEST, daily_run_config, plan_models_run
from pipelines.orchestration.definitions import failed_steps, warehouse_resource
from pipelines.orchestration.expectations import start_worker as start_expectations_worker
from pipelines.orchestration.expectations import stop_worker as stop_expectations_worker
from pipelines.engines.resource import SqlEngineResource
from pipelines.settings import REPO_ROOT, FinopsSettings
from pipelines.warehouse.connection import connect
from pipelines.warehouse.publish import StagedWrite, forget_outcome, last_published

DAGSTER_HOME = REPO_ROOT / ".dagster_home"


def ensure_dagster_home() -> Path:
    """Point DAGSTER_HOME at the git-ignored folder in the working tree holding dagster.yaml."""
    home = Path(os.environ.get("DAGSTER_HOME") or DAGSTER_HOME)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


@dataclass
class GraphRun:
    success: bool
    failed_checks: list[str]
    warned_checks: list[str]
    published: bool = True  # False: a step failed and the warehouse was left as it was before the run
    # "<step>: <its own error's first line>" for each step that failed, so a caller can say why in one line.
    failed_steps: list[str] = field(default_factory=list)
    # check name → what it found, in a few words ("BillingAccountId-C-000-M (3 lines), …"), for each
    # check that warned or failed: the run's summary says which rule, not only which check.
    check_findings: dict[str, str] = field(default_factory=dict)


# The keys of a check's findings that name one (a rule, a file, a column, a GPU model), and those
# that count it, in the order they are looked for.
NAMING_KEYS = ("rule", "path", "column", "name", "expectation", "host", "day", "month", "file")
COUNTING_KEYS = ("violations", "unexpected_count", "lines", "rows", "minutes", "gpus")


def counted(value, key: str) -> str:
    """'1 line', '3 lines', '12 rows': a finding's count in words."""
    noun = {"violations": "line", "unexpected_count": "row"}.get(key, key.rstrip("s"))
    return f"{value} {noun}" + ("" if str(value) == "1" else "s")


def check_findings(metadata: dict, shown: int = 3) -> str:
    """A failed check's findings in one line: the first few items its metadata lists, each by what
    names it and how many it counts, then how many more."""
    items = []
    for value in metadata.values():
        data = getattr(value, "data", None)
        if isinstance(data, list):
            items += data
    words = []
    for item in items:
        if isinstance(item, dict):
            name = next((str(item[k]) for k in NAMING_KEYS if item.get(k) not in (None, "")), None)
            if name and item.get("text"):  # a rule's own words: 'BillingAccountId MUST NOT be null'
                name += f": {str(item['text'])[:80]}"
            count = next((counted(item[k], k) for k in COUNTING_KEYS if item.get(k) not in (None, "")), None)
            words.append(f"{name} ({count})" if name and count else name or count or str(item)[:80])
        else:
            words.append(str(item)[:120])
    more = f", and {len(words) - shown} more" if len(words) > shown else ""
    return ", ".join(words[:shown]) + more


def step_failures(instance: DagsterInstance, run_id: str) -> list[str]:
    """Each failed step of a run with its error's message on one line: the step's own error, not
    Dagster's wrapper around it (nor the error that one was raised from, which says less)."""
    out = []
    for record in instance.all_logs(run_id, of_type=DagsterEventType.STEP_FAILURE):
        event = record.dagster_event
        error = event.step_failure_data.error if event and event.step_failure_data else None
        while error is not None and error.cls_name and error.cls_name.startswith("Dagster") and error.cause is not None:
            error = error.cause
        message = (error.message.strip().splitlines() or [""])[0] if error is not None else "failed"
        out.append(f"{event.step_key if event else '?'}: {message}")
    return out


def run_config(as_of: date | None = None, log_level: str = "WARNING") -> dict:
    """Run config of the whole graph: the run's date for the daily assets, and the console's level."""
    # Step-by-step events stay in the instance (and the UI); the terminal gets warnings and errors.
    return {**daily_run_config(as_of.isoformat() if as_of else None), "loggers": {"console": {"config": {"log_level": log_level}}}}


def run_graph(settings: FinopsSettings, warehouse: Path, instance: DagsterInstance | None = None,
              log_level: str = "WARNING", as_of: date | None = None, start_empty: bool = False,
              sql_engine: SqlEngineResource | None = None, days: tuple[date, date] | None = None) -> GraphRun:
    """Materialize the graph and run every check; the warehouse file is created if missing.

    Two Dagster runs, one published snapshot: the ingest first, then the models. Only after the
    ingest is it known which billing months and telemetry days changed, and a Dagster run has one
    partition range, chosen when it starts; so the models' run covers the days whose inputs changed
    and rebuilds only those periods (pipelines/warehouse/periods.py). `days` (first, last) is a
    backfill instead: those days' periods are rebuilt whether they changed or not.

    Both runs write one staging copy of the warehouse, published when both succeeded (`published`);
    otherwise the warehouse stays as it was. `as_of` is the run's date (default: the settings'
    default run date): the report and anomaly scoring follow it. `start_empty` builds from an empty
    warehouse instead of a copy (the demo's fresh start); `sql_engine` builds the SQL models
    (default: DuckDB)."""
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    if instance is None:
        ensure_dagster_home()
        instance = DagsterInstance.get()
    forget_outcome(warehouse)
    engine = sql_engine or SqlEngineResource()
    write = StagedWrite.begin(warehouse, fresh=start_empty)
    results, published = [], False
    # Great Expectations imports on the other core while the run ingests (pipelines/orchestration/expectations.py).
    start_expectations_worker()
    try:
        resources = {"warehouse": warehouse_resource(str(warehouse), staging_file=str(write.staging)), "settings": settings,
                     "sql_engine": engine}

        def launch(selection: AssetSelection, tags: dict[str, str] | None = None, daily: bool = True):
            config = run_config(as_of, log_level) if daily else {"loggers": run_config(as_of, log_level)["loggers"]}
            result = materialize(ALL_ASSETS, selection=selection, resources=resources, instance=instance,
                                 raise_on_error=False, run_config=config, tags=tags)
            results.append(result)
            return not failed_steps(instance, result.run_id)

        if launch(INGEST, daily=False):
            conn = connect(write.staging)
            try:
                models = plan_models_run(conn, settings, as_of or settings.default_run_date(), days)
            finally:
                conn.close()
            published = launch(models.selection, models.tags)
    finally:
        stop_expectations_worker()
        write.finish(publish_it=published)
    failed, warned, findings = [], [], {}
    for result in results:
        for evaluation in result.get_asset_check_evaluations():
            if not evaluation.passed:
                name = f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}"
                (warned if evaluation.severity.value == "WARN" else failed).append(name)
                findings[name] = check_findings(evaluation.metadata or {})
    success = all(r.success for r in results) and not failed
    steps = [f for r in results for f in step_failures(instance, r.run_id)]
    return GraphRun(success, failed, warned, bool(last_published(warehouse)), steps, findings)
