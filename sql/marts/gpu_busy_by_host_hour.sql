-- marts.gpu_busy_by_host_hour: busy GPU-minutes per UTC hour and host, whatever ran, from
-- core.gpu_minutes (busy fraction × coverage, so the same at any sampling interval): every minute's
-- busy GPU-minutes whole, never split between workloads, so GPUs fully busy for an hour add up to
-- exactly 60 each. findings.overprovisioned_inference sizes inference hosts hour by hour from it
-- (marts.gpu_busy_by_workload_hour splits the same minutes between workloads: three workloads'
-- thirds of 180 busy GPU-minutes add up to a hair over 180, and a GPU count rounded up from it to
-- one GPU too many). active_gpu_minutes: the GPU-minutes in cards at or over $idle_busy_threshold,
-- the cards at work (findings.overprovisioned_inference counts an idle card's hours as
-- findings.unused_gpu's idle runs, not as a replica too many); covered_gpu_minutes: every
-- GPU-minute in cards the telemetry covers, idle or not.
--
-- Built per UTC day ($host_hour_days: YYYY-MM-DD days; ['*'] builds every day), the days
-- core.gpu_minutes rebuilt, so a new day of telemetry adds its own rows, not the history's.
CREATE OR REPLACE TABLE marts.gpu_busy_by_host_hour AS
SELECT utc_day(m.minute) AS day, timezone('UTC', date_trunc('hour', timezone('UTC', m.minute))) AS hour, m.host,
       -- To 9 decimals, so the sum is the same in whatever order its rows are added (a day alone or with others).
       round(sum(m.busy_fraction * m.coverage * m.gpu_share), 9) AS busy_gpu_minutes,
       round(coalesce(sum(m.coverage * m.gpu_share) FILTER (WHERE m.busy_fraction >= $idle_busy_threshold), 0), 9) AS active_gpu_minutes,
       round(sum(m.coverage * m.gpu_share), 9) AS covered_gpu_minutes
FROM core.gpu_minutes AS m
-- The days asked for: a range DuckDB prunes the table's row groups by (macros.sql).
WHERE in_listed_days(m.minute, $host_hour_days)
GROUP BY ALL;
