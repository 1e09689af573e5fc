-- findings.anomaly_scores: every series scored on every day of the last re-score window (the
-- 30 days up to the scored day), with its baseline, each gate and the verdict. Rebuilt each run
-- from models/anomalies.py's scores (anomaly_scores_input, values in micro-units).
--   baseline_method: same_weekday | rolling_28d | new_spend_rule | insufficient_history
--   flagged: every gate passed; suppressed_by: the planned run that made the spend expected.
CREATE OR REPLACE TABLE findings.anomaly_scores AS
SELECT
    day, provider, sub_account, service, phase, metric,
    $reporting_currency AS reporting_currency,
    from_micros(actual) AS actual,
    from_micros(round(expected)) AS expected,
    from_micros(round(change)) AS change,
    from_micros(round(mad)) AS mad,
    round(z, 3) AS z,
    round(relative_change, 4) AS relative_change,
    from_micros(day_total) AS day_total,
    from_micros(round(min_change)) AS min_change,
    baseline_method, baseline_points,
    gate_z, gate_absolute, gate_relative,
    flagged, kind, direction, suppressed_by
FROM anomaly_scores_input
ORDER BY day, metric, provider, sub_account, service, phase;
