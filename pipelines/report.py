"""A day's report: spend by phase, the day's cost, the ranked hidden costs and the purchasing
comparison, as one self-contained HTML file (inline SVG charts), Markdown and JSON.

Every value from data is escaped before it reaches HTML or Markdown.
"""

import html
import json
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

import polars as pl

from models.anomalies import KEY, MICROS, AnomalyRules, load_planned_runs, score
from pipelines import tco
from pipelines.anomalies import Window, load_series, window_for
from pipelines.warehouse import fetch_dicts, table_exists

TOP_FINDINGS = 10
MAX_ANOMALY_CHARTS = 6


@dataclass(frozen=True)
class AnomalyOptions:
    """How the report re-draws each anomaly's expected-vs-actual chart (the run's own settings)."""

    rules: AnomalyRules = AnomalyRules()
    planned: tuple = ()
    lag_days: int = 2
    rescore_days: int = 30

    @classmethod
    def from_settings(cls, settings, planned_runs_file: str | None = None) -> "AnomalyOptions":
        calendar = planned_runs_file or settings.planned_runs_file
        return cls(settings.anomaly_rules(), tuple(load_planned_runs(calendar)), settings.anomaly_lag_days,
                   settings.anomaly_rescore_days)


def gather(conn, report_date: date, params_file: str | None = None, options: AnomalyOptions = AnomalyOptions(),
           new_ids: list[str] | None = None) -> dict:
    """Everything the report of `report_date` shows. Bills arrive late, so its day-level sections
    are about the scored day, `lag_days` earlier; anomalies cover the re-score window up to it."""
    window = window_for(report_date, options.lag_days, options.rescore_days)
    day = window.scored_day
    month = day.strftime("%Y-%m")
    data = {
        "date": report_date.isoformat(),
        "scored_day": day.isoformat(),
        "spend_by_phase": fetch_dicts(conn, """
            SELECT phase, reporting_currency, cost_reporting, share_pct, gpu_hours_paid, gpu_hours_busy, utilization_pct,
                   typical_util_pct_low, typical_util_pct_high, typical_share_pct_low, typical_share_pct_high
            FROM marts.spend_by_phase WHERE period = ?""", [month]),
        "day_cost": fetch_dicts(conn, """
            SELECT provider, service_name, phase, billing_currency, sum(cost_billing) AS cost_billing,
                   reporting_currency, sum(cost_reporting) AS cost_reporting
            FROM marts.daily_cost WHERE day = ? GROUP BY ALL ORDER BY cost_reporting DESC NULLS LAST""", [day]),
        "daily_by_phase": fetch_dicts(conn, """
            SELECT day, phase, sum(cost_reporting) AS cost FROM marts.daily_cost
            WHERE day BETWEEN ? AND ? GROUP BY ALL ORDER BY day, phase""", [window.first_day, day]),
        "findings": fetch_dicts(conn, """
            SELECT finding_id, kind, subkind, resource, period_start, wasted_cost, avoidable_cost, currency,
                   avoidable_cost_reporting, reporting_currency, severity, recommendation
            FROM findings.hidden_costs ORDER BY avoidable_cost_reporting DESC NULLS LAST, finding_id LIMIT ?""", [TOP_FINDINGS]),
        "anomalies": anomalies_in_window(conn, window, new_ids),
        "suppressed": fetch_dicts(conn, """
            SELECT suppressed_by AS planned_run, count(*) AS days_suppressed, min(day) AS first_day, max(day) AS last_day
            FROM findings.anomaly_scores WHERE flagged AND suppressed_by IS NOT NULL AND day BETWEEN ? AND ?
            GROUP BY ALL ORDER BY 1""", [window.first_day, day]) if table_exists(conn, "findings.anomaly_scores") else [],
    }
    data["anomaly_series"] = anomaly_series(conn, data["anomalies"], window, options)[:MAX_ANOMALY_CHARTS]
    try:
        result = tco.compute(conn, params_file)
        data["tco"] = {"scenarios": result.scenarios, "break_even": result.break_even,
                       "utilization": result.utilization, "main_model": result.main_model, "currency": result.params["currency"]}
        data["tco_chart_svg"] = result.chart_svg()
    except tco.NoUsageMeasured as exc:
        data["tco"] = {"note": str(exc)}
        data["tco_chart_svg"] = None
    return data


def anomalies_in_window(conn, window: Window, new_ids: list[str] | None) -> list[dict]:
    """Anomaly episodes touching the window: open ones first, then by size of impact. `new` marks
    the alerts: episodes starting on the scored day or first found by this run (late bills)."""
    if not table_exists(conn, "findings.anomalies"):
        return []
    rows = fetch_dicts(conn, """
        SELECT anomaly_id, status, resolution, metric, unit, provider, sub_account, service, phase, kind, direction,
               first_day, last_day, days, peak_day, resolved_on, actual, expected, change, impact, z, driver, summary,
               explanation, first_detected_at, resolved_at
        FROM findings.anomalies
        WHERE first_day <= ? AND last_day >= ?
        ORDER BY status = 'open' DESC, resolution = 'restated', abs(impact) DESC, anomaly_id""",
        [window.scored_day, window.first_day])
    cost_spans = [(r["provider"], r["sub_account"], r["service"], r["phase"], r["first_day"], r["last_day"])
                  for r in rows if r["metric"] == "cost"]
    # A usage anomaly during a cost anomaly of the same series is its driver, already in its explanation.
    rows = [r for r in rows if r["metric"] == "cost" or not any(
        (p, a, s, ph) == (r["provider"], r["sub_account"], r["service"], r["phase"]) and first <= r["last_day"] and r["first_day"] <= last
        for p, a, s, ph, first, last in cost_spans)]
    for r in rows:
        found_now = r["first_day"] == window.scored_day or r["anomaly_id"] in (new_ids or [])
        r["new"] = found_now and r["resolution"] != "restated"  # a restated anomaly no longer exists: no alert
        r["explanation"] = json.loads(r["explanation"]) if isinstance(r["explanation"], str) else r["explanation"]
        r["series"] = f"{r['provider']} / {r['sub_account']} / {r['service']} / {r['phase']}"
        r["state"] = ("new" if r["new"] else r["status"]) + (f" ({r['resolution'].replace('_', ' ')})" if r["resolution"] else "")
    return rows


def anomaly_series(conn, anomalies: list[dict], window: Window, options: AnomalyOptions) -> list[dict]:
    """Actual and expected per day over the window for each charted anomaly (scored again, read-only)."""
    if not anomalies:
        return []
    out, charted = [], set()
    for a in anomalies:
        panel_key = (a["metric"], *(a[k] for k in KEY))
        if panel_key in charted:  # one panel per series shows all its episodes in the window
            continue
        charted.add(panel_key)
        one = load_series(conn, {k: a[k] for k in KEY}).filter(pl.col("metric") == a["metric"])
        scored = score(one, window.days, options.rules, list(options.planned)).sort("day")
        out.append({"anomaly_id": a["anomaly_id"], "title": f"{a['service']} · {a['phase']} · {a['metric']} ({a['unit']})",
                    "days": scored["day"].to_list(),
                    "actual": [None if v is None else v / MICROS for v in scored["actual"].to_list()],
                    "expected": [None if v is None else v / MICROS for v in scored["expected"].to_list()],
                    "flagged": (scored["flagged"] & scored["suppressed_by"].is_null()).to_list()})
    return out


def daily_chart_svg(rows: list[dict]) -> str | None:
    """Stacked daily cost by phase over the 30 days up to the report's date."""
    if not rows:
        return None
    from pipelines.charts import plt, to_svg

    days = sorted({r["day"] for r in rows})
    phases = sorted({r["phase"] for r in rows})
    fig, ax = plt.subplots(figsize=(11, 3.6))
    bottom = [0.0] * len(days)
    for phase in phases:
        values = [float(next((r["cost"] for r in rows if r["day"] == d and r["phase"] == phase), 0) or 0) for d in days]
        ax.bar([d.isoformat()[5:] for d in days], values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_title("daily cost by phase (reporting currency)")
    ax.tick_params(axis="x", labelrotation=90, labelsize=7)
    ax.legend(fontsize=7)
    return to_svg(fig)


def _svg_body(svg: str | None) -> str:
    """An SVG document's <svg> element, for inlining."""
    return svg[svg.index("<svg"):] if svg else "<p>no data</p>"


def _cell(value) -> str:
    if isinstance(value, Decimal):
        return f"{value:,.2f}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return "" if value is None else str(value)


def _html_table(rows: list[dict], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|#"})


def _md_escape(value) -> str:
    """Data as literal Markdown text: no table breaks, links, emphasis or HTML from a value."""
    return _cell(value).translate(MD_SPECIAL).replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _md_table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_md_escape(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


PHASE_COLUMNS = ["phase", "cost_reporting", "share_pct", "gpu_hours_paid", "gpu_hours_busy", "utilization_pct",
                 "typical_util_pct_low", "typical_util_pct_high"]
DAY_COLUMNS = ["provider", "service_name", "phase", "billing_currency", "cost_billing", "cost_reporting"]
FINDING_COLUMNS = ["severity", "kind", "subkind", "resource", "avoidable_cost", "currency", "recommendation"]
ANOMALY_COLUMNS = ["state", "kind", "direction", "metric", "series", "first_day", "days", "peak_day", "actual", "expected",
                   "change", "unit", "driver"]
SUPPRESSED_COLUMNS = ["planned_run", "days_suppressed", "first_day", "last_day"]
TCO_COLUMNS = ["gpu_model", "scenario", "cards", "capex", "yearly_power", "yearly_ops", "yearly_rent", "residual", "tco",
               "cost_per_busy_gpu_hour", "elasticity"]


def headline(data: dict) -> tuple[str, list[str]]:
    """The report in a few lines, for the top of the page and for chat."""
    day = data["scored_day"]
    total = sum((r["cost_reporting"] or 0) for r in data["day_cost"])
    currency = next((r["reporting_currency"] for r in data["day_cost"]), "")
    alerts = [a for a in data["anomalies"] if a["new"]]
    open_ = [a for a in data["anomalies"] if a["status"] == "open" and not a["new"]]
    resolved = [a for a in data["anomalies"] if a["status"] == "resolved"]
    restated = sum(1 for a in resolved if a["resolution"] == "restated")
    lines = [f"Cost on {day}: {total:,.2f} {currency}" if data["day_cost"] else f"Cost on {day}: no charges billed for it (yet)",
             f"{len(alerts)} new anomal{'y' if len(alerts) == 1 else 'ies'}, {len(open_)} ongoing, "
             f"{len(resolved)} resolved in the last 30 days" + (f" ({restated} by restated bills)" if restated else "")]
    lines += [f"NEW: {a['summary']}" for a in alerts[:5]]
    if data["findings"]:
        top = data["findings"][0]
        lines.append(f"Top hidden cost: {top['kind']}/{top['subkind']} on {top['resource']}: "
                     f"{_cell(top['avoidable_cost_reporting'])} {top['reporting_currency']} avoidable")
    return f"gpu-finops daily report — {data['date']}", lines


def render(data: dict) -> tuple[str, str, str]:
    """(HTML, Markdown, JSON) for the gathered data."""
    from pipelines.charts import anomaly_charts, hidden_costs_chart, utilization_chart

    day = data["scored_day"]
    tco_data = data["tco"]
    title, lines = headline(data)
    anomaly_md = _md_table(data["anomalies"], ANOMALY_COLUMNS)
    if data["anomalies"]:
        anomaly_md += "\n\n" + "\n".join(f"- {_md_escape(a['summary'])}" for a in data["anomalies"])
    anomaly_html = _html_table(data["anomalies"], ANOMALY_COLUMNS)
    if data["anomalies"]:
        anomaly_html += "<ul>" + "".join(f"<li>{html.escape(a['summary'] or '')}</li>" for a in data["anomalies"]) + "</ul>"
    if data["anomaly_series"]:
        anomaly_html += "<h3>Expected vs actual</h3>" + _svg_body(anomaly_charts(data["anomaly_series"]))
    sections = [
        ("Anomalies in the last 30 days", anomaly_html, anomaly_md),
        ("Planned runs (spend expected, not alerted)", _html_table(data["suppressed"], SUPPRESSED_COLUMNS),
         _md_table(data["suppressed"], SUPPRESSED_COLUMNS)),
        ("Top hidden costs",
         _html_table(data["findings"], FINDING_COLUMNS) + (_svg_body(hidden_costs_chart(data["findings"])) if data["findings"] else ""),
         _md_table(data["findings"], FINDING_COLUMNS)),
        ("Spend by phase this month",
         _html_table(data["spend_by_phase"], PHASE_COLUMNS)
         + (_svg_body(utilization_chart(data["spend_by_phase"])) if any(p.get("utilization_pct") is not None for p in data["spend_by_phase"]) else ""),
         _md_table(data["spend_by_phase"], PHASE_COLUMNS)),
        (f"Cost on {day}", _html_table(data["day_cost"], DAY_COLUMNS), _md_table(data["day_cost"], DAY_COLUMNS)),
    ]
    if "scenarios" in tco_data:
        sections.append(("Purchasing strategy (3-year TCO, " + tco_data["currency"] + ")",
                         _html_table(tco_data["scenarios"], TCO_COLUMNS) + _svg_body(data["tco_chart_svg"]),
                         _md_table(tco_data["scenarios"], TCO_COLUMNS)
                         + f"\n\nMeasured utilization of {tco_data['main_model']}: {tco_data['utilization']:.1%} "
                           "(recurring load a year, one-off runs once)."))
    else:
        sections.append(("Purchasing strategy", f"<p>{html.escape(tco_data['note'])}</p>", tco_data["note"]))
    page = ["<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title>",
            "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}"
            "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}th{background:#f3f3f3}"
            ".headline{background:#f6f8fa;padding:.6em 1em;border-left:4px solid #1f77b4}</style>",
            f"</head><body><h1>{html.escape(title)}</h1>",
            "<div class='headline'><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul></div>",
            f"<p>Day-level sections are about {html.escape(day)}: bills arrive late, so the report scores the day before yesterday.</p>",
            "<h2>Daily cost by phase</h2>", _svg_body(daily_chart_svg(data["daily_by_phase"]))]
    page += [f"<h2>{html.escape(t)}</h2>{body}" for t, body, _ in sections]
    page.append("</body></html>")
    markdown = (f"# {title}\n\n" + "\n".join(f"- {_md_escape(line)}" for line in lines) + "\n\n"
                + "\n\n".join(f"## {t}\n\n{md}" for t, _, md in sections) + "\n")
    machine = {"headline": {"title": title, "lines": lines},
               **{k: v for k, v in data.items() if k not in ("tco_chart_svg", "anomaly_series")}}
    return "\n".join(page), markdown, json.dumps(machine, indent=2, default=str)


def write_report(conn, report_date: date, reports_dir: Path, params_file: str | None = None,
                 options: AnomalyOptions = AnomalyOptions(), new_ids: list[str] | None = None) -> tuple[Path, dict]:
    """reports/<date>/report.html, report.md and report.json; returns the folder and the gathered data."""
    folder = reports_dir / report_date.isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    data = gather(conn, report_date, params_file, options, new_ids)
    page, markdown, machine = render(data)
    (folder / "report.html").write_text(page, encoding="utf-8")
    (folder / "report.md").write_text(markdown, encoding="utf-8")
    (folder / "report.json").write_text(machine, encoding="utf-8")
    return folder, data
