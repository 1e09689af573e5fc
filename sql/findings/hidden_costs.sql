-- findings.hidden_costs: every leak found, one row each, ranked by avoidable cost in the reporting
-- currency. finding_id is stable across runs: kind, resource and start of the leak.
-- Severity: high when the avoidable cost reaches $severity_high, medium from $severity_medium
-- (both in the reporting currency), else low; 'unrated' when no FX rate within $max_rate_age_days. Leaks that wasted less than $min_finding_cost are
-- left out of this list (they stay in the per-kind tables).
CREATE OR REPLACE TABLE findings.hidden_costs AS
WITH all_findings AS (
    SELECT * FROM findings.egress
    UNION ALL BY NAME SELECT * FROM findings.slow_disk_idle
    UNION ALL BY NAME SELECT * FROM findings.unused_gpu
    UNION ALL BY NAME SELECT * FROM findings.overprovisioned_inference
),
converted AS (
    SELECT f.*,
           CASE
               WHEN f.currency = $reporting_currency THEN CAST(1 AS DECIMAL(38, 12))
               WHEN utc_day(f.period_start) - fx.rate_date <= $max_rate_age_days THEN fx.rate
           END AS fx_rate
    FROM all_findings AS f
    ASOF LEFT JOIN core.fx_rates AS fx
      ON fx.from_currency = f.currency AND fx.to_currency = $reporting_currency AND fx.rate_date <= utc_day(f.period_start)
)
SELECT
    substr(md5(kind || '|' || subkind || '|' || resource || '|' || period_start::VARCHAR), 1, 16) AS finding_id,
    kind, subkind, resource, host, period_start, period_end,
    wasted_cost, avoidable_cost, currency,
    convert_money(wasted_cost, fx_rate) AS wasted_cost_reporting,
    convert_money(avoidable_cost, fx_rate) AS avoidable_cost_reporting,
    $reporting_currency AS reporting_currency,
    CASE
        WHEN fx_rate IS NULL THEN 'unrated'  -- no FX rate: the amount cannot be compared with the thresholds
        WHEN convert_money(avoidable_cost, fx_rate) >= $severity_high THEN 'high'
        WHEN convert_money(avoidable_cost, fx_rate) >= $severity_medium THEN 'medium'
        ELSE 'low'
    END AS severity,
    price_source, evidence, recommendation
FROM converted
WHERE fx_rate IS NULL OR wasted_cost * fx_rate >= $min_finding_cost
ORDER BY avoidable_cost_reporting DESC NULLS LAST, wasted_cost_reporting DESC NULLS LAST, finding_id;
