"""The daily end of the graph: anomaly detection, the report, and its delivery to chat.

Each takes the run's date (`as_of`, default today in UTC) as config, so the 06:00 schedule, a
backfill and `finops run --as-of` all say which day they are about.
"""

import json
from datetime import UTC, date, datetime
from pathlib import Path

from dagster import AssetExecutionContext, AssetKey, AssetSpec, Config, MaterializeResult, MetadataValue, asset, multi_asset
from dagster_duckdb import DuckDBResource
from pydantic import Field

from models.anomalies import load_planned_runs
from pipelines.analysis import anomalies
from pipelines.settings import FinopsSettings
from pipelines.warehouse.table_docs import apply_docs
from pipelines.warehouse.connection import fetch_value

POOL = "duckdb_warehouse"
ANOMALY_OP = "anomalies"
REPORT_OP = "reports__daily"  # op names of keyed assets: the key joined by __
WEBHOOK_OP = "reports__webhook"
DELIVERY_RECEIPT = "webhook_delivered.json"  # beside the report: the day's headline went out


class RunDate(Config):
    as_of: str | None = Field(default=None, description="The run's date (YYYY-MM-DD, UTC); it scores the day `anomaly_lag_days` before. "
                                                        "Default: today (over the demo: the demo's own report date).")

    def day(self, settings: FinopsSettings) -> date:
        return date.fromisoformat(self.as_of) if self.as_of else settings.default_run_date()


def _prepare(conn) -> None:
    from pipelines.warehouse.connection import prepare  # the one place sessions are set up

    prepare(conn)


def reports_dir(settings: FinopsSettings, warehouse: DuckDBResource) -> Path:
    return Path(settings.reports_dir) if settings.reports_dir else Path(warehouse.database).parent / "reports"


@multi_asset(
    specs=[AssetSpec(AssetKey(["findings", "anomaly_scores"]), deps=[AssetKey(["marts", "daily_series"])], group_name="findings",
                     description="findings.anomaly_scores: every series scored on every day of the re-score window"),
           AssetSpec(AssetKey(["findings", "anomalies"]), deps=[AssetKey(["marts", "daily_series"]), AssetKey(["marts", "cost_attribution"])],
                     group_name="findings",
                     description="findings.anomalies: anomaly episodes, kept across runs; restated ones resolved, never deleted")],
    pool=POOL,
    name=ANOMALY_OP,
)
def anomalies_asset(context: AssetExecutionContext, config: RunDate, warehouse: DuckDBResource, settings: FinopsSettings):
    """Re-score the last 30 days of every daily series and merge the anomaly episodes."""
    planned = load_planned_runs(settings.planned_runs_file)
    with warehouse.get_connection() as conn:
        _prepare(conn)
        result = anomalies.detect(conn, config.day(settings), settings.anomaly_rules(), planned, settings.reporting_currency.upper(),
                                  settings.anomaly_lag_days, settings.anomaly_rescore_days)
        apply_docs(conn, "findings.anomaly_scores", "findings.anomalies", "findings.anomaly_runs")
        open_count = fetch_value(conn, "SELECT count(*) FROM findings.anomalies WHERE status = 'open'")
        total = fetch_value(conn, "SELECT count(*) FROM findings.anomalies")
    if result.skipped:
        context.log.warning(result.skipped)
    context.log.info(f"scored {result.window.first_day}..{result.window.scored_day}: {result.flagged} anomalous series-days, "
                     f"{result.suppressed} suppressed by planned runs, {len(result.new)} new anomalies")
    yield MaterializeResult(asset_key=AssetKey(["findings", "anomaly_scores"]), metadata={
        "rows": result.scored_rows, "first_day": str(result.window.first_day), "scored_day": str(result.window.scored_day),
        "skipped": result.skipped or "",
        "flagged": result.flagged, "suppressed_by_planned_runs": result.suppressed})
    yield MaterializeResult(asset_key=AssetKey(["findings", "anomalies"]), metadata={
        "rows": total, "open": open_count, "new": MetadataValue.json(result.new),
        "resolved_by_restatement": MetadataValue.json(result.resolved_by_restatement)})


@asset(key=AssetKey(["reports", "daily"]), group_name="reports", pool=POOL,
       deps=[AssetKey(["findings", "anomalies"]), AssetKey(["findings", "hidden_costs"]), AssetKey(["marts", "spend_by_phase"]),
             AssetKey(["marts", "daily_cost"]), AssetKey(["marts", "tco_scenarios"])],
       description="reports/<date>/report.html, report.md, report.json: anomalies, hidden costs, phases, purchasing")
def daily_report_asset(context: AssetExecutionContext, config: RunDate, warehouse: DuckDBResource,
                       settings: FinopsSettings) -> MaterializeResult:
    from pipelines.report.daily import AnomalyOptions, headline, write_report

    options = AnomalyOptions.from_settings(settings)
    folder = reports_dir(settings, warehouse) / config.day(settings).isoformat()
    with warehouse.get_connection() as conn:
        _prepare(conn)
        # A later run the same day (the sensor's) keeps the morning run's alerts marked new.
        new_ids = sorted(set(_new_anomalies(context)) | set(_alerts_already_reported(folder)))
        folder, data = write_report(conn, config.day(settings), folder.parent, settings.tco_params_file, options, new_ids)
    title, lines = headline(data)
    return MaterializeResult(metadata={
        "folder": str(folder), "html": MetadataValue.path(str(folder / "report.html")), "scored_day": data["scored_day"],
        "anomalies": len(data["anomalies"]), "new_anomalies": sum(1 for a in data["anomalies"] if a["new"]),
        "headline": MetadataValue.md("\n".join(f"- {line}" for line in lines))})


def _new_anomalies(context: AssetExecutionContext) -> list[str]:
    """Anomalies first found by this run's detection step (the alerts), from its materialization."""
    event = context.instance.get_latest_materialization_event(AssetKey(["findings", "anomalies"]))
    if event is None or event.run_id != context.run_id:
        return []
    value = event.asset_materialization.metadata.get("new")
    return list(value.value) if value is not None else []


def _alerts_already_reported(folder: Path) -> list[str]:
    try:
        earlier = json.loads((folder / "report.json").read_text())
    except (OSError, ValueError):
        return []
    return [a["anomaly_id"] for a in earlier.get("anomalies", []) if a.get("new")]


@asset(key=AssetKey(["reports", "webhook"]), deps=[AssetKey(["reports", "daily"])], group_name="reports",
       description="The report's headline posted to a Slack-compatible webhook (when FINOPS_WEBHOOK_URL is set)")
def report_webhook_asset(context: AssetExecutionContext, config: RunDate, warehouse: DuckDBResource,
                         settings: FinopsSettings) -> MaterializeResult:
    """Deliver the day's headline once per day; a failed delivery fails this step only, the
    report files stay. A later run the same day (the landing sensor's, a corrected export) posts
    again only the anomalies it found new that no message of the day named, so none is lost."""
    from pipelines.report.webhook import build_payload, deliver

    if not settings.webhook_url:
        return MaterializeResult(metadata={"delivered": False, "reason": "no webhook_url configured"})
    folder = reports_dir(settings, warehouse) / config.day(settings).isoformat()
    receipt = folder / DELIVERY_RECEIPT
    data = json.loads((folder / "report.json").read_text())
    new = {a["anomaly_id"]: a for a in data["anomalies"] if a.get("new")}
    title, lines = data["headline"]["title"], data["headline"]["lines"]
    if receipt.exists():
        sent = json.loads(receipt.read_text())
        # A receipt from before it listed them: its message named whatever was new then.
        posted = set(sent.get("new_anomalies", new))
        unsent = [a for anomaly_id, a in new.items() if anomaly_id not in posted]
        if not unsent:
            return MaterializeResult(metadata={"delivered": False, "reason": f"already delivered: {receipt.read_text().strip()}"})
        title = f"{title} (update)"
        lines = [f"NEW since the day's first message: {a['summary']}" for a in unsent[:5]]
    else:
        sent, posted = {}, set()
    payload = build_payload(title, lines, str(folder / "report.html"))
    delivery = deliver(settings.webhook_url, payload, timeout_s=settings.webhook_timeout_s, retries=settings.webhook_retries)
    receipt.write_text(json.dumps({"delivered_at": sent.get("delivered_at", datetime.now(UTC).isoformat()),
                                   "status_code": delivery.status_code, "attempts": delivery.attempts,
                                   "new_anomalies": sorted(posted | set(new)),
                                   "deliveries": sent.get("deliveries", 1 if sent else 0) + 1}))
    return MaterializeResult(metadata={"delivered": True, "status_code": delivery.status_code, "attempts": delivery.attempts})


DAILY_ASSETS = [anomalies_asset, daily_report_asset, report_webhook_asset]
