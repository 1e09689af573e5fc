-- marts.gpu_busy_by_workload_hour: busy GPU-minutes per UTC hour, host and workload, from
-- core.gpu_minutes (busy fraction × coverage, so the same at any sampling interval). The busy side
-- of marts.spend_by_phase and marts.gpu_hours_profile, which add these rows up instead of joining
-- every minute of the history to the workloads. (A host's hour whole, never split, is
-- marts.gpu_busy_by_host_hour.)
-- A busy minute on a host counts for the workloads holding GPUs there, split by the cards they hold
-- (core.workloads.gpu_cards: a MIG instance as its share of the card; phase: the workload's). Where
-- the GPU's telemetry names the pod using it (dcgm-exporter's pod and namespace labels, on
-- Kubernetes) and that pod is one of those workloads, the minute is that pod's alone: a busy and
-- an idle pod on one node are then each their own, not both half busy. A pod no workload record
-- names leaves the minute split as above.
-- with no workload on the host, a GPU-minute at or over $idle_busy_threshold counts as
-- 'unattributed' (something ran that no workload record names) and one under it as 'idle'
-- (workload_id NULL). A minute when only workloads holding no GPUs ran counts for no phase
-- (workload_id and phase NULL).
--
-- Built per UTC day ($busy_days: YYYY-MM-DD days; ['*'] builds every day): the days
-- core.gpu_minutes rebuilt, and the days whose workloads changed (a day's fingerprint covers the
-- workloads overlapping it), so a new day of telemetry adds its own rows, not the history's.
CREATE OR REPLACE TABLE marts.gpu_busy_by_workload_hour AS
WITH minutes AS NOT MATERIALIZED (
    SELECT m.gpu_key, m.host, m.minute, m.busy_fraction * m.coverage * m.gpu_share AS busy, m.busy_fraction, m.pod, m.namespace
    FROM core.gpu_minutes AS m
    -- The days asked for: a range DuckDB prunes the table's row groups by (macros.sql).
    WHERE in_listed_days(m.minute, $busy_days)
),
holders AS (
    -- The workloads holding GPUs on each GPU-minute's host, with the cards they hold; `named`: the
    -- workload is the pod the GPU's telemetry names for that minute.
    SELECT m.gpu_key, m.host, m.minute, m.busy, w.workload_id, w.phase,
           workload_cards(w.gpu_cards, w.gpu_count) AS cards,
           coalesce(m.pod = w.name AND m.namespace = w.namespace, false) AS named
    FROM minutes AS m
    JOIN core.workloads AS w
      ON w.host = m.host AND w.started_at <= m.minute AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > m.minute
    WHERE w.gpu_count > 0
),
shares AS (
    SELECT *, sum(cards) OVER (PARTITION BY gpu_key, minute) AS all_cards,
           sum(CASE WHEN named THEN cards ELSE 0 END) OVER (PARTITION BY gpu_key, minute) AS named_cards
    FROM holders
),
held AS (
    -- Each holder's part of the minute: the named pod's whole (by cards, should two records name
    -- it); with none named, every holder's share of the cards held.
    SELECT host, minute, workload_id, phase,
           busy * CASE WHEN named_cards = 0 THEN cards WHEN named THEN cards ELSE 0 END
               / CASE WHEN named_cards = 0 THEN all_cards ELSE named_cards END AS busy
    FROM shares
),
unheld AS (
    -- Minutes no workload holding GPUs covers.
    SELECT m.* FROM minutes AS m
    WHERE NOT EXISTS (
        SELECT 1 FROM core.workloads AS w
        WHERE w.host = m.host AND w.started_at <= m.minute AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > m.minute
          AND w.gpu_count > 0
    )
),
no_workload AS (
    SELECT u.host, u.minute, u.busy, NULL AS workload_id,
           CASE WHEN u.busy_fraction >= $idle_busy_threshold THEN 'unattributed' ELSE 'idle' END AS phase
    FROM unheld AS u
    WHERE NOT EXISTS (
        SELECT 1 FROM core.workloads AS w
        WHERE w.host = u.host AND w.started_at <= u.minute AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > u.minute
    )
),
gpuless_workloads AS (
    SELECT u.host, u.minute, u.busy, NULL AS workload_id, NULL AS phase
    FROM unheld AS u
    WHERE EXISTS (
        SELECT 1 FROM core.workloads AS w
        WHERE w.host = u.host AND w.started_at <= u.minute AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > u.minute
    )
)
SELECT utc_day(minute) AS day, timezone('UTC', date_trunc('hour', timezone('UTC', minute))) AS hour, host,
       -- To 9 decimals: a float sum's last bits follow the order rows are added in, which differs
       -- between a day built alone and built with its neighbours (MIG shares such as 3/7 show it).
       CAST(workload_id AS VARCHAR) AS workload_id, CAST(phase AS VARCHAR) AS phase, round(sum(busy), 9) AS busy_gpu_minutes
FROM (SELECT * FROM held UNION ALL BY NAME SELECT * FROM no_workload UNION ALL BY NAME SELECT * FROM gpuless_workloads)
GROUP BY ALL;
