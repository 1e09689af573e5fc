-- marts.gpu_busy_by_phase_by_day: busy GPU-minutes per UTC day and phase, the busy side of
-- marts.spend_by_phase. Busy GPU-minutes come from core.gpu_minutes (busy fraction × coverage, so
-- the same at any sampling interval): a busy minute on a host counts for the phases of the
-- workloads running there (split by GPUs held); with no workload, a GPU-minute at or over
-- $idle_busy_threshold counts as 'unattributed' (something ran that no workload record names) and
-- one under it as 'idle'.
--
-- Built per UTC day ($busy_days: YYYY-MM-DD days; ['*'] builds every day): the days
-- core.gpu_minutes rebuilt, and the days whose workloads changed (a day's fingerprint covers the
-- workloads overlapping it), so a new day of telemetry adds its own rows, not the history's.
CREATE OR REPLACE TABLE marts.gpu_busy_by_phase_by_day AS
WITH minutes AS NOT MATERIALIZED (
    SELECT m.gpu_key, m.host, m.minute, m.busy_fraction, m.coverage
    FROM core.gpu_minutes AS m
    -- The days asked for as a range, which DuckDB prunes the table's row groups by; each minute's
    -- day is formatted only when the list has gaps.
    WHERE list_contains($busy_days, '*')
       OR (m.minute >= first_listed_day($busy_days) AND m.minute < last_listed_day($busy_days) + 1
           AND (days_without_gap($busy_days) OR list_contains($busy_days, strftime(m.minute, '%Y-%m-%d'))))
),
minute_phases AS (
    -- Which phases ran on each GPU-minute's host, weighted by GPUs held.
    SELECT m.gpu_key, m.minute, m.busy_fraction * m.coverage AS busy_fraction,
           w.phase, w.gpu_count::DOUBLE / sum(w.gpu_count) OVER (PARTITION BY m.gpu_key, m.minute) AS phase_weight
    FROM minutes AS m
    JOIN core.workloads AS w
      ON w.host = m.host AND w.started_at <= m.minute AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > m.minute
    WHERE w.gpu_count > 0
),
busy_minutes AS (
    SELECT minute, phase, busy_fraction * phase_weight AS busy FROM minute_phases
    UNION ALL
    SELECT m.minute, CASE WHEN m.busy_fraction >= $idle_busy_threshold THEN 'unattributed' ELSE 'idle' END,
           m.busy_fraction * m.coverage
    FROM minutes AS m
    WHERE NOT EXISTS (
        SELECT 1 FROM core.workloads AS w
        WHERE w.host = m.host AND w.started_at <= m.minute AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > m.minute
    )
)
SELECT utc_day(minute) AS day, phase, sum(busy) AS busy_gpu_minutes
FROM busy_minutes
GROUP BY ALL;
