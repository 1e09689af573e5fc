"""Run the whole asset graph in this process, as `finops run` and `finops demo` do."""

import os
import shutil
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from dagster import DagsterInstance, materialize

from pipelines.orchestration.assets import ALL_ASSETS
from pipelines.orchestration.checks import ALL_CHECKS
from pipelines.orchestration.automation import daily_run_config
from pipelines.orchestration.definitions import warehouse_resource
from pipelines.engines.resource import SqlEngineResource
from pipelines.settings import REPO_ROOT, FinopsSettings
from pipelines.warehouse.publish import forget_outcome, last_published

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


def run_config(as_of: date | None = None, log_level: str = "WARNING") -> dict:
    """Run config of the whole graph: the run's date for the daily assets, and the console's level."""
    # Step-by-step events stay in the instance (and the UI); the terminal gets warnings and errors.
    return {**daily_run_config(as_of.isoformat() if as_of else None), "loggers": {"console": {"config": {"log_level": log_level}}}}


def run_graph(settings: FinopsSettings, warehouse: Path, instance: DagsterInstance | None = None,
              log_level: str = "WARNING", as_of: date | None = None, start_empty: bool = False,
              sql_engine: SqlEngineResource | None = None) -> GraphRun:
    """Materialize every asset and run every check; the warehouse file is created if missing.
    `as_of` is the run's date (default: the settings' default run date): the report and anomaly
    scoring follow it. The run builds a staging copy of the warehouse and publishes it at its end
    (`published`), or leaves the warehouse as it was when a step failed; `start_empty` builds from
    an empty warehouse instead of a copy (the demo's fresh start); `sql_engine` builds the SQL
    models (default: DuckDB)."""
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    if instance is None:
        ensure_dagster_home()
        instance = DagsterInstance.get()
    forget_outcome(warehouse)  # a run that never opens the warehouse publishes nothing
    result = materialize(
        [*ALL_ASSETS, *ALL_CHECKS],
        resources={"warehouse": warehouse_resource(str(warehouse), start_empty), "settings": settings,
                   "sql_engine": sql_engine or SqlEngineResource()},
        instance=instance,
        raise_on_error=False,
        run_config=run_config(as_of, log_level),
    )
    failed, warned = [], []
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            name = f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}"
            (warned if evaluation.severity.value == "WARN" else failed).append(name)
    return GraphRun(result.success and not failed, failed, warned, bool(last_published(warehouse)))
