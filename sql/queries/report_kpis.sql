-- The daily report's header for the scored day $day, in the reporting currency:
--   month-to-date spend (the 1st to $day) against the same point last month (the 1st to the same
--   day of the month, or the month's last day when it is shorter), and the lines it leaves out for
--   want of an FX rate, with what they cost in their billing currencies;
--   a forecast to month end: month-to-date plus the mean day of the last 7 billed days (fewer when the
--   data starts later) for each day left after the last billed day, so a fee booked on the 1st is not
--   multiplied by the month, and a day whose bills have not arrived yet (bills come a day or two late)
--   is neither a day of no spend in the mean nor a day already counted;
--   avoidable spend this month: findings.hidden_costs of $day's month (found by month);
--   idle share and cost per busy GPU-hour for the 1st to $day, as month-to-date spend (the days after
--   it, already billed when a past day's report is rebuilt, do not count): from the daily marts that
--   marts.spend_by_phase adds up by month. GPU spend (every part of the GPU charges, idle and
--   busy-without-workload included; not the other lines of their phases) over the busy GPU-hours of
--   every phase, and the paid GPU-hours no telemetry covered (their busy hours unknown). Integer
--   units keep every division exact (sql/macros.sql).
WITH bounds AS (
    SELECT d AS day, m AS month_start, CAST(m - INTERVAL 1 MONTH AS DATE) AS prev_start, last_day(d) AS month_end,
           strftime(d, '%Y-%m') AS period
    FROM (SELECT CAST($day AS DATE) AS d, CAST(date_trunc('month', CAST($day AS DATE)) AS DATE) AS m)
),
daily AS (
    SELECT day, sum(cost_reporting) AS cost, sum(lines_without_fx_rate) AS without_rate
    FROM marts.daily_cost GROUP BY day
),
billed AS (
    -- The newest day billed up to the scored day (the scored day itself when nothing is billed).
    SELECT b.*, coalesce((SELECT max(day) FROM daily WHERE day <= b.day), b.day) AS last_billed
    FROM bounds AS b
),
spend AS (
    SELECT b.*,
           least(b.prev_start + CAST(b.day - b.month_start AS INTEGER), b.month_start - 1) AS prev_same_day,
           (SELECT min(day) FROM daily) AS first_day,
           (SELECT coalesce(sum(cost), 0) FROM daily WHERE day BETWEEN b.month_start AND b.day) AS mtd,
           (SELECT coalesce(sum(without_rate), 0) FROM daily WHERE day BETWEEN b.month_start AND b.day) AS mtd_without_rate,
           -- What those lines cost in the currencies they were billed in: none of it is in mtd.
           (SELECT list({'currency': billing_currency, 'amount': amount} ORDER BY billing_currency)
            FROM (SELECT billing_currency, sum(cost_billing) AS amount FROM marts.daily_cost
                  WHERE day BETWEEN b.month_start AND b.day AND cost_reporting IS NULL GROUP BY billing_currency))
               AS mtd_without_rate_billed,
           (SELECT coalesce(sum(cost), 0) FROM daily WHERE day BETWEEN b.last_billed - 6 AND b.last_billed) AS last_7_days,
           -- The days the forecast adds: after the last billed day, or the whole month when none of it is.
           CAST(b.month_end - greatest(b.last_billed, b.month_start - 1) AS INTEGER) AS days_to_forecast
    FROM billed AS b
),
phases AS (
    -- GPU spend by line, not by phase: a phase's storage or purchase is no GPU spend, and the part of a
    -- GPU charge busy with no workload ('unattributed') is, as its busy hours are in busy_gpu_hours.
    SELECT sum(cost_reporting) AS month_cost,
           sum(cost_reporting) FILTER (WHERE phase = 'idle') AS idle_cost,
           sum(gpu_cost_reporting) AS gpu_cost,
           CAST(rounded_quotient(CAST(sum(gpu_seconds_paid) AS HUGEINT) * 1000, 3600) AS DOUBLE) / 1000 AS paid_gpu_hours
    FROM marts.daily_cost_by_billing_month
    WHERE day BETWEEN (SELECT month_start FROM bounds) AND (SELECT day FROM bounds)
),
busy AS (
    -- Busy GPU-hours of every phase, rounded once to the thousandth from the exact sum (as the mart's).
    SELECT CAST(rounded_quotient(CAST(sum(CAST(busy_gpu_minutes AS DECIMAL(38, 9))) * 1000000000 AS HUGEINT), 60000000)
                AS DOUBLE) / 1000 AS busy_gpu_hours
    FROM marts.gpu_busy_by_workload_hour
    WHERE day BETWEEN (SELECT month_start FROM bounds) AND (SELECT day FROM bounds) AND phase IS NOT NULL
),
dark AS (
    -- Paid GPU-hours of the month no telemetry covered (findings.unused_gpu's dark charges): their
    -- spend is in gpu_cost, their busy hours are unknown, so the cost per busy GPU-hour overstates.
    SELECT round(sum(TRY_CAST(evidence ->> 'dark_gpu_hours' AS DOUBLE)), 1) AS dark_gpu_hours
    FROM findings.unused_gpu
    WHERE subkind IN ('no_telemetry', 'partial_telemetry')
      AND utc_day(period_start) BETWEEN (SELECT month_start FROM bounds) AND (SELECT day FROM bounds)
),
leaks AS (
    SELECT coalesce(sum(avoidable_cost_reporting), 0) AS avoidable, count(*) AS findings,
           count(*) FILTER (WHERE avoidable_cost_reporting IS NULL) AS unrated
    FROM findings.hidden_costs WHERE period = (SELECT period FROM bounds)
)
-- The reporting currency from the costs, else from the leaks (a warehouse of telemetry alone).
SELECT coalesce((SELECT any_value(reporting_currency) FROM marts.daily_cost),
                (SELECT any_value(reporting_currency) FROM findings.hidden_costs)) AS currency,
       s.day, s.period, s.month_start, s.month_end, s.prev_start, s.prev_same_day,
       s.mtd, s.mtd_without_rate, s.mtd_without_rate_billed,
       (SELECT coalesce(sum(cost), 0) FROM daily WHERE day BETWEEN s.prev_start AND s.prev_same_day) AS prev_mtd,
       (SELECT count(*) FROM daily WHERE day BETWEEN s.prev_start AND s.prev_same_day) AS prev_days_billed,
       s.days_to_forecast AS days_left,
       s.last_billed,
       CAST(least(7, greatest(1, s.last_billed - s.first_day + 1)) AS INTEGER) AS run_rate_days,
       from_units(to_units(s.last_7_days) // least(7, greatest(1, s.last_billed - s.first_day + 1))) AS run_rate_per_day,
       s.mtd + from_units(to_units(s.last_7_days) * s.days_to_forecast
                          // least(7, greatest(1, s.last_billed - s.first_day + 1))) AS forecast,
       l.avoidable AS avoidable_this_month, l.findings AS leaks_this_month, l.unrated AS unrated_leaks,
       p.month_cost, p.idle_cost,
       CASE WHEN p.month_cost > 0 THEN round(100.0 * p.idle_cost / p.month_cost, 1) END AS idle_share_pct,
       p.gpu_cost, u.busy_gpu_hours, p.paid_gpu_hours, dk.dark_gpu_hours,
       CASE WHEN u.busy_gpu_hours > 0
            THEN from_units(to_units(p.gpu_cost) * 1000000 // CAST(round(u.busy_gpu_hours * 1000000) AS HUGEINT)) END
           AS cost_per_busy_gpu_hour
FROM spend AS s, leaks AS l, phases AS p, busy AS u, dark AS dk;
