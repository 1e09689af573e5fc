"""Anomaly detection on synthetic series: each gate, each kind, planned runs, episodes, and the
merge across runs that keeps restated anomalies as resolved."""

from datetime import UTC, date, datetime, timedelta

import polars as pl
import pytest

from models.anomalies import AnomalyRules, episodes, load_planned_runs, reconcile, score

START = date(2026, 8, 1)
SERIES = {"provider": "AWS", "sub_account": "acct-1", "service": "Amazon EC2", "phase": "pretraining"}


def frame(values: list[float | None], metric: str = "cost", **key) -> pl.DataFrame:
    """A daily series from START, values in units (None: the day is missing)."""
    return pl.DataFrame([{"day": START + timedelta(days=i), **{**SERIES, **key}, "metric": metric,
                          "value": None if v is None else int(round(v * 1_000_000))} for i, v in enumerate(values)],
                        schema_overrides={"value": pl.Int64})


def wobble(n: int, level: float = 100.0) -> list[float]:
    """A clean series: a steady level with a small deterministic weekly wobble."""
    return [level + (i % 7 - 3) * 0.8 for i in range(n)]


def last_days(n_total: int, n: int = 30) -> list[date]:
    return [START + timedelta(days=i) for i in range(n_total - n, n_total)]


def flagged(scores: pl.DataFrame) -> list[tuple]:
    return [(r["day"], r["kind"], r["direction"]) for r in scores.filter(pl.col("flagged")).iter_rows(named=True)]


def test_a_clean_series_yields_no_anomaly():
    scores = score(frame(wobble(90)), last_days(90))
    assert scores.height == 30
    assert flagged(scores) == []
    assert set(scores["baseline_method"]) == {"same_weekday"}


def test_a_spike_is_flagged_with_its_baseline_and_gates():
    values = wobble(90)
    values[80] = 180.0
    scores = score(frame(values), last_days(90))
    spike_day = START + timedelta(days=80)
    assert flagged(scores) == [(spike_day, "changed", "up")]
    row = scores.filter(pl.col("day") == spike_day).row(0, named=True)
    # Same weekday over 8 weeks: all equal to the wobble of that weekday.
    assert row["baseline_method"] == "same_weekday" and row["baseline_points"] == 8
    assert row["expected"] == pytest.approx(wobble(90)[80] * 1_000_000)
    assert row["gate_z"] and row["gate_absolute"] and row["gate_relative"]


@pytest.mark.parametrize("change, gate", [(9.0, "gate_absolute"), (15.0, "gate_relative")])
def test_each_gate_can_hold_an_alert_back(change, gate):
    # On a level of 100: +9 is under the floor of 10; +15 is over it but only 15 % (< 20 %).
    values = wobble(90, 100.0)
    values[80] += change
    row = score(frame(values), last_days(90)).filter(pl.col("day") == START + timedelta(days=80)).row(0, named=True)
    assert row["gate_z"]  # far outside the wobble
    assert not row[gate] and not row["flagged"]


def test_the_gates_are_configurable():
    values = wobble(90)
    values[80] += 15.0
    rules = AnomalyRules(min_relative=0.10)
    assert flagged(score(frame(values), last_days(90), rules)) == [(START + timedelta(days=80), "changed", "up")]


def test_the_floor_scales_with_the_day_total():
    """0.5 % of a large day's total outweighs the fixed floor: a change of 12 on a day of 10,000 passes
    the floor of 10 but not 0.5 % of the total (50)."""
    small = wobble(90, 40.0)
    small[80] += 12.0
    big = frame(wobble(90, 9960.0), service="Big")
    scores = score(pl.concat([frame(small), big]), last_days(90))
    row = scores.filter(pl.col("service") == "Amazon EC2", pl.col("day") == START + timedelta(days=80)).row(0, named=True)
    assert row["min_change"] == pytest.approx(0.005 * (52.0 + 9960.0 + (80 % 7 - 3) * 1.6) * 1_000_000, rel=1e-3)
    assert not row["gate_absolute"] and not row["flagged"]


def test_new_spend_on_a_series_with_too_little_history_and_removed_spend():
    new = frame([0.0] * 3 + [50.0], service="New")
    scores = score(new, [START + timedelta(days=3)])
    assert flagged(scores) == [(START + timedelta(days=3), "new", "up")]
    assert scores["baseline_method"].to_list() == ["new_spend_rule"]
    # A series with some history but too little for a baseline is not judged.
    short = score(frame([10.0, 12.0, 11.0, 90.0]), [START + timedelta(days=3)])
    assert short["baseline_method"].to_list() == ["insufficient_history"] and flagged(short) == []
    # Spend that stops is 'removed'.
    values = wobble(90)
    values[85:] = [0.0] * 5
    assert flagged(score(frame(values), last_days(90)))[0] == (START + timedelta(days=85), "removed", "down")


def test_a_missing_day_is_not_a_zero():
    values = wobble(90)
    values[80] = None  # the export for that day has not arrived
    scores = score(frame(values), last_days(90))
    assert START + timedelta(days=80) not in scores["day"].to_list()
    assert flagged(scores) == []


def test_falls_back_to_the_28_day_median_with_short_history():
    values = wobble(20)
    values[19] = 200.0
    scores = score(frame(values), [START + timedelta(days=19)])
    assert scores["baseline_method"].to_list() == ["rolling_28d"]
    assert flagged(scores) == [(START + timedelta(days=19), "changed", "up")]


def test_planned_runs_suppress_their_spend_and_its_end(tmp_path):
    values = [10.0] * 60 + [500.0] * 10 + [10.0] * 20
    calendar = tmp_path / "planned.yaml"
    calendar.write_text(f"planned_runs:\n  - name: big-run\n    start: {START + timedelta(days=60)}\n"
                        f"    end: {START + timedelta(days=69)}\n    phase: pretraining\n")
    planned = load_planned_runs(calendar)
    plain = score(frame(values), last_days(90, 40))
    assert len(flagged(plain)) > 0
    suppressed = score(frame(values), last_days(90, 40), planned=planned)
    alerted = suppressed.filter(pl.col("flagged") & pl.col("suppressed_by").is_null())
    assert alerted.height == 0
    assert set(suppressed.filter(pl.col("flagged"))["suppressed_by"]) == {"big-run"}
    # Another phase's spike in the same span is not covered by the calendar entry.
    other = score(frame(values, phase="inference"), last_days(90, 40), planned=planned)
    assert other.filter(pl.col("flagged") & pl.col("suppressed_by").is_null()).height > 0


def test_a_malformed_calendar_is_refused_by_name(tmp_path):
    bad = tmp_path / "planned.yaml"
    bad.write_text("planned_runs:\n  - name: x\n    start: 2026-09-10\n")
    with pytest.raises(ValueError, match="planned run 1"):
        load_planned_runs(bad)
    bad.write_text("planned_runs:\n  - name: x\n    start: 2026-09-10\n    end: 2026-09-01\n")
    with pytest.raises(ValueError, match="ends"):
        load_planned_runs(bad)
    bad.write_text("planned_runs:\n  - name: x\n    start: 2026-09-10\n    end: 2026-09-11\n    team: ml\n")
    with pytest.raises(ValueError, match="unknown fields"):
        load_planned_runs(bad)


def test_episodes_track_duration_and_resolution():
    values = wobble(90)
    for i in (75, 76, 77):
        values[i] = 200.0
    eps = episodes(score(frame(values), last_days(90)))
    assert len(eps) == 1
    ep = eps[0]
    assert (ep["first_day"], ep["last_day"], ep["days"]) == (START + timedelta(days=75), START + timedelta(days=77), 3)
    assert ep["resolved_on"] == START + timedelta(days=78)
    # Still anomalous on the last scored day: open.
    values[85:] = [250.0] * 5
    open_ep = [e for e in episodes(score(frame(values), last_days(90))) if e["first_day"] == START + timedelta(days=85)][0]
    assert open_ep["resolved_on"] is None and open_ep["days"] == 5


def test_a_new_series_one_day_spike_ends_when_its_spend_goes_back_to_nothing():
    """A series that spends once (a dataset pull) is flagged by the new-spend rule; the days after it
    have that day in their short history and no baseline, but their zero is what the series was
    before: the episode ends on the first of them. New spend that goes on stays open."""
    days = [START + timedelta(days=i) for i in range(12)]
    spike = frame([0.0] * 2 + [27.0] + [0.0] * 9, service="AWS Data Transfer")
    scores = score(spike, days)
    assert set(scores.filter(pl.col("day") > days[2])["baseline_method"]) == {"insufficient_history"}
    (ep,) = episodes(scores)
    assert (ep["kind"], ep["first_day"], ep["last_day"], ep["resolved_on"]) == ("new", days[2], days[2], days[3])
    ongoing = frame([0.0] * 2 + [27.0] * 10, service="New service")
    (ep,) = episodes(score(ongoing, days))
    assert (ep["first_day"], ep["resolved_on"]) == (days[2], None)


def test_reconcile_keeps_continuing_episodes_and_resolves_restated_ones():
    now1 = datetime(2026, 10, 1, 6, tzinfo=UTC)
    values = wobble(90)
    values[80] = 200.0
    window = (START + timedelta(days=60), START + timedelta(days=89))
    first = reconcile([], episodes(score(frame(values), last_days(90))), window, now1)
    assert [(r["status"], r["resolution"], r["first_detected_at"]) for r in first] == [("resolved", "back_to_normal", now1)]
    stored = [{**r, "actual": r["actual"], "expected": r["expected"]} for r in first]
    # Next run: the same data, one day later. The episode is the same anomaly, untouched in id.
    now2 = now1 + timedelta(days=1)
    again = reconcile(stored, episodes(score(frame(values), last_days(90))), window, now2)
    assert [r["anomaly_id"] for r in again] == [first[0]["anomaly_id"]]
    assert again[0]["first_detected_at"] == now1
    # The bill is restated: the spike is gone. The anomaly is kept, resolved as restated.
    restated = wobble(90)
    gone = reconcile(stored, episodes(score(frame(restated), last_days(90))), window, now2)
    assert [(r["anomaly_id"], r["status"], r["resolution"], r["resolved_at"]) for r in gone] == [
        (first[0]["anomaly_id"], "resolved", "restated", now2)]


def run(values: list[float], window_end: int, existing: list[dict], now: datetime, n: int = 30) -> list[dict]:
    """One detection run: score the n days up to `window_end` and reconcile with what is stored."""
    days = [START + timedelta(days=i) for i in range(window_end - n + 1, window_end + 1)]
    return reconcile(existing, episodes(score(frame(values[:window_end + 1]), days)), (days[0], days[-1]), now)


def store(existing: list[dict], updates: list[dict]) -> list[dict]:
    by_id = {a["anomaly_id"]: a for a in existing}
    by_id.update({u["anomaly_id"]: u for u in updates})
    return list(by_id.values())


def test_an_episode_longer_than_the_window_keeps_its_history_and_impact():
    values = wobble(120)
    for i in range(80, 90):
        values[i] = wobble(120)[i] + 100.0  # ten days, +100 each
    t1 = datetime(2026, 11, 1, tzinfo=UTC)
    stored = store([], run(values, 85, [], t1))
    assert [(a["first_day"], a["days"], a["resolved_on"]) for a in stored] == [(START + timedelta(days=80), 6, None)]
    # The window slides past the first days of the episode: they are kept, not re-scored.
    stored = store(stored, run(values, 85 + 30 - 2, stored, t1 + timedelta(days=1)))
    (a,) = stored
    assert (a["first_day"], a["last_day"], a["days"], a["status"]) == (START + timedelta(days=80), START + timedelta(days=89), 10, "resolved")
    assert a["impact"] == pytest.approx(10 * 100_000_000, rel=1e-3) and a["first_detected_at"] == t1


def test_restating_part_of_an_episode_then_spiking_again_never_duplicates_an_id():
    values = wobble(100)
    for i in range(60, 66):
        values[i] = 400.0
    t = datetime(2026, 11, 1, tzinfo=UTC)
    stored = store([], run(values, 75, [], t))
    first_id = stored[0]["anomaly_id"]
    fixed = list(values)
    fixed[60:63] = wobble(100)[60:63]  # the provider restates three of the days
    stored = store(stored, run(fixed, 76, stored, t + timedelta(days=1)))
    assert [(a["anomaly_id"], a["first_day"], a["days"]) for a in stored] == [(first_id, START + timedelta(days=63), 3)]
    again = list(fixed)
    again[60:62] = [400.0, 400.0]  # and restates two of them back
    updates = run(again, 77, stored, t + timedelta(days=2))
    assert len({u["anomaly_id"] for u in updates}) == len(updates)
    stored = store(stored, updates)
    assert sorted((a["first_day"], a["days"]) for a in stored) == [(START + timedelta(days=60), 2), (START + timedelta(days=63), 3)]


def test_an_episode_that_began_before_the_window_is_cut_back_when_its_window_days_are_restated():
    values = wobble(100)
    for i in range(55, 66):
        values[i] = 400.0
    t = datetime(2026, 11, 1, tzinfo=UTC)
    stored = store([], run(values, 63, [], t))  # open: days 55..63
    fixed = list(values)
    fixed[58:66] = wobble(100)[58:66]
    stored = store(stored, run(fixed, 87, stored, t + timedelta(days=1)))  # window starts at day 58
    (a,) = stored
    assert (a["first_day"], a["last_day"], a["status"], a["resolution"], a["resolved_on"]) == (
        START + timedelta(days=55), START + timedelta(days=57), "resolved", "back_to_normal", START + timedelta(days=58))


def test_the_first_billed_day_is_not_new_spend():
    scores = score(frame([500.0] + wobble(10)), [START])
    assert scores["baseline_method"].to_list() == ["insufficient_history"] and flagged(scores) == []


def test_a_new_weekday_only_workload_is_one_anomaly_not_one_each_monday():
    """Spend that starts on a Monday and runs on weekdays only: its weekends are quiet (nothing
    spent, nothing expected) and pause the episode instead of ending it, so daily runs raise one
    anomaly, not a new one each Monday until the same-weekday baseline catches up (four before)."""
    start = (date(2026, 9, 28) - START).days  # a Monday
    values = [0.0] * 110
    for i in range(start, 110):
        if (START + timedelta(days=i)).weekday() < 5:
            values[i] = 80.0
    stored: list[dict] = []
    for end in range(start - 2, 110):
        stored = store(stored, run(values, end, stored, datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=end)))
    assert len(stored) == 1
    (a,) = stored
    assert (a["kind"], a["direction"], a["first_day"]) == ("new", "up", START + timedelta(days=start))
    assert a["days"] == 20  # four weeks of weekdays alerted against a same-weekday median of 0; none of the weekends


def test_a_one_day_spike_on_a_series_of_nothing_ends_the_next_day_unless_a_weekend_follows():
    """After a spike, days of nothing against nothing expected are quiet. A Tuesday's spike is over on
    Wednesday; a Friday's stays open over the weekend (a weekday-only workload may go on on Monday)
    and, nothing on Monday, resolved on the Saturday."""
    def spike_on(day: int, through: int):
        values = [0.0] * day + [500.0] + [0.0] * (through - day)
        days = [START + timedelta(days=i) for i in range(day - 20, through + 1)]
        (ep,) = episodes(score(frame(values), days))
        return ep["first_day"], ep["days"], ep["resolved_on"]

    tuesday = (date(2026, 10, 13) - START).days
    assert spike_on(tuesday, tuesday + 1) == (START + timedelta(days=tuesday), 1, START + timedelta(days=tuesday + 1))
    friday = (date(2026, 10, 16) - START).days
    assert spike_on(friday, friday + 2) == (START + timedelta(days=friday), 1, None)  # Sunday: still open
    assert spike_on(friday, friday + 3) == (START + timedelta(days=friday), 1, START + timedelta(days=friday + 1))


def test_a_long_easter_weekend_does_not_split_a_new_weekday_workload():
    """Good Friday to Easter Monday: four quiet days between its Thursday and its Tuesday."""
    start = (date(2026, 9, 28) - START).days
    holidays = {date(2026, 10, 9), date(2026, 10, 12)}
    n = start + 28
    values = [0.0] * n
    for i in range(start, n):
        day = START + timedelta(days=i)
        if day.weekday() < 5 and day not in holidays:
            values[i] = 80.0
    stored: list[dict] = []
    for end in range(start - 2, n):
        stored = store(stored, run(values, end, stored, datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=end)))
    assert [(a["kind"], a["first_day"]) for a in stored] == [("new", START + timedelta(days=start))]
