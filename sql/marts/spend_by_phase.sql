-- marts.spend_by_phase: one row per period and phase (all five phases, even when zero).
-- `period` is a calendar month ('2026-09', UTC) or 'all' for everything loaded.
-- Cost in the reporting currency and per billing currency, share of the period, GPU-hours paid
-- and busy, utilization and cost per busy GPU-hour, beside the industry ranges the design quotes.
--
-- GPU-hours busy come from core.gpu_minutes (busy fraction × coverage, so the same at any sampling
-- interval): a busy minute on a host counts for the phases of the workloads running there (split
-- by cards held, the busiest GPUs first, or the pod dcgm-exporter names on the GPU:
-- marts.gpu_busy_by_workload_hour); with
-- no workload, a GPU-minute at or over $idle_busy_threshold counts as 'unattributed' (something ran
-- that no workload record names) and one under it as 'idle'. They
-- are summed per UTC hour, host and workload in marts.gpu_busy_by_workload_hour, built per day, which this
-- adds up.
-- Parameter: $typical_ranges, a list of {phase, util_low, util_high, share_low, share_high}.
CREATE OR REPLACE TABLE marts.spend_by_phase AS
WITH phases AS (
    SELECT unnest(['pretraining', 'finetuning', 'inference', 'idle', 'unattributed']) AS phase
),
-- The cost side sums marts.daily_cost_by_billing_month (the attribution's parts by day, built per
-- billing month), a table of days: not every part of the history joined to its line again.
attributed AS (
    SELECT d.*, p.period
    FROM marts.daily_cost_by_billing_month AS d
    CROSS JOIN unnest(['all', strftime(d.day, '%Y-%m')]) AS p(period)
),
cost AS (
    SELECT period, phase,
           sum(cost_reporting) AS cost_reporting,
           CAST(sum(gpu_seconds_paid) AS HUGEINT) AS gpu_seconds_paid,
           CAST(sum(lines_without_fx_rate) AS BIGINT) AS parts_without_fx_rate
    FROM attributed
    GROUP BY period, phase
),
by_currency AS (
    SELECT period, phase, map_from_entries(list({'k': currency, 'v': amount} ORDER BY currency)) AS cost_by_billing_currency
    FROM (SELECT period, phase, billing_currency AS currency, sum(cost_billing) AS amount FROM attributed GROUP BY ALL)
    GROUP BY period, phase
),
busy AS (
    -- The busy side, per UTC hour, host and workload (marts.gpu_busy_by_workload_hour, built per day).
    -- Summed as DECIMAL (the mart's 9 decimals): a float sum's last bits follow the order rows come in;
    -- kept in whole 10^-9 GPU-minutes, so every figure below is rounded from the exact sum. Whole busy
    -- GPU-seconds are rounded here once: the money rate below divides by them (written inside it,
    -- the rounding was copied into each step of Spark's exact division, 130,000 characters of SQL).
    SELECT *, rounded_quotient(busy_nano_minutes * 60, 1000000000) AS busy_gpu_seconds
    FROM (SELECT p.period, b.phase, CAST(sum(CAST(b.busy_gpu_minutes AS DECIMAL(38, 9))) * 1000000000 AS HUGEINT) AS busy_nano_minutes
          FROM marts.gpu_busy_by_workload_hour AS b
          CROSS JOIN unnest(['all', strftime(b.day, '%Y-%m')]) AS p(period)
          WHERE b.phase IS NOT NULL
          GROUP BY ALL)
),
periods AS (
    SELECT period FROM cost UNION SELECT period FROM busy UNION SELECT 'all'
),
ranges AS (
    SELECT r.phase, r.util_low, r.util_high, r.share_low, r.share_high FROM (SELECT unnest($typical_ranges) AS r)
),
total AS (SELECT period, sum(cost_reporting) AS cost_reporting FROM cost GROUP BY period)
SELECT
    pe.period,
    ph.phase,
    $reporting_currency AS reporting_currency,
    coalesce(c.cost_reporting, 0)::DECIMAL(38, 10) AS cost_reporting,
    b.cost_by_billing_currency,
    -- Ratios and hours are rounded from exact integers (rounded_quotient: half away from zero), then
    -- shown as DOUBLE: a rounded DOUBLE quotient rounds an exact half one way on DuckDB and the
    -- other on Spark.
    CAST(rounded_quotient(to_units(coalesce(c.cost_reporting, 0)) * 10000, to_units(t.cost_reporting)) AS DOUBLE) / 100 AS share_pct,
    CAST(rounded_quotient(coalesce(c.gpu_seconds_paid, 0) * 1000, 3600) AS DOUBLE) / 1000 AS gpu_hours_paid,
    -- busy GPU-hours × 1000 = nano-minutes ÷ (60 × 10^6)
    CAST(rounded_quotient(coalesce(u.busy_nano_minutes, 0), 60000000) AS DOUBLE) / 1000 AS gpu_hours_busy,
    -- busy ÷ paid in hundredths of a percent = nano-minutes × 60 × 10^4 ÷ (10^9 × paid seconds)
    CAST(rounded_quotient(u.busy_nano_minutes * 6, c.gpu_seconds_paid * 10000) AS DOUBLE) / 100 AS utilization_pct,
    -- A money rate: whole 10^-10 units divided by whole busy GPU-seconds, never through a float.
    CASE WHEN u.busy_gpu_seconds > 0 THEN from_units(to_units(c.cost_reporting) * 3600 // u.busy_gpu_seconds) END
        AS cost_per_busy_gpu_hour,
    r.util_low AS typical_util_pct_low,
    r.util_high AS typical_util_pct_high,
    r.share_low AS typical_share_pct_low,
    r.share_high AS typical_share_pct_high,
    coalesce(c.parts_without_fx_rate, 0) AS parts_without_fx_rate
FROM periods AS pe
CROSS JOIN phases AS ph
LEFT JOIN cost AS c ON c.period = pe.period AND c.phase = ph.phase
LEFT JOIN by_currency AS b ON b.period = pe.period AND b.phase = ph.phase
LEFT JOIN busy AS u ON u.period = pe.period AND u.phase = ph.phase
LEFT JOIN ranges AS r ON r.phase = ph.phase
LEFT JOIN total AS t ON t.period = pe.period
ORDER BY pe.period = 'all' DESC, pe.period,
         array_position(['pretraining', 'finetuning', 'inference', 'idle', 'unattributed'], ph.phase);
