"""Spend anomalies: a robust, explainable baseline for each daily series, gates, and episodes.

A series is one provider × sub-account × service × phase, for one metric: cost (reporting
currency), GPU-hours or egress GB. Values travel as integer micro-units (Int128: a 10^12 cost is 10^18 micro-units, sums go past Int64), so medians of
money are exact and nothing here rounds an amount.

- Baseline: the median of the same weekday over the last 4–8 weeks; with fewer than
  `weekday_min_weeks` such days, the median of the last 28 days. Scale: 1.4826 × the median
  absolute deviation (MAD) of the same points.
- A day is anomalous when every gate passes: robust z ≥ `min_z`; absolute change ≥ max(the
  metric's floor, `min_day_share` of the day's total of that metric); relative change ≥
  `min_relative`. A flat series has MAD 0: any change is then infinitely unusual by z, and the
  absolute and relative gates decide alone.
- Too little history for either baseline: only the "new spend" rule applies (a series that never
  spent before, now above the floor).
- Planned runs (a calendar of spans) make their spend expected, and its going away after the end.

Pure functions over polars frames; `pipelines/analysis/anomalies.py` reads and writes the warehouse.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

import polars as pl
import yaml

KEY = ["provider", "sub_account", "service", "phase"]
METRICS = ("cost", "gpu_hours", "egress_gb")
MICROS = 1_000_000
Z_CAP = 1e6  # a flat baseline gives an infinite z; stored capped so JSON and charts can carry it
MAD_TO_SIGMA = 1.4826
SERIES_PER_BATCH = 2000  # series whose baselines are computed together (bounds memory)


@dataclass(frozen=True)
class AnomalyRules:
    min_z: float = 3.5
    # Smallest absolute change worth an alert, per metric (money, GPU-hours, GB).
    floors: dict[str, float] = field(default_factory=lambda: {"cost": 10.0, "gpu_hours": 8.0, "egress_gb": 50.0})
    # The currency the cost floor is stated in; None: the reporting currency the series are in.
    # pipelines/analysis/anomalies.py converts it before scoring.
    cost_floor_currency: str | None = None
    min_day_share: float = 0.005
    min_relative: float = 0.20
    weekday_min_weeks: int = 4
    weekday_max_weeks: int = 8
    rolling_days: int = 28
    rolling_min_days: int = 14

    def floor_micros(self, metric: str) -> int:
        return int(round(self.floors.get(metric, 0.0) * MICROS))


@dataclass(frozen=True)
class PlannedRun:
    """A span of expected spend: matching series are not alerted from `start` to `end`, nor for
    falling back afterwards (while the baseline still holds the run's spend)."""

    name: str
    start: date
    end: date
    provider: str | None = None
    sub_account: str | None = None
    service: str | None = None
    phase: str | None = None

    def condition(self, memory_days: int) -> pl.Expr:
        # During the run any change is expected; after it, its spend going away is expected for as
        # long as the baseline still remembers it.
        during = pl.col("day").is_between(self.start, self.end)
        after = pl.col("day").is_between(self.end + timedelta(days=1), self.end + timedelta(days=memory_days)) & (
            pl.col("direction") == "down")
        cond = during | after
        for column in KEY:
            wanted = getattr(self, column)
            if wanted is not None:
                cond = cond & (pl.col(column).str.to_lowercase() == str(wanted).lower())
        return cond


def load_planned_runs(path: str | Path | None) -> list[PlannedRun]:
    """The planned-runs calendar (YAML: `planned_runs: [{name, start, end, provider?, sub_account?,
    service?, phase?}]`). A malformed entry is an error naming it: a silently ignored calendar
    would alert on every planned run."""
    if path is None:
        return []
    doc = yaml.safe_load(Path(path).read_text()) or {}
    runs = []
    for i, entry in enumerate(doc.get("planned_runs") or [], start=1):
        try:
            start, end = _as_date(entry["start"]), _as_date(entry["end"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: planned run {i} ({entry!r}) needs start and end dates (YYYY-MM-DD): {exc}") from exc
        if end < start:
            raise ValueError(f"{path}: planned run {i} ends ({end}) before it starts ({start})")
        unknown = set(entry) - {"name", "start", "end", "note", *KEY}
        if unknown:
            raise ValueError(f"{path}: planned run {i} has unknown fields {sorted(unknown)}; allowed: name, start, end, note, {', '.join(KEY)}")
        runs.append(PlannedRun(str(entry.get("name") or f"planned run {i}"), start, end,
                               **{k: (str(entry[k]) if entry.get(k) is not None else None) for k in KEY}))
    return runs


def _as_date(value) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value))


def score(series: pl.DataFrame, days: list[date], rules: AnomalyRules = AnomalyRules(),
          planned: list[PlannedRun] = ()) -> pl.DataFrame:
    """Score every series on each of `days` against its own history.

    `series`: day, provider, sub_account, service, phase, metric, value (Int128 micro-units; null
    = unknown). Returns one row per series, metric and scored day with the baseline, the gates
    and the verdict (`flagged`, `kind`, `direction`, `suppressed_by`).
    """
    known = series.lazy().filter(pl.col("value").is_not_null())
    # Each series gets an integer id, so the day × history pairs carry numbers, not key strings.
    keys = known.select([*KEY, "metric"]).unique(maintain_order=True).with_row_index("sid").collect()
    known = known.join(keys.lazy(), on=[*KEY, "metric"]).select("sid", "day", "value").collect()
    targets = known.filter(pl.col("day").is_in(days)).rename({"value": "actual"})
    # Baselines a batch of series at a time: the day × history pairs of all series at once would
    # hold rescore days × 56 rows per series in memory.
    batch = (pl.col("sid") // SERIES_PER_BATCH).alias("batch")
    history_batches = known.with_columns(batch).partition_by("batch", as_dict=True, include_key=False)
    baselines = pl.concat([_baselines(part, history_batches[key], rules)
                           for key, part in targets.with_columns(batch).partition_by("batch", as_dict=True, include_key=False).items()]
                          or [_baselines(targets, known, rules)])
    scored = targets.lazy().join(baselines.lazy(), on=["sid", "day"], how="left").join(keys.lazy(), on="sid")

    use_weekday = pl.col("wd_n").fill_null(0) >= rules.weekday_min_weeks
    use_rolling = pl.col("roll_n").fill_null(0) >= rules.rolling_min_days
    # Never spent: history was looked at and was all zero. No history at all (a provider's first
    # billed day) says nothing either way.
    never_spent = pl.col("history_max").is_not_null() & (pl.col("history_max") == 0)
    scored = scored.with_columns(
        baseline_method=pl.when(use_weekday).then(pl.lit("same_weekday"))
        .when(use_rolling).then(pl.lit("rolling_28d"))
        .when(never_spent).then(pl.lit("new_spend_rule"))
        .otherwise(pl.lit("insufficient_history")),
        baseline_points=pl.when(use_weekday).then("wd_n").when(use_rolling).then("roll_n").otherwise(0).cast(pl.Int64),
        expected=pl.when(use_weekday).then("wd_median").when(use_rolling).then("roll_median")
        .when(never_spent).then(0.0).otherwise(None),
        mad=pl.when(use_weekday).then("wd_mad").when(use_rolling).then("roll_mad").when(never_spent).then(0.0).otherwise(None),
    )
    day_total = pl.col("actual").abs().sum().over(["metric", "day"])
    change = pl.col("actual") - pl.col("expected")
    scale = pl.max_horizontal(pl.col("mad") * MAD_TO_SIGMA, pl.lit(1.0))  # one micro-unit: never divide by 0
    floor = pl.col("metric").replace_strict({m: rules.floor_micros(m) for m in METRICS}, default=0, return_dtype=pl.Int64)
    scored = scored.with_columns(
        day_total=day_total,
        change=change,
        z=(change / scale).clip(-Z_CAP, Z_CAP),
        relative_change=pl.when(pl.col("expected") != 0).then(change / pl.col("expected").abs())
        .when(change != 0).then(pl.lit(Z_CAP)).otherwise(0.0).clip(-Z_CAP, Z_CAP),
        min_change=pl.max_horizontal(floor.cast(pl.Float64), day_total * rules.min_day_share),
    )
    scored = scored.with_columns(
        gate_z=pl.col("z").abs() >= rules.min_z,
        gate_absolute=pl.col("change").abs() >= pl.col("min_change"),
        gate_relative=pl.col("relative_change").abs() >= rules.min_relative,
    ).with_columns(
        flagged=(pl.col("expected").is_not_null() & pl.col("gate_z") & pl.col("gate_absolute") & pl.col("gate_relative"))
        .fill_null(False),
        direction=pl.when(pl.col("change") >= 0).then(pl.lit("up")).otherwise(pl.lit("down")),
        kind=pl.when(never_spent & (pl.col("actual") != 0)).then(pl.lit("new"))
        .when((pl.col("actual") == 0) & (pl.col("expected") != 0)).then(pl.lit("removed"))
        .otherwise(pl.lit("changed")),
    ).with_columns(suppressed_by=_suppression(planned, max(rules.weekday_max_weeks * 7, rules.rolling_days)))
    return (scored.select([
        "day", *KEY, "metric", "actual", "expected", "baseline_method", "baseline_points", "mad", "z", "change",
        "relative_change", "day_total", "min_change", "gate_z", "gate_absolute", "gate_relative", "flagged", "kind",
        "direction", "suppressed_by"])
        .sort(["day", "metric", *KEY]).collect())


def _baselines(targets: pl.DataFrame, known: pl.DataFrame, rules: AnomalyRules) -> pl.DataFrame:
    """Per series and scored day: count, median, MAD and largest magnitude of the same-weekday
    points and of the rolling points, and the largest magnitude of all history looked at."""
    history = known.lazy().select("sid", pl.col("day").alias("h_day"), pl.col("value").alias("h"))
    lookback = rules.weekday_max_weeks * 7
    pairs = (targets.lazy().join(history, on="sid")
             .with_columns(lag=(pl.col("day") - pl.col("h_day")).dt.total_days())
             .filter(pl.col("lag").is_between(1, max(lookback, rules.rolling_days))))
    same_weekday = (pl.col("lag") % 7 == 0) & (pl.col("lag") <= lookback)
    rolling = pl.col("lag") <= rules.rolling_days

    def median_mad(cond: pl.Expr, prefix: str) -> list[pl.Expr]:
        points = pl.col("h").filter(cond)
        return [cond.sum().alias(f"{prefix}_n"), points.median().alias(f"{prefix}_median"),
                (points - points.median()).abs().median().alias(f"{prefix}_mad")]

    return pairs.group_by(["sid", "day"]).agg(
        *median_mad(same_weekday, "wd"), *median_mad(rolling, "roll"),
        pl.col("h").abs().max().alias("history_max")).collect()


def _suppression(planned, memory_days: int) -> pl.Expr:
    expr = pl.lit(None, dtype=pl.String)
    for run in reversed(list(planned)):  # the first matching run of the calendar names it
        expr = pl.when(run.condition(memory_days)).then(pl.lit(run.name)).otherwise(expr)
    return expr


QUIET_BRIDGE_DAYS = 4  # a weekend, or a long one (Good Friday to Easter Monday): quiet days an episode may pause over


def episodes(scores: pl.DataFrame) -> list[dict]:
    """Consecutive alerted days of one series in one direction, as episodes.

    An episode is open while its last day is the series' last scored day; otherwise it resolved
    on the next scored day (back to normal). `daily` keeps each alerted day's actual, expected and
    z, so an episode longer than one re-score window keeps its whole history.

    A day without a baseline (too little history) is not judged, so it neither alerts nor ends an
    episode, except a day of no spend at all: after a one-day spike of a new series (expected 0,
    the new-spend rule) the next days have the spike in their short history and no baseline, and
    their zero is what the series was before it. Without them such a spike stayed open for weeks.

    A quiet day (nothing spent, nothing expected: a weekend of a weekday-only workload) pauses an
    episode rather than ending it: up to QUIET_BRIDGE_DAYS of them between alerted days of the same
    direction join one episode, and at the series' end a weekend after a Friday or Saturday keeps it
    open (any other quiet day ends it: a one-day spike on a Tuesday is over on Wednesday). Without
    it a new weekday-only workload was a new anomaly every Monday until its baseline caught up.
    """
    group = [*KEY, "metric"]
    alerted = pl.col("flagged") & pl.col("suppressed_by").is_null()
    judged_or_nothing = pl.col("expected").is_not_null() | (pl.col("actual") == 0)
    quiet = ~alerted & (pl.col("actual") == 0) & (pl.col("expected") == 0)
    frame = (scores.filter(judged_or_nothing).sort([*group, "day"])
             .with_columns(state=pl.when(alerted).then(pl.when(pl.col("direction") == "up").then(1).otherwise(-1)).otherwise(0),
                           quiet=quiet)
             # The days and states of the nearest days around each quiet stretch that are not quiet.
             .with_columns(loud_day=pl.when(~pl.col("quiet")).then(pl.col("day")),
                           loud_state=pl.when(~pl.col("quiet")).then(pl.col("state")))
             .with_columns(prev_day=pl.col("loud_day").forward_fill().over(group),
                           prev_state=pl.col("loud_state").forward_fill().over(group),
                           next_day_loud=pl.col("loud_day").backward_fill().over(group),
                           next_state=pl.col("loud_state").backward_fill().over(group),
                           series_start=pl.col("day").min().over(group),
                           series_end=pl.col("day").max().over(group),
                           loud_before=pl.col("loud_day").shift(1).forward_fill().over(group)))
    gap = (pl.col("next_day_loud") - pl.col("prev_day")).dt.total_days()
    tail = (pl.col("series_end") - pl.col("prev_day")).dt.total_days()
    last_loud_weekday = pl.col("prev_day").dt.weekday()  # ISO: Friday 5, Sunday 7
    weekend_tail = (last_loud_weekday >= 5) & (last_loud_weekday + tail <= 7)
    paused = pl.col("quiet") & (pl.col("prev_state") != 0) & (
        ((pl.col("next_state") == pl.col("prev_state")) & (gap <= QUIET_BRIDGE_DAYS + 1))
        | (pl.col("next_state").is_null() & weekend_tail))
    frame = (frame.with_columns(paused=paused.fill_null(False))
             .with_columns(effective=pl.when(pl.col("paused")).then(pl.col("prev_state")).otherwise(pl.col("state")))
             .with_columns(run=(pl.col("effective") != pl.col("effective").shift(1)).fill_null(True).cum_sum().over(group),
                           next_day=pl.col("day").shift(-1).over(group)))
    out = []
    for (_, rows) in frame.filter(pl.col("effective") != 0).group_by([*group, "run"], maintain_order=True):
        rows = rows.sort("day")
        last_row = rows.row(-1, named=True)
        rows = rows.filter(~pl.col("paused"))  # a paused day is not an alerted day
        first, last = rows.row(0, named=True), rows.row(-1, named=True)
        daily = [{"day": r["day"], "actual": int(r["actual"]), "expected": int(round(r["expected"])), "z": r["z"],
                  "baseline_method": r["baseline_method"], "baseline_points": r["baseline_points"]}
                 for r in rows.iter_rows(named=True)]
        # Paused at the series' end: still open. Else resolved on the day after its last alerted day.
        resolved_on = None if last_row["paused"] else last["next_day"]
        # Only quiet days before it since the first scored day: it may continue an episode stored
        # from before the scored days (reconcile).
        lead = (first["day"] - first["series_start"]).days
        reaches_back_to = first["series_start"] if first["loud_before"] is None and 0 < lead <= QUIET_BRIDGE_DAYS else None
        out.append({**{k: first[k] for k in group}, "direction": first["direction"], "kind": first["kind"],
                    "resolved_on": resolved_on, "reaches_back_to": reaches_back_to, "daily": daily, **from_daily(daily)})
    return out


def from_daily(daily: list[dict]) -> dict:
    """An episode's span, duration, peak day and impact (Σ actual − expected), from its days."""
    peak = max(daily, key=lambda d: (abs(d["actual"] - d["expected"]), d["day"]))
    return {"first_day": daily[0]["day"], "last_day": daily[-1]["day"], "days": len(daily), "peak_day": peak["day"],
            "actual": peak["actual"], "expected": peak["expected"], "z": peak["z"],
            "baseline_method": peak["baseline_method"], "baseline_points": peak["baseline_points"],
            "impact": sum(d["actual"] - d["expected"] for d in daily)}


def identity(episode: dict) -> tuple:
    return (episode["metric"], *(episode[k] for k in KEY), episode["direction"])


def new_anomaly_id(episode: dict, now: datetime) -> str:
    """Unique per detection: the series, direction and first day as first seen, and when."""
    text = "|".join(str(v) for v in (*identity(episode), episode["first_day"], now.isoformat()))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


EXPLAINED = ("unit", "driver", "summary", "explanation")


def reconcile(existing: list[dict], fresh: list[dict], window: tuple[date, date], now: datetime) -> list[dict]:
    """The anomalies table after a re-score of `window` (its first and last scored day).

    Stored rows carry `daily` (their alerted days). Days before the window were not re-scored and
    stay as they were; days inside it are replaced by this scoring.
    - A fresh episode overlapping or continuing a stored one of the same series and direction
      updates it (same anomaly_id). A stored episode that began before the window continues only
      into a fresh episode that starts on the window's first day, or after quiet days from it
      (`reaches_back_to`: a weekend at the window's start).
    - A stored episode inside the window that no fresh one matches disappeared on restatement:
      resolved, resolution 'restated' (kept, never deleted). If it began before the window, its
      days there stand: it is cut back to them and resolved back to normal.
    - A stored open episode that ended before the window with no scored days since: resolved,
      'no_data' (its series is no longer billed).
    - Other fresh episodes are new anomalies, detected now.
    Returns the rows to write (changed or new); untouched stored rows are not returned.
    """
    window_start, window_end = window
    live = [a for a in existing if a.get("resolution") != "restated"]
    matched: set[str] = set()
    rows = []
    for ep in fresh:
        # An episode after quiet days at the window's start (a weekend) reaches back to it.
        start = ep.get("reaches_back_to") or ep["first_day"]
        prior = next((a for a in live if a["anomaly_id"] not in matched and identity(a) == identity(ep)
                      and a["first_day"] <= ep["last_day"] and start <= a["last_day"] + timedelta(days=1)
                      and (a["first_day"] >= window_start or start == window_start)), None)
        status = {"status": "resolved" if ep["resolved_on"] else "open",
                  "resolution": "back_to_normal" if ep["resolved_on"] else None, "last_scored_at": now}
        if prior is None:
            rows.append({**ep, **status, "anomaly_id": new_anomaly_id(ep, now), "first_detected_at": now,
                         "resolved_at": now if ep["resolved_on"] else None})
            continue
        matched.add(prior["anomaly_id"])
        daily = [d for d in prior["daily"] if d["day"] < window_start] + ep["daily"]
        kind = prior["kind"] if daily[0]["day"] < ep["daily"][0]["day"] else ep["kind"]
        row = {**ep, **status, **from_daily(daily), "daily": daily, "kind": kind,
               "anomaly_id": prior["anomaly_id"], "first_detected_at": prior["first_detected_at"],
               "resolved_at": (prior.get("resolved_at") or now) if ep["resolved_on"] else None}
        if row["peak_day"] < window_start:  # the explanation of the peak stands from when it was scored
            row.update({k: prior.get(k) for k in EXPLAINED})
        rows.append(row)
    for a in live:
        if a["anomaly_id"] in matched or a["first_day"] > window_end:
            continue
        if a["last_day"] < window_start:
            if a["status"] == "open" and a["last_day"] < window_start - timedelta(days=1):
                rows.append({**a, "status": "resolved", "resolution": "no_data", "resolved_at": now, "last_scored_at": now})
            continue
        before = [d for d in a["daily"] if d["day"] < window_start]
        if before:
            rows.append({**a, **from_daily(before), "daily": before, "status": "resolved", "resolution": "back_to_normal",
                         "resolved_on": window_start, "resolved_at": now, "last_scored_at": now})
        else:
            rows.append({**a, "status": "resolved", "resolution": "restated", "resolved_at": now, "last_scored_at": now})
    ids = [r["anomaly_id"] for r in rows]
    assert len(ids) == len(set(ids)), "reconcile produced one anomaly twice"
    return rows
