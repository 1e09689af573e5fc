"""`make bench`: anomaly scoring at scale. Scores the last 30 days of N synthetic daily series
(120 days each, weekly pattern, noise, a spike injected in 0.1 % of them) and reports time, peak
memory and how many spikes were found. Rates, not pass/fail thresholds: machines are noisy.

    python -m tests.bench_anomalies [--series 10000]
"""

import argparse
import json
import resource
import time
from datetime import date, timedelta

import numpy as np
import polars as pl

from models.anomalies import episodes, score

DAYS = 120


def synthetic(series: int, seed: int = 3) -> tuple[pl.DataFrame, int]:
    rng = np.random.default_rng(seed)
    level = rng.uniform(50, 5000, series)
    weekly = 1 + 0.1 * np.sin(np.arange(DAYS) * 2 * np.pi / 7)
    values = level[:, None] * weekly[None, :] * rng.normal(1, 0.03, (series, DAYS))
    spiked = rng.choice(series, max(series // 1000, 1), replace=False)
    # A spike inside the scored window, material at the day's scale: 1 % of the day's total spend
    # (the gates ignore changes under 0.5 % of it).
    values[spiked, DAYS - 10] += 0.01 * values[:, DAYS - 10].sum()
    start = date(2026, 6, 1)
    frame = pl.DataFrame({
        "day": pl.Series([start + timedelta(days=i) for i in range(DAYS)] * series, dtype=pl.Date),
        "provider": "AWS",
        "sub_account": np.repeat(np.array([f"acct-{i % 50}" for i in range(series)]), DAYS),
        "service": np.repeat(np.array([f"svc-{i}" for i in range(series)]), DAYS),
        "phase": "inference",
        "metric": "cost",
        "value": np.round(values.ravel() * 1_000_000).astype(np.int64),
    })
    return frame, len(spiked)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=10_000)
    args = parser.parse_args()
    frame, spikes = synthetic(args.series)
    days = [date(2026, 6, 1) + timedelta(days=i) for i in range(DAYS - 30, DAYS)]
    t0 = time.perf_counter()
    scores = score(frame, days)
    t1 = time.perf_counter()
    found = episodes(scores)
    t2 = time.perf_counter()
    spike_day = date(2026, 6, 1) + timedelta(days=DAYS - 10)
    print(json.dumps({
        "series": args.series, "input_rows": frame.height, "scored_rows": scores.height,
        "score_s": round(t1 - t0, 2), "episodes_s": round(t2 - t1, 2),
        "scored_series_days_per_s": round(scores.height / (t1 - t0)),
        "spikes_injected": spikes, "spikes_found": sum(1 for e in found if e["first_day"] == spike_day),
        "other_episodes": sum(1 for e in found if e["first_day"] != spike_day),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }, indent=2))


if __name__ == "__main__":
    main()
