-- The daily report's spend by phase for the days $first_day to $last_day (the scored day's month to
-- that day): marts.spend_by_phase's figures for those days alone, from the same daily marts it adds
-- up by month (marts.daily_cost_by_billing_month, marts.gpu_busy_by_workload_hour), rounded the same
-- way. Over a whole month it gives the mart's row of that month; a report about the 10th does not
-- count the bills and busy hours of the 11th and after, which the month's row already holds.
-- The typical ranges are the mart's (the same for every period).
WITH phases AS (
    SELECT unnest(['pretraining', 'finetuning', 'inference', 'idle', 'unattributed']) AS phase
),
attributed AS (
    SELECT * FROM marts.daily_cost_by_billing_month WHERE day BETWEEN $first_day AND $last_day
),
cost AS (
    SELECT phase, sum(cost_reporting) AS cost_reporting, CAST(sum(gpu_seconds_paid) AS HUGEINT) AS gpu_seconds_paid
    FROM attributed GROUP BY phase
),
by_currency AS (
    SELECT phase, map_from_entries(list({'k': currency, 'v': amount} ORDER BY currency)) AS cost_by_billing_currency
    FROM (SELECT phase, billing_currency AS currency, sum(cost_billing) AS amount FROM attributed GROUP BY ALL)
    GROUP BY phase
),
busy AS (
    SELECT phase, CAST(sum(CAST(busy_gpu_minutes AS DECIMAL(38, 9))) * 1000000000 AS HUGEINT) AS busy_nano_minutes
    FROM marts.gpu_busy_by_workload_hour
    WHERE day BETWEEN $first_day AND $last_day AND phase IS NOT NULL
    GROUP BY phase
),
ranges AS (
    SELECT phase, typical_util_pct_low, typical_util_pct_high, typical_share_pct_low, typical_share_pct_high
    FROM marts.spend_by_phase WHERE period = 'all'
),
total AS (SELECT sum(cost_reporting) AS cost_reporting FROM cost)
SELECT
    ph.phase,
    (SELECT any_value(reporting_currency) FROM marts.spend_by_phase) AS reporting_currency,
    coalesce(c.cost_reporting, 0)::DECIMAL(38, 10) AS cost_reporting,
    CAST(rounded_quotient(to_units(coalesce(c.cost_reporting, 0)) * 10000, to_units(t.cost_reporting)) AS DOUBLE) / 100 AS share_pct,
    CAST(rounded_quotient(coalesce(c.gpu_seconds_paid, 0) * 1000, 3600) AS DOUBLE) / 1000 AS gpu_hours_paid,
    CAST(rounded_quotient(coalesce(u.busy_nano_minutes, 0), 60000000) AS DOUBLE) / 1000 AS gpu_hours_busy,
    CAST(rounded_quotient(u.busy_nano_minutes * 6, c.gpu_seconds_paid * 10000) AS DOUBLE) / 100 AS utilization_pct,
    r.typical_util_pct_low, r.typical_util_pct_high, r.typical_share_pct_low, r.typical_share_pct_high,
    CASE WHEN rounded_quotient(u.busy_nano_minutes * 60, 1000000000) > 0 THEN
        from_units(to_units(c.cost_reporting) * 3600 // rounded_quotient(u.busy_nano_minutes * 60, 1000000000))
    END AS cost_per_busy_gpu_hour,
    b.cost_by_billing_currency
FROM phases AS ph
CROSS JOIN total AS t
LEFT JOIN cost AS c USING (phase)
LEFT JOIN by_currency AS b USING (phase)
LEFT JOIN busy AS u USING (phase)
LEFT JOIN ranges AS r USING (phase)
-- No rows for days with neither spend nor busy hours, as the mart has no row for such a month.
WHERE EXISTS (SELECT 1 FROM attributed) OR EXISTS (SELECT 1 FROM busy)
ORDER BY array_position(['pretraining', 'finetuning', 'inference', 'idle', 'unattributed'], ph.phase);
