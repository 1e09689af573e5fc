"""The daily report end to end: anomalies found in the bundled scenario, planned runs suppressed,
restated bills resolving their anomaly, the report rendered in a real browser, the webhook, and
the schedule and sensor that start it all."""

import json
import threading
from datetime import date, datetime, timedelta, UTC
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dagster import DagsterInstance

from pipelines.warehouse.connection import connect, fetch_all, fetch_dicts
from tests.conftest import run_pipeline

FOCUS_HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,BillingPeriodStart,"
                "BillingPeriodEnd,ProviderName,BillingAccountId,SubAccountId,ServiceName,ResourceId,SkuId,RegionId\n")


# -- the bundled scenario ---------------------------------------------------------------------

def test_the_injected_spike_is_reported_with_its_explanation(demo_db, demo_run):
    spike = date.fromisoformat(demo_run.truths["spike_day"])
    rows = fetch_dicts(demo_db, """SELECT * FROM findings.anomalies WHERE metric = 'cost' AND service = 'AWS Data Transfer'
                                   ORDER BY first_day""")
    first = rows[0]
    assert (first["first_day"], first["kind"], first["direction"], first["days"]) == (spike, "changed", "up", 1)
    # Five pulls of the 300 GB dataset at 0.09 USD/GB, on a day that usually has none.
    assert (first["actual"], first["expected"], first["change"]) == (Decimal("135.000000"), Decimal("0.000000"), Decimal("135.000000"))
    assert first["driver"] == "usage" and first["status"] == "resolved" and first["resolution"] == "back_to_normal"
    explanation = json.loads(first["explanation"])
    assert explanation["usage_actual"] == 1500.0 and explanation["usage_unit"] == "GB"
    assert explanation["contributors"]["resource"][0]["value"] == "llm-datasets"
    # The egress usage series tells the same story in GB.
    assert fetch_all(demo_db, """SELECT actual FROM findings.anomalies WHERE metric = 'egress_gb' AND first_day = ?""", [spike]) == [
        (Decimal("1500.000000"),)]


def test_idle_cards_are_an_open_anomaly_and_planned_runs_are_suppressed(demo_db):
    idle = fetch_dicts(demo_db, "SELECT * FROM findings.anomalies WHERE metric = 'cost' AND phase = 'idle' AND status = 'open'")
    assert len(idle) == 1 and idle[0]["last_day"] == date(2026, 10, 10) and idle[0]["driver"] == "usage"
    # The pre-training run ending and the fine-tuning campaign starting are in the calendar: their
    # days pass every gate but are not alerted.
    assert fetch_all(demo_db, """SELECT count(*) FROM findings.anomalies WHERE phase IN ('pretraining', 'finetuning')""") == [(0,)]
    suppressed = dict(fetch_all(demo_db, """SELECT suppressed_by, count(*) FROM findings.anomaly_scores
                                            WHERE flagged AND suppressed_by IS NOT NULL GROUP BY ALL"""))
    assert set(suppressed) == {"pretrain-llm-7b", "llm-7b-finetuning-campaign"}
    # Purchases, credits, taxes and adjustments never enter the series.
    assert fetch_all(demo_db, "SELECT count(*) FROM marts.daily_series WHERE cost IS NULL") == [(0,)]


def test_the_demo_reports_purchasing_is_labelled_with_the_years_and_one_off_runs_its_parameters_give(demo_db, tmp_path):
    from pipelines.report.daily import gather, render

    params = tmp_path / "tco.yaml"
    params.write_text("years: 5\nannualize:\n  one_off_runs_per_year: 0\n")
    data = gather(demo_db, date(2026, 10, 12), str(params))
    assert data["tco"]["years"] == 5 and {r["years"] for r in data["tco"]["scenarios"]} == {5}
    page, markdown, _ = render(data)
    assert "<h3>Purchasing strategy (5-year TCO, CNY)</h3>" in page and "### Purchasing strategy (5-year TCO, CNY)" in markdown
    assert "| 5-year TCO (USD) | 5-year TCO (CNY) |" in markdown and "3-year TCO" not in page + markdown
    assert "(GPU-hours held over the card-hours the strategies size for; recurring load a year, one-off runs left out): " in markdown



def test_the_report_says_what_a_users_currency_converted_and_how_commitments_were_paid(demo_db, tmp_path):
    """With `currency: USD` and `years: 5` the report showed the bundled CNY prices converted and a
    3-year commitment's 5-year TCO without a word of either; a currency no rate reaches lost the
    whole report (the purchasing section failed it)."""
    from pipelines.report.daily import gather, render

    params = tmp_path / "tco.yaml"
    params.write_text("currency: USD\nyears: 5\n")
    _, markdown, _ = render(gather(demo_db, date(2026, 10, 12), str(params)))
    markdown = markdown.replace("\\_", "_")  # Markdown's escapes
    # At the rate of the measured period's last day (2026-10-10: the 9th's), as the mart, not the newest.
    assert "converted from CNY into USD at 0.149429272456 (2026-10-09)" in markdown and "models.A100-80GB.rent.monthly_per_card" in markdown
    assert "commit 3y (A100-80GB): paid for whole terms: 1 × 3 years + 2 year(s) of 1-year commitments." in markdown
    params.write_text("currency: TWD\n")
    _, markdown, _ = render(gather(demo_db, date(2026, 10, 12), str(params)))
    assert "### Purchasing strategy\n" in markdown and "currency TWD: the bundled amounts are in CNY and no CNY→TWD rate is known" in markdown
    assert "### Spend by phase" in markdown  # the rest of the report is there

def test_the_demo_report_has_its_anomalies_sections_and_charts(demo_run):
    folder = demo_run.out / "reports" / "2026-10-12"
    page = (folder / "report.html").read_text()
    for title in ("What changed", "Expected vs actual", "Planned runs (spend expected, not alerted)",
                  "Leaks to act on (USD)", "Detail", "Spend by phase, Oct 1–10", "Cost on 2026-10-10", "Daily cost by phase (USD)",
                  "Purchasing strategy (3-year TCO, CNY)"):
        assert title in page, title
    # The order a reader needs: KPIs, what changed, the leaks, then the detail.
    assert page.index("class='kpis'") < page.index("What changed") < page.index("Leaks to act on") < page.index("<h2>Detail")
    # Daily cost, expected vs actual, leaks, utilization by phase (each drawn wide, and narrow for phones); purchasing.
    assert page.count("<svg") == 9
    # Self-contained: nothing for a browser to fetch (namespace URIs in SVG are names, not fetches).
    assert not any(marker in page for marker in ('src="http', "src='http", 'href="http', "url(http", "<link", "<script", "<img"))
    machine = json.loads((folder / "report.json").read_text())
    assert machine["scored_day"] == "2026-10-10"
    assert any(a["service"] == "AWS Data Transfer" and a["first_day"] == "2026-09-26" for a in machine["anomalies"])
    assert machine["headline"]["lines"][0] == "Cost on 2026-10-10: 68.71 USD"
    markdown = (folder / "report.md").read_text()
    assert "AWS Data Transfer (AWS 210987654321, unattributed): cost 135.00 USD on 2026-09-26" in markdown


def test_the_report_renders_its_charts_in_a_browser(demo_run, tmp_path):
    from tests.browser import color_pixel_share, find_or_install_chromium, screenshot

    browser, reason = find_or_install_chromium()
    if browser is None:
        pytest.skip(f"no headless browser to render the report: {reason}")
    png = screenshot(demo_run.out / "reports" / "2026-10-12" / "report.html", tmp_path / "report.png", 1280, 5200)
    shares = {name: color_pixel_share(png, rgb) for name, rgb in {
        "actual lines and fine-tuning bars (blue)": (0x1f, 0x77, 0xb4),
        "hidden-cost bars (orange)": (0xff, 0x7f, 0x0e),
        "utilization bars (green)": (0x2c, 0xa0, 0x2c),
        "anomalous days (red)": (0xd6, 0x27, 0x28),
    }.items()}
    assert all(share > 0.0005 for share in shares.values()), shares


def test_rebuilding_a_past_days_report_from_the_cli(demo_run, tmp_path):
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    result = CliRunner().invoke(app, ["report", "--date", "2026-09-28", "--warehouse", str(demo_run.out / "warehouse.duckdb"),
                                      "--out", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    machine = json.loads((tmp_path / "2026-09-28" / "report.json").read_text())
    assert machine["scored_day"] == "2026-09-26"
    spike = [a for a in machine["anomalies"] if a["service"] == "AWS Data Transfer" and a["metric"] == "cost"]
    assert spike and spike[0]["new"]  # on its own day's report the spike is the alert
    assert "NEW: AWS Data Transfer" in "\n".join(machine["headline"]["lines"])
    # As of its scored day: the spike had not ended (it resolved the day after), and no leak of
    # October, which had not begun, is named (the October idle cards lead today's report).
    assert spike[0]["status"] == "open" and spike[0]["resolution"] is None and "back to normal" not in spike[0]["state"]
    assert machine["findings"] and {f["period"] for f in machine["findings"]} <= {"2026-09"}
    assert "in 2026-10" not in "\n".join(machine["headline"]["lines"])
    # The month's figures are September 1-26's, as its spend to date: not the 27th-30th, billed since.
    phases = machine["spend_by_phase"]
    assert sum(Decimal(p["cost_reporting"]) for p in phases).quantize(Decimal("0.01")) == Decimal(machine["kpis"]["mtd"]).quantize(Decimal("0.01"))
    conn = connect(demo_run.out / "warehouse.duckdb", read_only=True)
    whole_month = conn.execute("SELECT sum(cost_reporting) FROM marts.spend_by_phase WHERE period = '2026-09'").fetchall()[0][0]
    conn.close()
    assert sum(Decimal(p["cost_reporting"]) for p in phases) < whole_month
    assert "Spend by phase, Sep 1–26" in (tmp_path / "2026-09-28" / "report.html").read_text()
    result = CliRunner().invoke(app, ["report", "--date", "2026-10-12", "--warehouse", str(demo_run.out / "warehouse.duckdb"),
                                      "--out", str(tmp_path)], terminal_width=200)
    today = json.loads((tmp_path / "2026-10-12" / "report.json").read_text())
    assert [a["state"] for a in today["anomalies"] if a["service"] == "AWS Data Transfer" and a["metric"] == "cost"
            and a["first_day"] == "2026-09-26"] in ([], ["resolved (back to normal)"])
    assert "Largest leak: 8 idle GPUs on gpu-a100-01 in 2026-10" in "\n".join(today["headline"]["lines"])
    assert "newest charges" not in "\n".join(today["headline"]["lines"])
    # A report of a day past the bills (an old export run today) says where they end and how to see it.
    result = CliRunner().invoke(app, ["report", "--date", "2026-12-05", "--warehouse", str(demo_run.out / "warehouse.duckdb"),
                                      "--out", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    late = json.loads((tmp_path / "2026-12-05" / "report.json").read_text())
    assert late["last_billed_day"] == "2026-10-10"
    assert late["headline"]["lines"][0] == (
        "Cost on 2026-12-03: no charges billed for it (yet); the newest charges are for 2026-10-10 "
        "(that day's report: finops report --date 2026-10-12, or finops run --as-of 2026-10-12)")


# -- restatement --------------------------------------------------------------------------------

def focus_rows(first: date, amounts: list[str], period: str) -> str:
    start, end = f"{period}-01T00:00:00Z", (date.fromisoformat(f"{period}-01") + timedelta(days=32)).replace(day=1).isoformat() + "T00:00:00Z"
    lines = []
    for i, amount in enumerate(amounts):
        d = first + timedelta(days=i)
        lines.append(f"{amount},{amount},USD,Usage,{d}T00:00:00Z,{d + timedelta(days=1)}T00:00:00Z,{start},{end},AWS,acct-1,"
                     f"team-a,Amazon EC2,i-0abc,BoxUsage:p4d.24xlarge,us-east-1\n")
    return FOCUS_HEADER + "".join(lines)


def test_restating_a_day_resolves_its_anomaly_and_keeps_it(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse = tmp_path / "wh.duckdb"
    august = [f"{100 + (i % 7):.2f}" for i in range(31)]
    september = [f"{100 + ((i + 31) % 7):.2f}" for i in range(30)]
    spiky = list(september)
    spiky[20] = "900.00"  # 2026-09-21: a p4d left running over a weekend, or a billing error
    (landing / "focus-2026-08.csv").write_text(focus_rows(date(2026, 8, 1), august, "2026-08"))
    (landing / "focus-2026-09.csv").write_text(focus_rows(date(2026, 9, 1), spiky, "2026-09"))
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 2)).success
    conn = connect(warehouse, read_only=True)
    first = fetch_dicts(conn, "SELECT anomaly_id, status, resolution, first_day, actual FROM findings.anomalies WHERE metric = 'cost'")
    conn.close()
    assert [(a["first_day"], a["status"], a["resolution"], a["actual"]) for a in first] == [
        (date(2026, 9, 21), "resolved", "back_to_normal", Decimal("900.000000"))]

    # The provider restates September: the spike was a billing error.
    (landing / "focus-2026-09-restated.csv").write_text(focus_rows(date(2026, 9, 1), september, "2026-09"))
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 3)).success
    conn = connect(warehouse, read_only=True)
    after = fetch_dicts(conn, "SELECT anomaly_id, status, resolution, resolved_at FROM findings.anomalies WHERE metric = 'cost'")
    assert fetch_all(conn, "SELECT count(*) FROM findings.anomaly_scores WHERE flagged") == [(0,)]
    conn.close()
    assert [(a["anomaly_id"], a["status"], a["resolution"]) for a in after] == [(first[0]["anomaly_id"], "resolved", "restated")]
    assert after[0]["resolved_at"] is not None


def test_a_clean_bill_yields_no_anomaly_and_an_empty_section(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "focus-2026-08.csv").write_text(focus_rows(date(2026, 8, 1), [f"{100 + (i % 7):.2f}" for i in range(31)], "2026-08"))
    (landing / "focus-2026-09.csv").write_text(focus_rows(date(2026, 9, 1), [f"{100 + ((i + 31) % 7):.2f}" for i in range(30)], "2026-09"))
    warehouse = tmp_path / "wh.duckdb"
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 2)).success
    conn = connect(warehouse, read_only=True)
    assert fetch_all(conn, "SELECT count(*) FROM findings.anomalies") == [(0,)]
    assert fetch_all(conn, "SELECT count(*), count(DISTINCT day) FROM findings.anomaly_scores WHERE metric = 'cost'") == [(30, 30)]
    conn.close()
    machine = json.loads((tmp_path / "reports" / "2026-10-02" / "report.json").read_text())
    assert machine["anomalies"] == [] and machine["headline"]["lines"][1].startswith("0 new anomalies")


# -- the webhook, end to end -----------------------------------------------------------------------

class Recorder(BaseHTTPRequestHandler):
    status = 200
    received: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_server():
    handler = type("Handler", (Recorder,), {"received": [], "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/services/T0/B0/SECRET", handler
    server.shutdown()
    server.server_close()


def test_the_run_posts_the_headline_and_a_failing_endpoint_fails_only_delivery(tmp_path, chat_server):
    url, handler = chat_server
    landing = tmp_path / "landing"
    landing.mkdir()
    spiky = [f"{100 + ((i + 31) % 7):.2f}" for i in range(30)]
    spiky[29] = "<script>alert(1)</script>"  # a malformed amount: quarantined, never rendered raw
    (landing / "focus-2026-08.csv").write_text(focus_rows(date(2026, 8, 1), [f"{100 + (i % 7):.2f}" for i in range(31)], "2026-08"))
    (landing / "focus-2026-09.csv").write_text(focus_rows(date(2026, 9, 1), spiky, "2026-09"))
    warehouse = tmp_path / "wh.duckdb"
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 2), webhook_url=url, webhook_retries=0).success
    assert len(handler.received) == 1
    payload = handler.received[0]
    assert payload["text"].startswith("gpu-finops daily report — 2026-10-02")
    assert "<script>" not in json.dumps(payload)
    # A later run the same day (new files landed) rewrites the report but does not post again.
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 2), webhook_url=url).success
    assert len(handler.received) == 1
    assert json.loads((tmp_path / "reports" / "2026-10-02" / "webhook_delivered.json").read_text())["status_code"] == 200
    # A corrected September lands in the afternoon and reveals a spike on the scored day: a later run
    # posts that alert alone (it was lost before: the day's message had gone), and only once.
    corrected = [f"{100 + ((i + 31) % 7):.2f}" for i in range(30)]
    corrected[29] = "900.00"
    (landing / "focus-2026-09-corrected.csv").write_text(focus_rows(date(2026, 9, 1), corrected, "2026-09"))
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 2), webhook_url=url).success
    assert len(handler.received) == 2
    update = handler.received[1]["text"]
    assert update.startswith("gpu-finops daily report — 2026-10-02 (update)\nNEW since the day's first message: "), update
    assert "900.00" in update
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 2), webhook_url=url).success
    assert len(handler.received) == 2
    # The endpoint breaks: the report is still written; the delivery step alone fails.
    handler.status = 500
    outcome = run_pipeline(landing, warehouse, as_of=date(2026, 10, 3), webhook_url=url, webhook_retries=1,
                           webhook_timeout_s=2.0)
    assert not outcome.success
    assert (tmp_path / "reports" / "2026-10-03" / "report.html").exists()
    assert len(handler.received) == 4  # two delivered, then two attempts (one retry) refused


# -- the schedule and the sensor ----------------------------------------------------------------------

def test_the_schedule_runs_the_whole_graph_at_six_utc_for_its_day():
    from dagster import build_schedule_context

    from pipelines.orchestration.automation import daily_report_schedule

    assert daily_report_schedule.cron_schedule == "0 6 * * *" and daily_report_schedule.execution_timezone == "UTC"
    context = build_schedule_context(scheduled_execution_time=datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
    request = daily_report_schedule.evaluate_tick(context).run_requests[0]
    assert request.run_key == "daily-2026-11-30" and request.tags["finops/as_of"] == "2026-11-30"
    assert daily_report_schedule.job_name == "finops_ingest"


def run_ingest_only(landing, warehouse, instance) -> None:
    """The ingest job's assets, as the schedule runs them (the warehouse resource publishing its own copy)."""
    from dagster import materialize

    from pipelines.engines.resource import SqlEngineResource
    from pipelines.orchestration.assets import ALL_ASSETS
    from pipelines.orchestration.automation import INGEST
    from pipelines.orchestration.definitions import warehouse_resource
    from pipelines.settings import FinopsSettings

    result = materialize(ALL_ASSETS, selection=INGEST, instance=instance,
                         resources={"warehouse": warehouse_resource(str(warehouse)), "settings": FinopsSettings(landing_dir=str(landing)),
                                    "sql_engine": SqlEngineResource()})
    assert result.success


def test_after_an_ingest_the_models_run_over_the_days_it_changed(tmp_path):
    """The 06:00 ingest's success starts the models' run for its day, over the changed days only."""
    from dagster import DagsterEventType, build_run_status_sensor_context
    from dagster_duckdb import DuckDBResource

    from pipelines.orchestration.automation import build_models_sensor, ingest_job
    from pipelines.orchestration.definitions import defs
    from pipelines.settings import FinopsSettings

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "focus-2026-08.csv").write_text(focus_rows(date(2026, 8, 1), [f"{100 + (i % 7):.2f}" for i in range(31)], "2026-08"))
    warehouse = tmp_path / "wh.duckdb"
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 2)).success
    (landing / "focus-2026-09.csv").write_text(focus_rows(date(2026, 9, 1), [f"{100 + (i % 7):.2f}" for i in range(30)], "2026-09"))
    settings = FinopsSettings(landing_dir=str(landing))
    with DagsterInstance.ephemeral() as instance:
        # The ingest alone, as the schedule's job runs it, then the sensor's request for the models.
        run_ingest_only(landing, warehouse, instance)
        ingest_run = instance.get_runs(limit=1)[0]
        ingest_run = ingest_run.with_tags({**ingest_run.tags, "finops/as_of": "2026-10-02"})
        sensor = build_models_sensor()
        success = instance.all_logs(ingest_run.run_id, of_type=DagsterEventType.RUN_SUCCESS)[0].dagster_event
        context = build_run_status_sensor_context(sensor_name=sensor.name, dagster_instance=instance, dagster_run=ingest_run,
                                                  dagster_event=success, resources={"settings": settings,
                                                                                 "warehouse": DuckDBResource(database=str(warehouse))},
                                                  repository_def=defs.get_repository_def())
        request = sensor(context)
    assert ingest_job.name == "finops_ingest"
    assert request.tags["dagster/asset_partition_range_start"] == "2026-09-01"
    assert request.tags["dagster/asset_partition_range_end"] == "2026-09-01"
    assert request.run_config["ops"]["reports__daily"]["config"]["as_of"] == "2026-10-02"
    assert request.asset_selection is None  # the whole models job over those days


def test_the_sensor_starts_a_run_when_files_land_and_not_otherwise(tmp_path):
    from dagster import build_sensor_context

    from pipelines.orchestration.automation import landing_sensor
    from pipelines.settings import FinopsSettings

    landing = tmp_path / "landing"
    landing.mkdir()
    settings = FinopsSettings(landing_dir=str(landing))

    def tick(cursor):
        context = build_sensor_context(cursor=cursor, resources={"settings": settings})
        result = landing_sensor.evaluate_tick(context)
        return result, context.cursor

    (landing / "focus.csv").write_text(FOCUS_HEADER)
    result, cursor = tick(None)
    assert len(result.run_requests) == 1 and result.run_requests[0].tags["finops/landing_files"] == "1"
    result, same = tick(cursor)
    assert result.run_requests == [] and "no new or changed files" in result.skip_message and same == cursor
    (landing / "later.csv").write_text(FOCUS_HEADER)
    result, _ = tick(cursor)
    assert len(result.run_requests) == 1 and result.run_requests[0].run_key != f"landing-{cursor}"
    missing = FinopsSettings(landing_dir=str(tmp_path / "nowhere"))
    result = landing_sensor.evaluate_tick(build_sensor_context(resources={"settings": missing}))
    assert "does not exist" in result.skip_message


def test_an_earlier_run_date_leaves_the_anomalies_as_they_are(tmp_path):
    """Anomalies only move forward: a backfill of an older date must not rewrite their history."""
    landing = tmp_path / "landing"
    landing.mkdir()
    spiky = [f"{100 + ((i + 31) % 7):.2f}" for i in range(30)]
    spiky[20] = "900.00"
    (landing / "focus-2026-08.csv").write_text(focus_rows(date(2026, 8, 1), [f"{100 + (i % 7):.2f}" for i in range(31)], "2026-08"))
    (landing / "focus-2026-09.csv").write_text(focus_rows(date(2026, 9, 1), spiky, "2026-09"))
    warehouse = tmp_path / "wh.duckdb"
    assert run_pipeline(landing, warehouse, as_of=date(2026, 10, 2)).success
    read = "SELECT anomaly_id, status, first_day, last_day, days, impact FROM findings.anomalies ORDER BY ALL"
    conn = connect(warehouse, read_only=True)
    before = fetch_all(conn, read)
    conn.close()
    assert run_pipeline(landing, warehouse, as_of=date(2026, 9, 22)).success  # the spike day's own date: open then
    conn = connect(warehouse, read_only=True)
    assert fetch_all(conn, read) == before
    assert fetch_all(conn, "SELECT as_of FROM findings.anomaly_runs") == [(date(2026, 10, 2),)]
    conn.close()


def test_text_from_data_stays_text_in_markdown_and_charts():
    from pipelines.report.charts import anomaly_charts, hidden_costs_chart
    from pipelines.report.daily import _md_escape

    assert _md_escape("[click](http://x) *bold* `code` a|b") == "\\[click\\](http://x) \\*bold\\* \\`code\\` a\\|b"
    # A `$` in a resource name is text, not mathtext (which would fail to parse and stop the report).
    svg = hidden_costs_chart([{"kind": "egress", "subkind": "x", "resource": "s3://b/$x^{$", "avoidable_cost_reporting": Decimal("5"),
                               "reporting_currency": "USD"}])
    assert svg.lstrip().startswith("<?xml")
    assert anomaly_charts([{"title": "svc $a_{$ · idle", "days": [date(2026, 9, 1)], "actual": [1.0], "expected": [1.0],
                            "flagged": [False]}]).lstrip().startswith("<?xml")


def test_an_anomaly_is_new_in_the_run_that_found_it_not_again_when_its_first_days_are_restated():
    """Its first day restated away, an episode the morning run announced starts on the next scored
    day: the next run's report must not call it new again (the webhook posted it twice). A report
    rebuilt on its own (no detection handed over) marks what starts on its day."""
    import duckdb

    from pipelines.analysis.anomalies import window_for
    from pipelines.report.daily import anomalies_in_window
    from pipelines.warehouse.connection import sql_text

    conn = duckdb.connect()
    conn.execute("CREATE SCHEMA findings")
    conn.execute(sql_text("findings.anomalies").split("-- merge")[0])
    window = window_for(date(2026, 8, 14))
    conn.execute("""INSERT INTO findings.anomalies (anomaly_id, status, metric, provider, sub_account, service, phase, kind,
                        direction, first_day, last_day, days, impact) VALUES
                    ('a1', 'open', 'cost', 'AWS', 'acct-1', 'Batch', 'unattributed', 'changed', 'up', ?, ?, 1, 80)""",
                 [window.scored_day, window.scored_day])
    assert [a["new"] for a in anomalies_in_window(conn, window, [])] == [False]
    assert [a["new"] for a in anomalies_in_window(conn, window, ["a1"])] == [True]
    assert [a["new"] for a in anomalies_in_window(conn, window, None)] == [True]


# The daily report names the files its figures do not fully stand on.

def test_the_report_names_the_files_to_look_at_and_the_money_set_aside(tmp_path):
    from tests.test_invoice_layouts import HEADER, LINES, TITLE, total

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "账单.csv").write_text("\n".join([*TITLE, HEADER, *LINES, total("合计", "400.00")]) + "\n", encoding="utf-8")
    (landing / "notes.txt").write_text("who to ask about the invoices\n", encoding="utf-8")
    assert run_pipeline(landing, tmp_path / "wh.duckdb", as_of=date(2026, 9, 4)).success
    folder = tmp_path / "reports" / "2026-09-04"
    machine = json.loads((folder / "report.json").read_text())
    assert [(f["path"], f["concern"], f["rows_loaded"], f["rows_quarantined"], f["set_aside"])
            for f in machine["files_to_look_at"]] == [
        ("账单.csv", "partly quarantined", 2, 1, [{"currency": "CNY", "amount": "1.8500000000"}]),
        ("notes.txt", "unrecognized", 0, 0, None)]
    assert machine["files_to_look_at"][0]["what"].startswith("the total row (row 4 under the header) states 400.00")
    summary = ("1 file counts (1 billing); 2 files to look at (1 partly quarantined, 1 unrecognized); 1.85 CNY in "
               "quarantined rows is in no figure.")
    assert machine["headline"]["lines"][-1] == "Files: " + summary.split("; ", 1)[1].removesuffix(".") + " (see Files behind these figures)"
    page = (folder / "report.html").read_text()
    assert "<h3>Files behind these figures</h3>" in page and summary in page
    assert "the total row (row 4 under the header) states 400.00" in (folder / "report.md").read_text()


def test_a_report_on_files_that_all_count_says_so(demo_run):
    page = (demo_run.out / "reports" / "2026-10-12" / "report.html").read_text()
    assert "<h3>Files behind these figures</h3><p>13 files count (4 billing, 4 telemetry, 3 workload, 2 storage); every file read counts whole.</p>" in page


def test_money_set_aside_is_totalled_by_currency_over_every_file_and_never_across_currencies():
    """The totals come from every file to look at (not only the 20 listed); amounts whose
    currency is not known (no loaded line says it) are added to nothing, and a reason's carriage
    return cannot break the Markdown table."""
    from pipelines.report.daily import FILE_COLUMNS, _md_table, files_summary

    totals = [{"currency": "CNY", "amount": Decimal("250"), "files": 25}, {"currency": None, "amount": Decimal("800"), "files": 2}]
    row = {"path": "a.csv", "concern": "warning", "rows_loaded": 1, "rows_quarantined": 0,
           "set_aside": [{"currency": None, "amount": Decimal("700")}], "what": "currency 'X\r# PWNED' is not an ISO 4217 code", "earlier_version_counts": True,
           "files_to_look_at": 27, "set_aside_totals": totals}
    data = {"files_counting": [{"kind": "billing", "files": 25}], "files_to_look_at": [row, {**row, "path": "b.csv"}]}
    assert files_summary(data) == ("25 files count (25 billing); 27 files to look at (2 with a warning among the first 2); "
                                   "250.00 CNY in quarantined rows is in no figure; nor are the quarantined rows of 2 files "
                                   "whose currency is not known.")
    table = _md_table(data["files_to_look_at"], FILE_COLUMNS)
    assert "| a.csv | warning; an earlier version counts | 1 | 0 | 700.00 (currency not known) | currency 'X\\\\r\\# PWNED' is not" in table
    assert "\r" not in table


def test_money_set_aside_is_in_the_currency_each_quarantined_row_states(tmp_path):
    """A file billing in USD and CNY whose quarantined rows are a USD, a CNY and one in no ISO
    currency: before, the report added them into one amount, labelled with no currency or, when the
    loaded lines were all USD, as USD (805 USD). Now each is in its own currency, the unknown one in none."""
    from pipelines.ingest.landing import ingest_landing
    from pipelines.report.daily import FILE_COLUMNS, _md_table, files_behind, files_summary
    from pipelines.warehouse.connection import connect

    header = ("BilledCost,BillingAccountId,BillingCurrency,BillingPeriodStart,BillingPeriodEnd,ChargePeriodStart,"
              "ChargePeriodEnd,EffectiveCost,ListCost,ContractedCost,ChargeCategory,ServiceName\n")

    def line(cost, currency, start="2026-09-01T00:00:00Z"):
        return (f"{cost},A,{currency},2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,{start},2026-09-02T00:00:00Z,"
                f"{cost},{cost},{cost},Usage,Compute\n")

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "focus.csv").write_text(header + line("10.00", "USD") + line("100.00", "USD", "yesterday")
                                       + line("700.00", "CNY", "yesterday") + line("5.00", "XXQ") + line("0.25", "USD", "soon"))
    conn = connect(tmp_path / "wh.duckdb")
    ingest_landing(conn, landing)
    data = files_behind(conn)
    [row] = data["files_to_look_at"]
    assert (row["rows_loaded"], row["rows_quarantined"]) == (1, 4)
    assert [(e["currency"], e["amount"]) for e in row["set_aside"]] == [
        ("CNY", Decimal("700")), ("USD", Decimal("100.25")), (None, Decimal("5"))]
    assert files_summary(data) == ("1 file counts (1 billing); 1 file to look at (1 partly quarantined); 700.00 CNY and "
                                   "100.25 USD in quarantined rows are in no figure; nor are the quarantined rows of 1 file "
                                   "whose currency is not known.")
    assert "| 700.00 CNY; 100.25 USD; 5.00 (currency not known) |" in _md_table(data["files_to_look_at"], FILE_COLUMNS)
    # Money in two currencies that nets to nothing is still set aside, in each.
    netting_lines = line("1.00", "USD") + line("100.00", "USD", "soon") + line("-100.00", "EUR", "soon")
    (landing / "netting.csv").write_text(header + netting_lines.replace(",A,", ",B,"))  # another account: no restatement
    ingest_landing(conn, landing)
    netting = next(r for r in files_behind(conn)["files_to_look_at"] if r["path"] == "netting.csv")
    assert [(e["currency"], e["amount"]) for e in netting["set_aside"]] == [("EUR", Decimal("-100")), ("USD", Decimal("100"))]
    (landing / "netting.csv").unlink()
    conn.execute("DELETE FROM raw.files WHERE path = 'netting.csv'")
    # A file read before the currencies were recorded: its money in its loaded lines' one currency.
    conn.execute("UPDATE raw.files SET quarantined_by_currency = NULL")
    [old] = files_behind(conn)["files_to_look_at"]
    assert [(e["currency"], e["amount"]) for e in old["set_aside"]] == [("USD", Decimal("805.25"))]
    conn.close()


def test_the_report_and_the_runs_notices_read_a_warehouse_an_older_version_published(tmp_path):
    """A report on, or a failed run's closing lines over, a warehouse published before
    raw.files.quarantined_by_currency existed (opened read-only: nothing adds the column) raised a
    BinderException; the money set aside is then in the currency of the file's loaded lines."""
    from datetime import UTC, datetime

    from pipelines.cli.summary import files_read_since, run_notices
    from pipelines.ingest.landing import ingest_landing
    from pipelines.report.daily import files_behind
    from pipelines.warehouse.connection import connect
    from tests.test_ragged_csv import HEADER, line

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "cur.csv").write_text(HEADER + line(1) + line(2, cost="x") + line(3, cost="2.50").replace("2026-09-", "when-"))
    warehouse = tmp_path / "wh.duckdb"
    conn = connect(warehouse)
    ingest_landing(conn, landing)
    conn.execute("ALTER TABLE raw.files DROP COLUMN quarantined_by_currency")
    conn.close()
    conn = connect(warehouse, read_only=True)
    [row] = files_behind(conn)["files_to_look_at"]
    conn.close()
    assert [(e["currency"], e["amount"]) for e in row["set_aside"]] == [("USD", Decimal("2.5"))]
    [read] = files_read_since(warehouse, datetime(2000, 1, 1, tzinfo=UTC))
    assert read["quarantined_by_currency"] is None
    assert [n["reason"] for n in run_notices([read])][0].startswith("2 rows quarantined (their cost in the file: 2.5), e.g.")


def test_an_egress_anomaly_beside_a_gpu_cost_anomaly_of_its_series_is_listed():
    """A series' cost anomaly explained by its GPU-hours hid a 2,000 GB egress spike of the same series
    and days from every report: only the usage the cost's explanation weighs is its driver."""
    import duckdb

    from pipelines.analysis.anomalies import window_for
    from pipelines.report.daily import anomalies_in_window
    from pipelines.warehouse.connection import sql_text

    conn = duckdb.connect()
    conn.execute("CREATE SCHEMA findings")
    conn.execute(sql_text("findings.anomalies").split("-- merge")[0])
    window = window_for(date(2026, 10, 17))
    day = window.scored_day
    conn.execute("""INSERT INTO findings.anomalies (anomaly_id, status, metric, provider, sub_account, service, phase, kind,
                        direction, first_day, last_day, days, impact, explanation) VALUES
                    ('cost', 'open', 'cost', 'AWS', 'a', 'EC2', 'unattributed', 'changed', 'up', ?, ?, 1, 500, ?),
                    ('gpu', 'open', 'gpu_hours', 'AWS', 'a', 'EC2', 'unattributed', 'changed', 'up', ?, ?, 1, 60, NULL),
                    ('egress', 'open', 'egress_gb', 'AWS', 'a', 'EC2', 'unattributed', 'changed', 'up', ?, ?, 1, 1900, NULL)""",
                 [day, day, '{"usage_metric": "gpu_hours"}', day, day, day, day])
    assert sorted(a["anomaly_id"] for a in anomalies_in_window(conn, window, [])) == ["cost", "egress"]
