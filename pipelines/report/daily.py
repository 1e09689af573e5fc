"""A day's report, read top-down in half a minute: a header of KPIs (month to date against last
month, forecast, avoidable spend, idle share, cost per busy GPU-hour), what changed (anomalies),
the leaks to act on, then the detail (daily cost, spend by phase, the day's bill, purchasing).
One self-contained HTML file (inline SVG charts), Markdown and JSON.

Amounts are in the reporting currency; billing currencies appear beside them in the detail.
Money stays Decimal until it is formatted. Every value from data is escaped before it reaches
HTML or Markdown.
"""

import html
import json
import re
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import polars as pl

from connectors.base import printable
from models.anomalies import KEY, MICROS, AnomalyRules, load_planned_runs, score
from models.tco import FLEET, UNKNOWN, one_off_counting
from pipelines.analysis import tco
from pipelines.analysis.anomalies import Window, load_series, rules_in_currency, window_for
from pipelines.report.figures import json_value, money, with_shown_shares
from pipelines.warehouse.connection import SQL_DIR, fetch_dicts, fetch_value, raw_files_source, table_exists

TOP_FINDINGS = 10
MAX_ANOMALY_CHARTS = 6
MAX_FILES_LISTED = 20


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
    data = {
        "date": report_date.isoformat(),
        "scored_day": day.isoformat(),
        "kpis": fetch_dicts(conn, (SQL_DIR / "queries" / "report_kpis.sql").read_text(), {"day": day})[0],
        # The month to the scored day, as the header's month-to-date figures.
        "spend_by_phase": with_shown_shares(fetch_dicts(conn, (SQL_DIR / "queries" / "report_spend_by_phase.sql").read_text(),
                                                        {"first_day": day.replace(day=1), "last_day": day})),
        "day_cost": fetch_dicts(conn, """
            SELECT provider, service_name, phase, billing_currency, sum(cost_billing) AS cost_billing,
                   reporting_currency, sum(cost_reporting) AS cost_reporting
            FROM marts.daily_cost WHERE day = ? GROUP BY ALL ORDER BY cost_reporting DESC NULLS LAST""", [day]),
        # The newest day anything was billed for: a report of a day past it says where the bills end.
        "last_billed_day": fetch_value(conn, "SELECT CAST(max(day) AS VARCHAR) FROM marts.daily_cost"),
        "lag_days": options.lag_days,
        "daily_by_phase": fetch_dicts(conn, """
            SELECT day, phase, sum(cost_reporting) AS cost FROM marts.daily_cost
            WHERE day BETWEEN ? AND ? GROUP BY ALL ORDER BY day, phase""", [window.first_day, day]),
        "findings": fetch_dicts(conn, """
            SELECT finding_id, rank, kind, subkind, resource, title, period, period_start, period_end, items,
                   wasted_cost, avoidable_cost, currency, wasted_cost_reporting, avoidable_cost_reporting, reporting_currency,
                   severity, recommendation
            FROM findings.hidden_costs
            -- A report rebuilt for a past day names no leak of a month that had not begun by then.
            WHERE period_start IS NULL OR CAST(timezone('UTC', period_start) AS DATE) <= ?
            ORDER BY rank LIMIT ?""", [day, TOP_FINDINGS]),
        "anomalies": anomalies_in_window(conn, window, new_ids),
        "suppressed": fetch_dicts(conn, """
            SELECT suppressed_by AS planned_run, count(DISTINCT day) AS days_suppressed,
                   count(DISTINCT (provider, sub_account, service, phase, metric)) AS series,
                   min(day) AS first_day, max(day) AS last_day
            FROM findings.anomaly_scores WHERE flagged AND suppressed_by IS NOT NULL AND day BETWEEN ? AND ?
            GROUP BY ALL ORDER BY 1""", [window.first_day, day]) if table_exists(conn, "findings.anomaly_scores") else [],
    }
    data["anomaly_series"] = anomaly_series(conn, data["anomalies"], window, options)[:MAX_ANOMALY_CHARTS]
    data.update(files_behind(conn))
    try:
        result = tco.compute(conn, params_file)
        data["tco"] = {"scenarios": result.scenarios, "break_even": result.break_even,
                       "utilization": result.utilization, "main_model": result.main_model, "currency": result.params["currency"],
                       # What the strategies were sized and priced for: the report's labels say it.
                       "years": int(result.params["years"]),
                       "one_off_runs_per_year": result.params["annualize"]["one_off_runs_per_year"],
                       "bundled_params": params_file is None,
                       "converted": result.params.get("converted"),
                       **tco_rate(conn, result.params["currency"], data["kpis"]["currency"], day)}
        data["tco_chart_svg"] = result.chart_svg()
    except tco.NotPriced as exc:
        data["tco"] = {"note": str(exc)}
        data["tco_chart_svg"] = None
    return data


def files_behind(conn) -> dict:
    """The files the figures stand on: how many count, by kind, and those to look at
    (sql/queries/report_files.sql): failed, unrecognised, incomplete, rows quarantined, warnings."""
    if not table_exists(conn, "raw.files"):
        return {"files_counting": [], "files_to_look_at": []}
    return {
        "files_counting": fetch_dicts(conn, "SELECT kind, count(DISTINCT path) AS files FROM raw.files "
                                            "WHERE status = 'loaded' GROUP BY kind ORDER BY files DESC, kind"),
        "files_to_look_at": fetch_dicts(conn, (SQL_DIR / "queries" / "report_files.sql").read_text()
                                        .replace("FROM raw.files", f"FROM {raw_files_source(conn)}"),
                                        {"limit": MAX_FILES_LISTED}),
    }


def files_summary(data: dict) -> str:
    """One sentence on the files behind the figures, for the section and, when something is amiss,
    for the headline."""
    counting = data.get("files_counting") or []
    listed = data.get("files_to_look_at") or []
    total = sum(r["files"] for r in counting)
    text = f"{plural(total, 'file')} count{'s' if total == 1 else ''}" + (" (" + ", ".join(f"{r['files']:,} {r['kind'] or 'other'}" for r in counting) + ")"
                                               if counting else "")
    if not listed:
        return text + "; every file read counts whole."
    concerns: dict[str, int] = {}
    for r in listed:
        label = CONCERNS.get(r["concern"], r["concern"])
        concerns[label] = concerns.get(label, 0) + 1
    shown = len(listed)
    more = listed[0]["files_to_look_at"] - shown
    text += f"; {plural(listed[0]['files_to_look_at'], 'file')} to look at (" + ", ".join(
        f"{n} {c}" for c, n in sorted(concerns.items())) + (f" among the first {shown}" if more > 0 else "") + ")"
    known, unknown = money_set_aside(listed)
    if known:
        text += f"; {' and '.join(known)} in quarantined rows {'is' if len(known) == 1 else 'are'} in no figure"
    if unknown:
        files = plural(unknown, "file")
        text += (f"; nor are the quarantined rows of {files} whose currency is not known" if known
                 else f"; the quarantined rows of {files}, whose currency is not known, are in no figure")
    return text + "."


# How the section counts each concern: "2 with a warning", "1 failed".
CONCERNS = {"warning": "with a warning", "quarantined": "wholly quarantined"}


def money_set_aside(listed: list[dict]) -> tuple[list[str], int]:
    """The money quarantined rows hold, by currency, over every file to look at (not only those
    listed), and how many files hold such money in a currency not known: added to nothing."""
    totals = (listed[0].get("set_aside_totals") if listed else None) or []
    return ([money(t["amount"], t["currency"]) for t in totals if t["currency"]],
            sum(t["files"] for t in totals if not t["currency"]))


def set_aside_cell(r: dict) -> str:
    """A file's quarantined money in each currency its rows state: `100.00 USD; 700.00 CNY`."""
    return "; ".join(money(e["amount"], e["currency"]) if e["currency"] else f"{money(e['amount'], '')} (currency not known)"
                     for e in r.get("set_aside") or [])


def status_cell(r: dict) -> str:
    concern = _cell(r["concern"])
    return concern + ("; an earlier version counts" if r.get("earlier_version_counts") else "")


def _short(text, limit: int = 240) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tco_rate(conn, currency: str, reporting_currency: str | None, day: date) -> dict:
    """The rate that shows the purchasing comparison in the reporting currency: the latest on or
    before the scored day (a 3-year projection has no better one)."""
    if not reporting_currency or currency == reporting_currency:
        return {"rate": Decimal(1) if reporting_currency else None, "rate_date": None, "reporting_currency": reporting_currency}
    rows = fetch_dicts(conn, (SQL_DIR / "queries" / "newest_rate.sql").read_text(),
                       {"from_currency": currency, "to_currency": reporting_currency, "day": day})
    return {"rate": rows[0]["rate"] if rows else None, "rate_date": rows[0]["rate_date"] if rows else None,
            "reporting_currency": reporting_currency}


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
    for r in rows:
        r["explanation"] = json.loads(r["explanation"]) if isinstance(r["explanation"], str) else r["explanation"]
    # With the usage each cost anomaly's explanation weighs.
    cost_spans = [(r["provider"], r["sub_account"], r["service"], r["phase"], r["first_day"], r["last_day"],
                   (r["explanation"] or {}).get("usage_metric")) for r in rows if r["metric"] == "cost"]
    # A usage anomaly during a cost anomaly of the same series is its driver, already in its explanation;
    # not where that explanation weighs another usage (GPU-hours before egress): egress spiking beside
    # a GPU cost anomaly is an anomaly of its own.
    rows = [r for r in rows if r["metric"] == "cost" or not any(
        (p, a, s, ph) == (r["provider"], r["sub_account"], r["service"], r["phase"]) and first <= r["last_day"]
        and r["first_day"] <= last and weighed in (None, r["metric"])
        for p, a, s, ph, first, last, weighed in cost_spans)]
    for r in rows:
        if r["resolution"] == "back_to_normal" and r["resolved_on"] is not None and r["resolved_on"] > window.scored_day:
            # A report rebuilt for a past day: on its scored day the episode had not ended yet.
            r["status"], r["resolution"] = "open", None
        # The detection's own list when a run hands it over: an episode whose first days were restated
        # starts later but was announced already. A report rebuilt alone: what starts on its day.
        found_now = r["anomaly_id"] in new_ids if new_ids is not None else r["first_day"] == window.scored_day
        r["new"] = found_now and r["resolution"] != "restated"  # a restated anomaly no longer exists: no alert
        r["series"] = f"{r['provider']} / {r['sub_account']} / {r['service']} / {r['phase']}"
        r["state"] = ("new" if r["new"] else r["status"]) + (f" ({r['resolution'].replace('_', ' ')})" if r["resolution"] else "")
    return rows


def anomaly_series(conn, anomalies: list[dict], window: Window, options: AnomalyOptions) -> list[dict]:
    """Actual and expected per day over the window for each charted anomaly (scored again, read-only)."""
    if not anomalies:
        return []
    out, charted, floors = [], set(), {}  # floors: the rules with the cost floor in each currency, converted once
    for a in anomalies:
        panel_key = (a["metric"], *(a[k] for k in KEY))
        if panel_key in charted:  # one panel per series shows all its episodes in the window
            continue
        charted.add(panel_key)
        one = load_series(conn, {k: a[k] for k in KEY}).filter(pl.col("metric") == a["metric"])
        # A cost anomaly's unit is its reporting currency, the one its floor is converted into.
        if a["metric"] == "cost" and a["unit"] not in floors:
            floors[a["unit"]] = rules_in_currency(conn, options.rules, a["unit"], window.scored_day)
        rules = floors[a["unit"]] if a["metric"] == "cost" else options.rules
        scored = score(one, window.days, rules, list(options.planned)).sort("day")
        out.append({"anomaly_id": a["anomaly_id"], "unit": a["unit"],
                    "title": f"{a['service']} · {PHASE_LABELS.get(a['phase'], a['phase'])} · {METRIC_LABELS.get(a['metric'], a['metric'])}",
                    "days": scored["day"].to_list(),
                    "actual": [None if v is None else v / MICROS for v in scored["actual"].to_list()],
                    "expected": [None if v is None else v / MICROS for v in scored["expected"].to_list()],
                    "flagged": (scored["flagged"] & scored["suppressed_by"].is_null()).to_list()})
    return out


# -- words and numbers a reader sees ---------------------------------------------------------------

PHASE_LABELS = {"pretraining": "Pre-training", "finetuning": "Fine-tuning", "inference": "Inference",
                "idle": "Idle (paid, nothing ran)", "unattributed": "Unattributed"}
KIND_LABELS = {"unused_gpu": "Unused GPUs", "egress": "Egress", "slow_disk_idle": "Slow-disk idle",
               "overprovisioned_inference": "Over-provisioned inference", "unused_commitment": "Unused commitment"}
METRIC_LABELS = {"cost": "cost", "gpu_hours": "GPU-hours", "egress_gb": "egress"}
SEVERITIES = ("high", "medium", "low", "unrated")  # the only values that become a CSS class


def plural(count: int, noun: str) -> str:
    """`1 day`, `7 days`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def number(value, places: int = 1) -> str:
    return "—" if value is None else f"{value:,.{places}f}"


def percent(value, places: int = 1) -> str:
    return "—" if value is None else f"{value:,.{places}f} %"


def change_pct(now, before) -> float | None:
    return None if not before else float((Decimal(now) - Decimal(before)) / Decimal(before) * 100)


def by_currency(amounts) -> str:
    """A {currency: amount} map as '3,518.70 CNY · 0.50 USD'."""
    return " · ".join(money(v, k) for k, v in sorted((amounts or {}).items()) if v)


def _cell(value) -> str:
    if isinstance(value, Decimal):
        return f"{value:,.2f}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return "" if value is None else str(value)


MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|#"})


def _md_escape(value) -> str:
    """Data as literal Markdown text: no table breaks, links, emphasis or HTML from a value."""
    return _cell(value).translate(MD_SPECIAL).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", " ").replace("\n", " ")


@dataclass(frozen=True)
class Column:
    """A column as a reader sees it: a header in words, how a row shows in it, numbers right-aligned."""

    header: str
    show: object  # row -> str
    numeric: bool = False
    nowrap: bool = False


def _html_table(rows: list[dict], columns: list[Column], empty: str = "Nothing to show.") -> str:
    if not rows:
        return f"<p class='empty'>{html.escape(empty)}</p>"
    num = lambda c: " class='num'" if c.numeric else (" class='nw'" if c.nowrap else "")
    head = "".join(f"<th{num(c)}>{html.escape(c.header)}</th>" for c in columns)
    # data-label: on a phone each row becomes a card whose cells name their column (CSS ::before).
    body = "".join("<tr>" + "".join(f"<td{num(c)} data-label='{html.escape(c.header, quote=True)}'>{html.escape(c.show(r))}</td>"
                                    for c in columns) + "</tr>" for r in rows)
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _md_table(rows: list[dict], columns: list[Column], empty: str = "Nothing to show.") -> str:
    if not rows:
        return f"_{empty}_"
    lines = ["| " + " | ".join(c.header for c in columns) + " |",
             "|" + "".join("---:|" if c.numeric else "---|" for c in columns)]
    lines += ["| " + " | ".join(_md_escape(c.show(r)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def phase_columns(currency: str) -> list[Column]:
    return [
        Column("Phase", lambda r: PHASE_LABELS.get(r["phase"], r["phase"])),
        Column(f"Cost ({currency})", lambda r: money(r["cost_reporting"]), True),
        Column("Share of spend", lambda r: percent(r.get("share_shown", r["share_pct"])), True),
        Column("GPU-hours paid", lambda r: number(r["gpu_hours_paid"]), True),
        Column("GPU-hours busy", lambda r: number(r["gpu_hours_busy"]), True),
        Column("GPU utilization (busy ÷ paid)", lambda r: percent(r.get("utilization_shown", r["utilization_pct"])), True),
        Column("Typical utilization", lambda r: "—" if r.get("typical_util_pct_low") is None
               else f"{r['typical_util_pct_low']:.0f}–{r['typical_util_pct_high']:.0f} %", True),
        # Idle GPU-hours are by definition not busy: a price per busy hour means nothing there.
        Column(f"Cost per busy GPU-hour ({currency})",
               lambda r: "—" if r["phase"] in ("idle", "unattributed") else money(r.get("cost_per_busy_gpu_hour")), True),
        Column("Billed as", lambda r: by_currency(r.get("cost_by_billing_currency"))),
    ]


def day_columns(currency: str) -> list[Column]:
    return [
        Column("Provider", lambda r: _cell(r["provider"])),
        Column("Service", lambda r: _cell(r["service_name"])),
        Column("Phase", lambda r: PHASE_LABELS.get(r["phase"], _cell(r["phase"]))),
        # EffectiveCost in the currency it was billed in (amortized: not what the invoice says).
        Column("Cost (billing currency)", lambda r: money(r["cost_billing"], r["billing_currency"]), True),
        Column(f"Cost ({currency})", lambda r: money(r["cost_reporting"]), True),
    ]


def finding_columns(currency: str) -> list[Column]:
    return [
        Column("#", lambda r: str(r["rank"]), True),
        Column("Severity", lambda r: _cell(r["severity"]).capitalize()),
        Column("Leak", lambda r: f"{r['title']} ({KIND_LABELS.get(r['kind'], r['kind'])})"),
        Column("Month", lambda r: _cell(r["period"]), nowrap=True),
        Column(f"Avoidable ({currency})", lambda r: money(r["avoidable_cost_reporting"]), True),
        Column(f"Wasted ({currency})", lambda r: money(r["wasted_cost_reporting"]), True),
        Column("Avoidable as billed", lambda r: money(r["avoidable_cost"], r["currency"]), True),
        Column("What to do", lambda r: _cell(r["recommendation"])),
    ]


def _amount(a: dict, key: str) -> str:
    value = a[key]
    return money(value, a["unit"]) if a["metric"] == "cost" else f"{number(value)} {a['unit']}"


def _days(a: dict) -> str:
    first, last = _cell(a["first_day"]), _cell(a["last_day"])
    return first if first == last else f"{first} to {last}"


ANOMALY_COLUMNS = [
    Column("State", lambda a: _cell(a["state"]).capitalize()),
    Column("Series (provider / account / service / phase)", lambda a: _cell(a["series"])),
    Column("What", lambda a: f"{METRIC_LABELS.get(a['metric'], a['metric'])} {'up' if a['direction'] == 'up' else 'down'}, "
                             f"{_cell(a['kind']).replace('_', ' ')}"),
    Column("Days", lambda a: _days(a), nowrap=True),
    Column("Actual (peak day)", lambda a: _amount(a, "actual"), True),
    Column("Expected", lambda a: _amount(a, "expected"), True),
    Column("Change", lambda a: _amount(a, "change"), True),
    Column("Driver", lambda a: _cell(a["driver"])),
]
SUPPRESSED_COLUMNS = [
    Column("Planned run", lambda r: _cell(r["planned_run"])),
    Column("Days not alerted", lambda r: _cell(r["days_suppressed"]), True),
    Column("Series", lambda r: _cell(r.get("series")), True),
    Column("From", lambda r: _cell(r["first_day"])),
    Column("To", lambda r: _cell(r["last_day"])),
]

FILE_COLUMNS = [
    Column("File", lambda r: _cell(r["path"])),
    Column("Status", status_cell),
    Column("Rows loaded", lambda r: f"{r['rows_loaded']:,}", True),
    Column("Rows quarantined", lambda r: f"{r['rows_quarantined']:,}", True),
    Column("Money set aside", set_aside_cell, True),
    Column("What to know", lambda r: _short(printable(r["what"] or ""))),
]


def tco_columns(tco_data: dict) -> list[Column]:
    cur, rep, rate = tco_data["currency"], tco_data.get("reporting_currency"), tco_data.get("rate")
    columns = [
        Column("GPU model", lambda r: _cell(r.get("gpu_model"))),
        Column("Strategy", lambda r: _cell(r["scenario"]).replace("_", " ")),
        Column("Cards", lambda r: _cell(r["cards"]), True),
    ]
    years = tco_data["years"]
    if rep and rate is not None and rep != cur:
        columns.append(Column(f"{years}-year TCO ({rep})", lambda r: money(None if r["tco"] is None else r["tco"] * rate), True))
    columns += [
        Column(f"{years}-year TCO ({cur})", lambda r: money(r["tco"]), True),
        Column(f"Capex ({cur})", lambda r: money(r["capex"]), True),
        Column(f"Power a year ({cur})", lambda r: money(r["yearly_power"]), True),
        Column(f"Ops a year ({cur})", lambda r: money(r["yearly_ops"]), True),
        Column(f"Rent a year ({cur})", lambda r: money(r["yearly_rent"]), True),
        Column(f"Residual ({cur})", lambda r: money(r["residual"]), True),
        Column(f"Per busy GPU-hour ({cur})", lambda r: money(r["cost_per_busy_gpu_hour"]), True),
        Column("Elasticity", lambda r: _cell(r["elasticity"])),
    ]
    return columns


def paid_demand_models(scenarios: list[dict], demand: str = "paid") -> list[str]:
    """The GPU models no workload held, sized from the GPUs paid for (telemetry shows them at work);
    with `demand` "busy", those sized from their busy hours no workload held alone."""
    return sorted({r["gpu_model"] for r in scenarios if r["gpu_model"] != FLEET
                   and json.loads(r["inputs"] or "{}").get("demand") == demand})


def unheld_busy_by_model(scenarios: list[dict]) -> dict[str, float]:
    """The busy GPU-hours no workload held that the purchasing model sized as demand, by GPU model."""
    return {r["gpu_model"]: hours for r in scenarios if r["gpu_model"] != FLEET
            if (hours := json.loads(r["inputs"] or "{}").get("unheld_busy_gpu_hours_measured"))}


def unheld_models(scenarios: list[dict], one_off_only: bool = False) -> list[str]:
    """The GPU models of the purchasing table no workload held in a year as sized: none in the
    measured period, or (`one_off_only`) only one-off runs that one_off_runs_per_year: 0 leaves out."""
    out = set()
    for r in scenarios:
        inputs = json.loads(r["inputs"] or "{}")
        if r["gpu_model"] != FLEET and not inputs.get("held_gpu_hours_per_year"):
            if bool(inputs.get("one_off_gpu_hours_measured")) == one_off_only:
                out.add(r["gpu_model"])
    return sorted(out)


def converted_note(converted: dict | None, currency: str) -> str:
    """The bundled example amounts a user's currency converted: which, from what, at what rate."""
    if not converted:
        return ""
    return (f"The bundled example amounts your parameters leave ({converted['keys']}) are converted from "
            f"{converted['from_currency']} into {currency} at {converted['rate']} ({converted['rate_date']}); catalog "
            f"prices are in {currency} as listed.")


def tco_caveats(scenarios: list[dict], currency: str) -> list[str]:
    """What the purchasing table leaves out or cannot measure, in words: the strategies no price was
    found for (a row of dashes each, before), and the GPU models paid for that no workload held, whose
    strategies are sized for one card with no load (their on-demand and hybrid rows cost nothing)."""
    notes = []
    missing: dict[str, list[str]] = {}
    for r in scenarios:
        if r["tco"] is None and r["gpu_model"] not in (FLEET, UNKNOWN):
            missing.setdefault(r["gpu_model"], []).append(r["scenario"].replace("_", " "))
    if left_out := tco.unknown_left_out(scenarios):
        notes.append(left_out)
    if missing:
        alike: dict[tuple, list[str]] = {}  # models missing the same strategies, named together
        for model, strategies in missing.items():
            alike.setdefault(tuple(strategies), []).append(model)
        notes.append(f"Not priced, for want of a price in {currency} in the TCO parameters or the price catalog: "
                     + "; ".join(f"{', '.join(models)}: {', '.join(strategies)}" for strategies, models in alike.items())
                     + ". A fleet total needs its strategy priced for every model. Add your quotes (a server under "
                       "models.<GPU model>.buy, rent prices under models.<GPU model>.rent) in a TCO parameters file "
                       "(FINOPS_TCO_PARAMS, or finops tco --params FILE).")
    paid = paid_demand_models(scenarios)
    if paid:
        notes.append(f"No workload held the {', '.join(paid)} GPUs, but their telemetry shows them at work: each is sized "
                     "from the GPUs paid for, hour by hour, with the busy hours telemetry measured (at most the GPUs paid "
                     "for), as one recurring load of no known phase. Load the workloads that ran on them to size them from "
                     "what ran.")
    if busy := unheld_busy_by_model(scenarios):
        notes.append("Busy GPU-hours no workload held are sized as demand of no known phase, recurring ("
                     + ", ".join(f"{model}: {hours:,.1f}" if hours >= 0.05 else f"{model}: {hours:.3f}"
                                 for model, hours in sorted(busy.items()))
                     + " in the measured period), less what workloads on hosts telemetry does not cover held; a card "
                       "at half load for an hour counts as half a GPU-hour, so the cards they took may be more. Load "
                       "the workloads that ran on them to size them from what ran.")
    if one_off := unheld_models(scenarios, one_off_only=True):
        notes.append(f"The {', '.join(one_off)} GPUs held only one-off runs, which your parameters leave out of the year "
                     "(annualize.one_off_runs_per_year: 0): each is sized for one card with no load, what holding it idle "
                     "would cost.")
    unheld = unheld_models(scenarios)
    if unheld:
        notes.append(f"No workload held the {', '.join(unheld)} GPUs paid for in the measured period, so their load is not "
                     "known: each is sized for one card with no load, what holding it idle would cost (on demand and "
                     "hybrid come to nothing). Load the workloads that ran on them to size them from what ran.")
    return notes


# -- the page --------------------------------------------------------------------------------------

def month_to(day: date) -> str:
    """The days from the 1st of `day`'s month to `day`, as a reader says them: "Oct 1–10"."""
    return f"{day:%b} 1–{day:%-d}"


def kpi_cards(data: dict) -> list[dict]:
    """The header: each KPI as a label, a value and one line that puts it in context."""
    k = data.get("kpis") or {}
    if not k:
        return []
    cur = k.get("currency") or ""
    month_change = change_pct(k["mtd"], k["prev_mtd"])
    versus = (f"{money(k['prev_mtd'], cur)} at the same point last month"
              + ("" if month_change is None else f" ({month_change:+.1f} %)")) if k["prev_days_billed"] else "no bill for last month to compare"
    leaks = k["leaks_this_month"]
    return [
        {"label": f"Spend, {month_to(k['day'])}", "value": money(k["mtd"], cur), "note": versus + without_rate_note(k)},
        {"label": f"Forecast to {k['month_end']:%b %-d}", "value": money(k["forecast"], cur),
         "note": f"{money(k['run_rate_per_day'], cur)} a day (last {plural(k['run_rate_days'], 'day')}) for the {plural(k['days_left'], 'day')} left"},
        {"label": "Avoidable this month", "value": money(k["avoidable_this_month"], cur),
         "note": f"{leaks} leak{'' if leaks == 1 else 's'} to act on, below" + (f"; {k['unrated_leaks']} without an FX rate" if k["unrated_leaks"] else "")},
        {"label": "Idle share", "value": percent(k["idle_share_pct"]),
         "note": f"of the spend of {month_to(k['day'])} paid for GPUs nothing ran on ({money(k['idle_cost'], cur)})"},
        {"label": "Cost per busy GPU-hour", "value": money(k["cost_per_busy_gpu_hour"], cur), "note": gpu_hours_note(k, cur)},
    ]


def gpu_hours_note(k: dict, cur: str) -> str:
    """The GPU spend over the hours it paid for, busy where telemetry says; without telemetry for
    them, busy hours are unknown, not a dash in the sentence."""
    spend, paid, month = money(k["gpu_cost"], cur), number(k["paid_gpu_hours"], 0), month_to(k["day"])
    if k.get("paid_gpu_hours") is None:
        return f"no GPU charge billed, {month}"
    if k.get("busy_gpu_hours") is None:
        return f"GPU spend {spend} over {paid} paid GPU-hours, {month}; busy hours unknown: no GPU telemetry for them"
    dark = k.get("dark_gpu_hours") or 0
    unseen = (f"; {number(dark, 0)} of the paid hours had no telemetry: their spend is in it, their busy hours "
              "unknown, so the figure is high" if dark >= 1 else "")
    return f"GPU spend {spend} over {number(k['busy_gpu_hours'], 0)} busy of {paid} paid GPU-hours, {month}{unseen}"


def without_rate_note(kpis: dict) -> str:
    """What the month's reporting-currency figures leave out for want of an FX rate (a charge is
    never converted at 1.0 nor at a stale rate): said beside them, or they read as the whole spend."""
    lines = kpis.get("mtd_without_rate") or 0
    if not lines:
        return ""
    billed = ", ".join(money(b["amount"], b["currency"]) for b in kpis.get("mtd_without_rate_billed") or [])
    return (f"; not in it: {billed + ' in ' if billed else ''}{number(lines, 0)} line{'' if lines == 1 else 's'} "
            "without an FX rate (core.cost_lines.x_FxStatus)")


def day_without_rate(day_cost: list[dict]) -> str:
    """The scored day's charges that have no FX rate, in their billing currencies."""
    billed: dict[str, Decimal] = {}
    for r in day_cost:
        if r["cost_reporting"] is None and r["cost_billing"] is not None:
            billed[r["billing_currency"]] = billed.get(r["billing_currency"], Decimal(0)) + r["cost_billing"]
    return "; ".join(money(v, c) for c, v in sorted(billed.items()))


def largest_leak(finding: dict) -> str:
    # A leak with nothing known to be avoidable (a dark instance) is told by what it wasted.
    which = "avoidable" if finding["avoidable_cost"] or not finding.get("wasted_cost") else "wasted"
    billed = "" if finding["currency"] == finding["reporting_currency"] else f" ({money(finding[f'{which}_cost'], finding['currency'])})"
    return (f"Largest leak: {finding['title']} in {finding['period']}: "
            f"{money(finding[f'{which}_cost_reporting'], finding['reporting_currency'])} {which}{billed}")


def bills_end_hint(data: dict) -> str:
    """Where the bills end, when the scored day is past them: a report of an old export run today
    would otherwise show a page of zeros with no word of the dates it does cover."""
    last = data.get("last_billed_day")
    if not last or last >= data["scored_day"]:
        return ""
    report_date = date.fromisoformat(last) + timedelta(days=data.get("lag_days", 2))
    return (f"; the newest charges are for {last} (that day's report: finops report --date {report_date.isoformat()}, "
            f"or finops run --as-of {report_date.isoformat()})")


def headline(data: dict) -> tuple[str, list[str]]:
    """The report in a few lines, for the top of the page and for chat."""
    day = data["scored_day"]
    total = sum((r["cost_reporting"] or 0) for r in data["day_cost"])
    currency = next((r["reporting_currency"] for r in data["day_cost"]), "")
    alerts = [a for a in data["anomalies"] if a["new"]]
    open_ = [a for a in data["anomalies"] if a["status"] == "open" and not a["new"]]
    resolved = [a for a in data["anomalies"] if a["status"] == "resolved"]
    restated = sum(1 for a in resolved if a["resolution"] == "restated")
    unconverted = day_without_rate(data["day_cost"])
    lines = [f"Cost on {day}: {money(total, currency)}"
             + (f", and {unconverted} without an FX rate (not in that total)" if unconverted else "")
             if data["day_cost"] else f"Cost on {day}: no charges billed for it (yet)" + bills_end_hint(data),
             f"{len(alerts)} new anomal{'y' if len(alerts) == 1 else 'ies'}, {len(open_)} ongoing, "
             f"{len(resolved)} resolved in the last 30 days" + (f" ({restated} by restated data)" if restated else "")]
    lines += [f"NEW: {a['summary']}" for a in alerts[:5]]
    if data["findings"]:
        lines.append(largest_leak(data["findings"][0]))
    if data.get("files_to_look_at"):
        lines.append("Files: " + files_summary(data).split("; ", 1)[1].removesuffix(".")
                     + " (see Files behind these figures)")
    return f"gpu-finops daily report — {data['date']}", lines


STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;padding:16px 20px 40px;max-width:1240px;
     color:#1b1f24;line-height:1.45;font-size:15px}
h1{font-size:24px;margin:8px 0 2px}h2{font-size:20px;margin:32px 0 8px;padding-top:8px;border-top:2px solid #e3e6ea}
h3{font-size:16px;margin:20px 0 6px}.sub{color:#57606a;margin:0 0 14px}
.kpis{display:grid;grid-template-columns:repeat(auto-fit,minmax(210px,1fr));gap:10px;margin:10px 0 14px}
.kpi{border:1px solid #d0d7de;border-radius:8px;padding:10px 12px;background:#f6f8fa}
.kpi .label{font-size:13px;color:#57606a;text-transform:uppercase;letter-spacing:.03em}
.kpi .value{font-size:24px;font-weight:650;margin:2px 0;font-variant-numeric:tabular-nums}
.kpi .note{font-size:13px;color:#57606a}
.headline{background:#fff8e6;padding:8px 14px;border-left:4px solid #d4a72c;border-radius:4px}
.headline ul{margin:4px 0;padding-left:18px}.headline li.leak{font-weight:600}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;margin:8px 0;font-size:14px;font-variant-numeric:tabular-nums}
td,th{border-bottom:1px solid #e3e6ea;padding:5px 10px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600;vertical-align:bottom}
td.num,th.num{text-align:right}td.num,td.nw{white-space:nowrap}
.chart svg{width:100%;max-width:960px;height:auto;display:block}
.empty{color:#57606a;font-style:italic}.chart.narrow{display:none}
@media (max-width:600px){body{padding:10px 10px 30px;font-size:14px}h1{font-size:20px}.kpi .value{font-size:21px}
 .kpis{grid-template-columns:1fr 1fr}.kpi{padding:8px}.chart.wide{display:none}.chart.narrow{display:block}
 table,tbody,tr,td{display:block;width:100%}thead{display:none}
 tr{border:1px solid #d0d7de;border-radius:6px;margin:0 0 8px;padding:4px 8px}
 td{border:0;padding:2px 0;text-align:left!important;white-space:normal!important;display:grid;
    grid-template-columns:40% 1fr;gap:8px}
 td::before{content:attr(data-label);font-size:12px;color:#57606a;padding-top:1px}}
"""


def _chart(svg: str | None, narrow_svg: str | None = None) -> str:
    """An SVG document's <svg> element, inlined without its fixed size, so CSS scales it to the page.
    With a narrow drawing too, a phone gets that one: a wide chart shrunk to 390 px has unreadable text."""
    if not svg:
        return "<p class='empty'>No data to chart.</p>"

    def inline(document: str, css: str) -> str:
        body = document[document.index("<svg"):]
        end = body.index(">")
        opening = re.sub(r'\s(?:width|height)="[^"]*"', "", body[:end])
        return f"<div class='{css}'>{opening}{body[end:]}</div>"

    return inline(svg, "chart wide") + inline(narrow_svg, "chart narrow") if narrow_svg else inline(svg, "chart")


NARROW = 4.8  # inches: drawn at a phone's width, its 11-point text stays 11 points


def render(data: dict) -> tuple[str, str, str]:
    """(HTML, Markdown, JSON) for the gathered data."""
    from pipelines.report.charts import anomaly_charts, daily_cost_chart, hidden_costs_chart, utilization_chart

    day = data["scored_day"]
    kpis = data.get("kpis") or {}
    cur = kpis.get("currency") or next((f["reporting_currency"] for f in data["findings"]), "")
    tco_data = data["tco"]
    title, lines = headline(data)
    cards = kpi_cards(data)

    changed_html = _html_table(data["anomalies"], ANOMALY_COLUMNS, "No anomalies in the last 30 days.")
    changed_md = _md_table(data["anomalies"], ANOMALY_COLUMNS, "No anomalies in the last 30 days.")
    if data["anomalies"]:
        changed_html += "<ul>" + "".join(f"<li>{html.escape(a['summary'] or '')}</li>" for a in data["anomalies"]) + "</ul>"
        changed_md += "\n\n" + "\n".join(f"- {_md_escape(a['summary'])}" for a in data["anomalies"])
    if data["anomaly_series"]:
        changed_html += "<h3>Expected vs actual</h3>" + _chart(anomaly_charts(data["anomaly_series"]),
                                                               anomaly_charts(data["anomaly_series"], NARROW))
    changed_html += "<h3>Planned runs (spend expected, not alerted)</h3>" + _html_table(
        data["suppressed"], SUPPRESSED_COLUMNS, "No planned run in the window.")
    changed_md += "\n\n### Planned runs (spend expected, not alerted)\n\n" + _md_table(
        data["suppressed"], SUPPRESSED_COLUMNS, "No planned run in the window.")

    leaks_html = _html_table(data["findings"], finding_columns(cur), "No leaks found.")
    if data["findings"] and (leak_chart := hidden_costs_chart(data["findings"])):
        leaks_html += _chart(leak_chart, hidden_costs_chart(data["findings"], NARROW))
    leaks_md = _md_table(data["findings"], finding_columns(cur), "No leaks found.")

    phases = data["spend_by_phase"]
    phase_title = f"Spend by phase, {month_to(date.fromisoformat(day))}"
    phase_html = _html_table(phases, phase_columns(cur), "No spend on these days.")
    phase_md = _md_table(phases, phase_columns(cur), "No spend on these days.")
    if without_rate_note(kpis):
        # The phases' shares are of the converted spend alone: say so beside them.
        note = (f"Costs in {cur} leave out what has no FX rate" + without_rate_note(kpis).removeprefix("; not in it")
                + "; its phases are in the Billed as column.")
        phase_html += f"<p>{html.escape(note)}</p>"
        phase_md += f"\n\n{_md_escape(note)}"
    if any(p.get("utilization_pct") is not None for p in phases):
        phase_html += _chart(utilization_chart(phases), utilization_chart(phases, NARROW))
    detail = [
        (f"Daily cost by phase ({cur})", _chart(daily_cost_chart(data["daily_by_phase"], cur),
                                                daily_cost_chart(data["daily_by_phase"], cur, NARROW)), None),
        (phase_title, phase_html, phase_md),
        (f"Cost on {day}", _html_table(data["day_cost"], day_columns(cur), "No charges billed for this day (yet)."),
         _md_table(data["day_cost"], day_columns(cur), "No charges billed for this day (yet).")),
    ]
    if "scenarios" in tco_data:
        rate_note = ""
        if tco_data.get("rate") is not None and tco_data.get("reporting_currency") not in (None, tco_data["currency"]):
            rate_note = (f" Amounts in {tco_data['reporting_currency']} at {tco_data['rate']:.6f} per {tco_data['currency']}"
                         f" ({tco_data['rate_date']}).")
        priced = [r for r in tco_data["scenarios"] if r["tco"] is not None]
        # Where no workload held the main model there is no utilization to state: the caveat says why
        # (sized from the GPUs paid for, or from busy hours, every hour sized is held: 100 % would say nothing).
        rows = tco_data["scenarios"]
        not_measured = (set(unheld_models(rows)) | set(unheld_models(rows, one_off_only=True)) | set(paid_demand_models(rows))
                        | set(paid_demand_models(rows, "busy")))
        held = tco_data["main_model"] not in not_measured and tco_data["main_model"] != UNKNOWN
        measured = (f"Measured utilization of {tco_data['main_model']} (GPU-hours held over the card-hours the strategies size for; "
                    f"recurring load a year, {one_off_counting(tco_data['one_off_runs_per_year'])}): "
                    f"{tco_data['utilization'] * 100:.1f} %." if held else "")
        # The bundled parameters are an example market's prices (their currency is theirs, not the bills'):
        # a reader of a USD or EUR estate must know the strategies are priced from them.
        bundled = (f"Purchase, rental and power prices are the bundled example parameters (in {tco_data['currency']}); "
                   "give your own with --tco-params (README: Purchasing strategy)." if tco_data.get("bundled_params") else "")
        notes = [n for n in ((measured + rate_note).strip(), bundled, converted_note(tco_data.get("converted"), tco_data["currency"]),
                             *tco.whole_terms_notes(priced), *tco_caveats(tco_data["scenarios"], tco_data["currency"])) if n]
        empty = ("No strategy could be priced (below: what is missing)." if any(r["gpu_model"] not in (FLEET, UNKNOWN) for r in rows)
                 else "No strategy could be priced: the only GPUs measured are of unknown model (below).")
        detail.append((f"Purchasing strategy ({tco_data['years']}-year TCO, {tco_data['currency']})",
                       _html_table(priced, tco_columns(tco_data), empty) + "".join(f"<p>{html.escape(n)}</p>" for n in notes)
                       + (_chart(data["tco_chart_svg"]) if data["tco_chart_svg"] else ""),
                       _md_table(priced, tco_columns(tco_data), empty) + "".join(f"\n\n{_md_escape(n)}" for n in notes)))
    else:
        detail.append(("Purchasing strategy", f"<p>{html.escape(tco_data['note'])}</p>", _md_escape(tco_data["note"])))
    files_line = files_summary(data)
    listed = data.get("files_to_look_at") or []
    detail.append(("Files behind these figures",
                   f"<p>{html.escape(files_line)}</p>" + (_html_table(listed, FILE_COLUMNS) if listed else ""),
                   _md_escape(files_line) + ("\n\n" + _md_table(listed, FILE_COLUMNS) if listed else "")))

    kpi_html = "<div class='kpis'>" + "".join(
        f"<div class='kpi'><div class='label'>{html.escape(c['label'])}</div><div class='value'>{html.escape(c['value'])}</div>"
        f"<div class='note'>{html.escape(c['note'])}</div></div>" for c in cards) + "</div>"
    leak_line = largest_leak(data["findings"][0]) if data["findings"] else None
    page = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            f"<p class='sub'>Figures up to {html.escape(day)} (bills arrive late, so the report covers the day before "
            f"yesterday). Days and months are UTC. Amounts in {html.escape(cur)}; billing currencies in the detail.</p>",
            kpi_html,
            "<div class='headline'><ul>" + "".join(
                f"<li{' class=leak' if line == leak_line else ''}>{html.escape(line)}</li>" for line in lines) + "</ul></div>",
            f"<h2>What changed</h2>{changed_html}",
            f"<h2>Leaks to act on ({html.escape(cur)})</h2>{leaks_html}",
            "<h2>Detail</h2>"]
    page += [f"<h3>{html.escape(t)}</h3>{body}" for t, body, _ in detail]
    page.append("</body></html>")
    markdown = (f"# {title}\n\n" + "".join(f"- **{_md_escape(c['label'])}: {_md_escape(c['value'])}** ({_md_escape(c['note'])})\n"
                                           for c in cards)
                + "\n" + "\n".join(f"- {_md_escape(line)}" for line in lines) + "\n\n"
                + f"## What changed\n\n{changed_md}\n\n## Leaks to act on ({cur})\n\n{leaks_md}\n\n## Detail\n\n"
                + "\n\n".join(f"### {t}\n\n{md}" for t, _, md in detail if md is not None) + "\n")
    machine = {"headline": {"title": title, "lines": lines}, "kpi_cards": cards,
               **{k: v for k, v in data.items() if k not in ("tco_chart_svg", "anomaly_series")}}
    return "\n".join(page), markdown, json.dumps(machine, indent=2, default=json_value)


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
