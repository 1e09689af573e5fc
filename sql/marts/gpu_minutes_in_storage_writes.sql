-- marts.gpu_minutes_in_storage_writes: per UTC day, host and minute a storage write on that host
-- covers, its GPUs' busy signal summed: what findings.slow_disk_idle reads of GPU telemetry instead
-- of every minute of the history. The writes are the checkpoint events (bytes > 0) and the disk-write
-- intervals fast enough to be one (at least $signature_write_mb_s MB/s): a superset of the windows the
-- finding judges, each minute from the one the write starts in to the one it ends before.
-- gpus_seen counts the GPUs with a busy signal that minute, idle_gpus those under
-- $idle_busy_threshold, busy_sum adds their busy fractions (a window's average is
-- sum(busy_sum) / sum(gpus_seen)); gpu_model is one such GPU's. A MIG instance counts as one GPU
-- here, as the workloads the finding compares these counts with count a slice they hold. A minute
-- without a busy signal has no row, as the finding skips it.
--
-- Built per UTC day ($storage_write_days: YYYY-MM-DD days; ['*'] builds every day): a day's
-- fingerprint covers core.gpu_minutes' for that day and the storage writes overlapping it, so a new
-- day of telemetry or a new storage file rebuilds the days they touch.
CREATE OR REPLACE TABLE marts.gpu_minutes_in_storage_writes AS
WITH writes AS (
    SELECT host, started_at, ended_at
    FROM core.storage_events
    WHERE ended_at > started_at
      AND ((kind = 'checkpoint' AND bytes > 0)
           OR (kind = 'disk_write'
               AND bytes / (datediff('millisecond', started_at, ended_at) / 1000.0) >= $signature_write_mb_s * 1e6))
),
minutes AS (
    SELECT m.host, m.minute, m.busy_fraction, m.gpu_model
    FROM core.gpu_minutes AS m
    -- The days asked for: a range DuckDB prunes the table's row groups by (macros.sql).
    WHERE in_listed_days(m.minute, $storage_write_days)
      AND m.busy_fraction IS NOT NULL
      AND EXISTS (SELECT 1 FROM writes AS w
                  WHERE w.host = m.host AND m.minute >= utc_minute(w.started_at) AND m.minute < w.ended_at)
)
SELECT utc_day(minute) AS day, host, minute,
       count(*) AS gpus_seen,
       count(*) FILTER (WHERE busy_fraction < $idle_busy_threshold) AS idle_gpus,
       sum(busy_fraction) AS busy_sum,
       any_value(gpu_model) AS gpu_model
FROM minutes
GROUP BY ALL;
