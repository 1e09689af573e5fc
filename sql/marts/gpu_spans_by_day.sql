-- marts.gpu_spans_by_day: each GPU's stretches of consecutive minutes with telemetry, per UTC day,
-- idle (busy fraction under $idle_busy_threshold) or not (busy, or no busy signal).
-- A stretch ends where the GPU's state changes (or the model its telemetry names), where a minute
-- has no telemetry (core.gpu_minutes has no row for it), and at midnight: a day's stretches come
-- from that day's minutes alone, so a new day of telemetry rebuilds its own rows, not the
-- history's. findings.unused_gpu joins an idle stretch ending at midnight to the one starting
-- there to judge an idle run whole, and tests a host's telemetry in a charge's period against the
-- stretches (every minute with telemetry lies in exactly one).
-- span_end is the minute after the stretch's last; coverage_minutes and busy_minutes sum the
-- minutes' coverage and busy fraction × coverage (busy GPU-minutes), so a stretch carries what its
-- minutes carried (of the GPU or MIG instance); card_coverage_minutes sums coverage × gpu_share, the
-- same in whole cards (a MIG instance's part of its card, core.gpu_minutes), what idle hours are paid by.
--
-- Built per UTC day ($span_days: YYYY-MM-DD days; ['*'] builds every day), the days
-- core.gpu_minutes rebuilt.
CREATE OR REPLACE TABLE marts.gpu_spans_by_day AS
WITH minutes AS (
    SELECT m.gpu_key, m.host, m.gpu_model, m.minute, utc_day(m.minute) AS day,
           coalesce(m.busy_fraction < $idle_busy_threshold, false) AS idle,
           m.coverage, m.busy_fraction * m.coverage AS busy_coverage, m.coverage * m.gpu_share AS card_coverage
    FROM core.gpu_minutes AS m
    -- The days asked for: a range DuckDB prunes the table's row groups by (macros.sql).
    WHERE in_listed_days(m.minute, $span_days)
),
stretches AS (
    -- Consecutive minutes of one state share a key: the minute less its rank in that state.
    SELECT *, minute - to_minutes(row_number() OVER (PARTITION BY gpu_key, host, gpu_model, day, idle ORDER BY minute)) AS stretch
    FROM minutes
)
SELECT day, gpu_key, host, gpu_model, idle,
       min(minute) AS span_start, max(minute) + INTERVAL 1 MINUTE AS span_end,
       count(*) AS minutes, sum(coverage) AS coverage_minutes, sum(busy_coverage) AS busy_minutes,
       sum(card_coverage) AS card_coverage_minutes
FROM stretches
GROUP BY day, gpu_key, host, gpu_model, idle, stretch;
