"""Anomaly detection against the warehouse: read marts.daily_series, score it with
`models.anomalies`, explain each episode, and write findings.anomaly_scores and findings.anomalies.

Bills arrive late and are restated: the scored day is `lag_days` before the run's date, and each
run re-scores the `rescore_days` up to it, so a restated day is judged again.
"""

import json
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import polars as pl
import pyarrow as pa

from models.anomalies import KEY, MICROS, AnomalyRules, PlannedRun, episodes, reconcile, score
from pipelines.warehouse.connection import (SQL_DIR, fetch_dicts, fetch_value, run_sql_file, sql_text, table_exists,
                                           widen_column)

USAGE_UNITS = {"gpu_hours": "GPU-hours", "egress_gb": "GB"}
STILL = 0.05  # a usage or unit-price change under 5 % counts as unchanged when naming the driver


@dataclass(frozen=True)
class Window:
    scored_day: date
    first_day: date

    @property
    def days(self) -> list[date]:
        return [self.first_day + timedelta(days=i) for i in range((self.scored_day - self.first_day).days + 1)]


def window_for(as_of: date, lag_days: int = 2, rescore_days: int = 30) -> Window:
    scored = as_of - timedelta(days=lag_days)
    return Window(scored, scored - timedelta(days=rescore_days - 1))


def rules_in_currency(conn, rules: AnomalyRules, currency: str, day: date) -> AnomalyRules:
    """`rules` with the cost floor converted into `currency` (the series' reporting currency) at the
    newest rate on or before `day` in core.fx_rates. With no rate between the two the floor is read
    as an amount of `currency`, as it was before it had a currency of its own."""
    stated = rules.cost_floor_currency
    if stated is None or stated == currency:
        return replace(rules, cost_floor_currency=None)
    rate = None if not table_exists(conn, "core.fx_rates") else fetch_value(conn, (SQL_DIR / "queries" / "newest_rate.sql").read_text(),
                       {"from_currency": stated, "to_currency": currency, "day": day})
    floors = rules.floors if rate is None else {**rules.floors, "cost": rules.floors.get("cost", 0.0) * float(rate)}
    return replace(rules, floors=floors, cost_floor_currency=None)


def load_series(conn, key: dict | None = None) -> pl.DataFrame:
    """marts.daily_series in long form: one row per day, series and metric, values in micro-units
    (Int128: a day's cost past 9.2·10^12 would overflow Int64 micro-units).
    `key` (provider, sub_account, service, phase) loads that one series only."""
    params = dict(key) if key else {k: None for k in KEY}
    return conn.sql("""
        WITH s AS (
            SELECT * FROM marts.daily_series
            WHERE ($provider IS NULL OR (provider = $provider AND sub_account = $sub_account
                                         AND service = $service AND phase = $phase))
        )
        SELECT day, provider, sub_account, service, phase, 'cost' AS metric, to_micros(cost) AS value FROM s
        UNION ALL
        SELECT day, provider, sub_account, service, phase, 'gpu_hours', CAST(round(gpu_hours * 1000000) AS HUGEINT)
        FROM s WHERE gpu_hours IS NOT NULL
        UNION ALL
        SELECT day, provider, sub_account, service, phase, 'egress_gb', CAST(round(egress_gb * 1000000) AS HUGEINT)
        FROM s WHERE egress_gb IS NOT NULL""", params=params).pl().with_columns(pl.col("value").cast(pl.Int128))


def money(micros) -> Decimal | None:
    return None if micros is None else (Decimal(int(round(micros))) / MICROS).quantize(Decimal("0.000001"))


def baseline_days(method: str, day: date, rules: AnomalyRules) -> list[date]:
    if method == "same_weekday":
        return [day - timedelta(days=7 * k) for k in range(1, rules.weekday_max_weeks + 1)]
    if method == "rolling_28d":
        return [day - timedelta(days=k) for k in range(1, rules.rolling_days + 1)]
    return []


def describe_baseline(method: str, points: int) -> str:
    return {"same_weekday": f"median of the same weekday over {points} weeks",
            "rolling_28d": f"median of the last {points} billed days",
            "new_spend_rule": "no spend before (too little history for a baseline)"}.get(method, method)


def name_driver(cost_ep: dict, usage: dict | None) -> tuple[str, dict]:
    """Whether usage, price (cost per unit of usage) or both moved, for a cost episode."""
    if cost_ep["kind"] == "new":
        return "new spend", {}
    if cost_ep["kind"] == "removed":
        return "spend stopped", {}
    if not usage or usage["expected"] is None:
        return "unknown: no usage measured for this series", {}
    u_act, u_exp = usage["actual"], usage["expected"]
    c_act, c_exp = cost_ep["actual"], cost_ep["expected"]
    detail = {"usage_metric": usage["metric"], "usage_unit": USAGE_UNITS[usage["metric"]],
              "usage_actual": round(u_act / MICROS, 3), "usage_expected": round(u_exp / MICROS, 3)}
    if u_exp == 0:
        return ("usage" if u_act > 0 else "price"), detail
    usage_moved = abs(u_act - u_exp) / abs(u_exp) >= STILL
    price_act = c_act / u_act if u_act else None
    price_exp = c_exp / u_exp
    detail.update(unit_price_actual=None if price_act is None else round(price_act, 6), unit_price_expected=round(price_exp, 6))
    price_moved = price_act is None or (price_exp != 0 and abs(price_act - price_exp) / abs(price_exp) >= STILL)
    if usage_moved and price_moved:
        return "usage and price", detail
    return ("usage" if usage_moved else "price"), detail


def explain(conn, ep: dict, scores: pl.DataFrame, series: pl.DataFrame, rules: AnomalyRules, currency: str) -> dict:
    """Expected vs actual, the baseline in words, the driver and the top contributors of an episode."""
    unit = currency if ep["metric"] == "cost" else USAGE_UNITS[ep["metric"]]
    key = {k: ep[k] for k in KEY}
    explanation = {"expected": str(money(ep["expected"])), "actual": str(money(ep["actual"])), "unit": unit,
                   "baseline": describe_baseline(ep["baseline_method"], ep["baseline_points"])}
    driver = None
    if ep["metric"] == "cost":
        same = scores.filter(pl.col("day") == ep["peak_day"], *(pl.col(k) == v for k, v in key.items()))
        usage = next((r for m in ("gpu_hours", "egress_gb") for r in same.filter(pl.col("metric") == m).iter_rows(named=True)), None)
        driver, detail = name_driver(ep, usage)
        explanation.update(driver=driver, **detail)
        days = baseline_days(ep["baseline_method"], ep["peak_day"], rules)
        billed = series.filter(pl.col("metric") == "cost", pl.col("day").is_in(days), pl.col("value").is_not_null(),
                               *(pl.col(k) == v for k, v in key.items())).height
        rows = fetch_dicts(conn, (SQL_DIR / "queries" / "anomaly_contributors.sql").read_text(),
                           {**key, "day": ep["peak_day"], "baseline_days": days, "baseline_count": billed})
        contributors: dict[str, list] = {}
        for r in rows:
            contributors.setdefault(r["dimension"], []).append(
                {"value": r["value"], "actual": str(r["actual"]), "expected": str(r["expected"]), "change": str(r["change"])})
        explanation["contributors"] = contributors
    explanation["summary"] = summarise(ep, unit, driver, explanation.get("contributors", {}))
    return {"unit": unit, "driver": driver, "summary": explanation["summary"], "explanation": explanation}


def summarise(ep: dict, unit: str, driver: str | None, contributors: dict) -> str:
    actual, expected = money(ep["actual"]), money(ep["expected"])
    change = actual - expected
    label = {"cost": "cost", "gpu_hours": "GPU-hours", "egress_gb": "egress"}[ep["metric"]]
    text = (f"{ep['service']} ({ep['provider']} {ep['sub_account']}, {ep['phase']}): {label} {actual:,.2f} {unit} "
            f"on {ep['peak_day']} against {expected:,.2f} expected ({change:+,.2f}; "
            f"{describe_baseline(ep['baseline_method'], ep['baseline_points'])})")
    if driver:
        text += f"; moved: {driver}"
    top = (contributors.get("resource") or [None])[0]
    if top:
        # Against the resource's mean over the baseline days, not the series' median: the two
        # changes need not match, even for a series of one resource.
        text += f"; top resource {top['value']} {Decimal(top['change']):+,.2f} {unit} against its baseline mean"
    return text


UPDATE_SCHEMA = pa.schema([
    ("anomaly_id", pa.string()), ("status", pa.string()), ("resolution", pa.string()), ("metric", pa.string()),
    ("unit", pa.string()), *[(k, pa.string()) for k in KEY], ("kind", pa.string()), ("direction", pa.string()),
    ("first_day", pa.date32()), ("last_day", pa.date32()), ("days", pa.int32()), ("peak_day", pa.date32()),
    ("resolved_on", pa.date32()), ("actual", pa.decimal128(38, 10)), ("expected", pa.decimal128(38, 10)),
    ("change", pa.decimal128(38, 10)), ("impact", pa.decimal128(38, 10)), ("z", pa.float64()),
    ("baseline_method", pa.string()), ("baseline_points", pa.int32()), ("driver", pa.string()), ("summary", pa.string()),
    ("explanation", pa.string()), ("first_detected_at", pa.timestamp("us", tz="UTC")),
    ("resolved_at", pa.timestamp("us", tz="UTC")), ("last_scored_at", pa.timestamp("us", tz="UTC")),
    ("daily", pa.string()),
])


@dataclass
class DetectionResult:
    window: Window
    scored_rows: int
    flagged: int
    suppressed: int
    new: list[str]
    resolved_by_restatement: list[str]
    skipped: str | None = None  # why findings.anomalies was left as it was


def detect(conn, as_of: date, rules: AnomalyRules, planned: list[PlannedRun], currency: str,
           lag_days: int = 2, rescore_days: int = 30, now: datetime | None = None) -> DetectionResult:
    """Re-score the window ending `lag_days` before `as_of` and merge the episodes into
    findings.anomalies, in one transaction with findings.anomaly_scores and the run's record."""
    now = now or datetime.now(UTC)
    window = window_for(as_of, lag_days, rescore_days)
    conn.execute(sql_text("findings.anomaly_runs"))
    conn.execute(sql_text("findings.anomalies").split("-- merge")[0])  # the table, before reading it
    for column in ("actual", "expected", "change", "impact"):  # DECIMAL(18, 6) in older warehouses
        widen_column(conn, "findings.anomalies", column, "DECIMAL(38, 10)")
    latest = fetch_value(conn, "SELECT max(scored_day) FROM findings.anomaly_runs")
    if latest is not None and window.scored_day < latest:
        return DetectionResult(window, 0, 0, 0, [], [], skipped=(
            f"scored day {window.scored_day} is before the latest scored day {latest}: anomalies only move forward"))
    rules = rules_in_currency(conn, rules, currency, window.scored_day)
    series = load_series(conn)
    scores = score(series, window.days, rules, planned)
    fresh = [{**ep, **explain(conn, ep, scores, series, rules, currency)} for ep in episodes(scores)]
    existing = [_stored(a) for a in fetch_dicts(conn, "SELECT * FROM findings.anomalies")]
    updates = reconcile(existing, fresh, (window.first_day, window.scored_day), now)
    alerted = scores.filter(pl.col("flagged"))
    flagged = alerted.filter(pl.col("suppressed_by").is_null()).height
    suppressed = alerted.height - flagged
    # The first run over a history is a backfill: it finds everything at once, and alerts only on
    # what starts on the scored day. Later runs alert on every episode they find first.
    backfill = latest is None
    new = [u["anomaly_id"] for u in updates
           if u["first_detected_at"] == now and (not backfill or u["first_day"] == window.scored_day)]
    restated = [u["anomaly_id"] for u in updates if u["resolution"] == "restated" and u["resolved_at"] == now]
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.register("anomaly_scores_input", scores.with_columns(pl.col(pl.Int128).cast(pl.Decimal(38, 0))).to_arrow())  # Arrow has no Int128
        run_sql_file(conn, "findings.anomaly_scores", {"reporting_currency": currency})
        conn.register("anomaly_updates", pa.Table.from_pylist([_update_row(u) for u in updates], schema=UPDATE_SCHEMA))
        conn.execute(sql_text("findings.anomalies"))
        conn.execute("INSERT INTO findings.anomaly_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     [now, as_of, window.first_day, window.scored_day, flagged, suppressed, len(new), len(restated)])
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise
    finally:
        for name in ("anomaly_scores_input", "anomaly_updates"):
            conn.unregister(name)
    return DetectionResult(window, scores.height, flagged, suppressed, new, restated)


def _stored(row: dict) -> dict:
    """A findings.anomalies row as `reconcile` reads it: its alerted days parsed."""
    daily = json.loads(row["daily"]) if isinstance(row.get("daily"), str) else (row.get("daily") or [])
    return {**row, "daily": [{**d, "day": date.fromisoformat(d["day"])} for d in daily]}


def _update_row(row: dict) -> dict:
    """One findings.anomalies row: rebuilt rows carry micro-units, stored ones decimals."""
    out = {name: row.get(name) for name in UPDATE_SCHEMA.names}
    for name in ("actual", "expected", "impact"):
        value = row.get(name)
        out[name] = value if isinstance(value, Decimal) else money(value)
    out["change"] = None if out["actual"] is None or out["expected"] is None else out["actual"] - out["expected"]
    if isinstance(out["explanation"], dict):
        out["explanation"] = json.dumps(out["explanation"], default=str)
    out["daily"] = json.dumps(row.get("daily") or [], default=str)
    return out


