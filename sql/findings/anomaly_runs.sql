-- findings.anomaly_runs: one row per anomaly detection run: the run's date, the window it
-- re-scored and what it found. Runs only move forward: a run whose scored day is before the
-- latest one recorded here leaves findings.anomalies as it is.
CREATE TABLE IF NOT EXISTS findings.anomaly_runs (
    run_at TIMESTAMPTZ NOT NULL,
    as_of DATE NOT NULL,
    first_day DATE NOT NULL,
    scored_day DATE NOT NULL,
    flagged_series_days INTEGER,
    suppressed_series_days INTEGER,
    new_anomalies INTEGER,
    resolved_by_restatement INTEGER
);
