"""A day's report: spend by phase, the day's cost, the ranked hidden costs and the purchasing
comparison, as one self-contained HTML file (inline SVG charts), Markdown and JSON.

Every value from data is escaped before it reaches HTML or Markdown.
"""

import html
import json
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

from pipelines import tco
from pipelines.warehouse import fetch_dicts

TOP_FINDINGS = 10


def gather(conn, day: date, params_file: str | None = None) -> dict:
    month = day.strftime("%Y-%m")
    data = {
        "date": day.isoformat(),
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
            WHERE day BETWEEN ? AND ? GROUP BY ALL ORDER BY day, phase""", [day - timedelta(days=29), day]),
        "findings": fetch_dicts(conn, f"""
            SELECT finding_id, kind, subkind, resource, period_start, wasted_cost, avoidable_cost, currency,
                   avoidable_cost_reporting, reporting_currency, severity, recommendation
            FROM findings.hidden_costs ORDER BY avoidable_cost_reporting DESC NULLS LAST LIMIT {TOP_FINDINGS}"""),
    }
    try:
        result = tco.compute(conn, params_file)
        data["tco"] = {"scenarios": result.scenarios, "break_even": result.break_even,
                       "utilization": result.utilization, "currency": result.params["currency"]}
        data["tco_chart_svg"] = result.chart_svg()
    except tco.NoUsageMeasured as exc:
        data["tco"] = {"note": str(exc)}
        data["tco_chart_svg"] = None
    return data


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


def _md_escape(value) -> str:
    return _cell(value).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _md_table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_md_escape(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


PHASE_COLUMNS = ["phase", "cost_reporting", "share_pct", "gpu_hours_paid", "gpu_hours_busy", "utilization_pct",
                 "typical_util_pct_low", "typical_util_pct_high"]
DAY_COLUMNS = ["provider", "service_name", "phase", "billing_currency", "cost_billing", "cost_reporting"]
FINDING_COLUMNS = ["severity", "kind", "subkind", "resource", "avoidable_cost", "currency", "recommendation"]
TCO_COLUMNS = ["scenario", "cards", "capex", "yearly_power", "yearly_ops", "yearly_rent", "residual", "tco",
               "cost_per_busy_gpu_hour", "elasticity"]


def render(data: dict) -> tuple[str, str, str]:
    """(HTML, Markdown, JSON) for the gathered data."""
    day = data["date"]
    tco_data = data["tco"]
    sections = [
        ("Spend by phase this month", _html_table(data["spend_by_phase"], PHASE_COLUMNS), _md_table(data["spend_by_phase"], PHASE_COLUMNS)),
        (f"Cost on {day}", _html_table(data["day_cost"], DAY_COLUMNS), _md_table(data["day_cost"], DAY_COLUMNS)),
        ("Top hidden costs", _html_table(data["findings"], FINDING_COLUMNS), _md_table(data["findings"], FINDING_COLUMNS)),
    ]
    if "scenarios" in tco_data:
        sections.append(("Purchasing strategy (3-year TCO, " + tco_data["currency"] + ")",
                         _html_table(tco_data["scenarios"], TCO_COLUMNS) + _svg_body(data["tco_chart_svg"]),
                         _md_table(tco_data["scenarios"], TCO_COLUMNS)
                         + f"\n\nMeasured fleet utilization: {tco_data['utilization']:.1%}."))
    else:
        sections.append(("Purchasing strategy", f"<p>{html.escape(tco_data['note'])}</p>", tco_data["note"]))
    page = ["<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>gpu-finops report {html.escape(day)}</title>",
            "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}"
            "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}th{background:#f3f3f3}</style>",
            f"</head><body><h1>gpu-finops daily report — {html.escape(day)}</h1>",
            "<h2>Daily cost by phase</h2>", _svg_body(daily_chart_svg(data["daily_by_phase"]))]
    page += [f"<h2>{html.escape(title)}</h2>{body}" for title, body, _ in sections]
    page.append("</body></html>")
    markdown = f"# gpu-finops daily report — {day}\n\n" + "\n\n".join(f"## {title}\n\n{md}" for title, _, md in sections) + "\n"
    machine = {k: v for k, v in data.items() if k != "tco_chart_svg"}
    return "\n".join(page), markdown, json.dumps(machine, indent=2, default=str)


def write_report(conn, day: date, reports_dir: Path, params_file: str | None = None) -> Path:
    folder = reports_dir / day.isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    page, markdown, machine = render(gather(conn, day, params_file))
    (folder / "report.html").write_text(page, encoding="utf-8")
    (folder / "report.md").write_text(markdown, encoding="utf-8")
    (folder / "report.json").write_text(machine, encoding="utf-8")
    return folder
