-- findings.slow_disk_idle: one row per checkpoint write during which the job's GPUs waited.
-- Checkpoints come from checkpoint events (a job's events overlapping on one host, one per rank, are
-- one write); without them, from the signature: node_exporter shows the host writing at least
-- $signature_write_mb_s MB/s while its workloads' GPUs are busy under $idle_busy_threshold
-- (consecutive intervals merge into one write, across the host's devices).
-- GPUs of the job: the event's own workload (its workload_id) where it ran on the host then, else
-- every workload holding GPUs on the host while the write ran; a checkpoint event on a host no
-- workload held then, the GPUs busy there in the 5 minutes before the write. Idle share: minute by minute, the
-- share of the job's GPUs under $idle_busy_threshold (idle GPUs no workload held are set aside
-- first), over the window's minutes with telemetry (how many GPU-minutes had telemetry is in the
-- evidence; with none, the GPUs are taken as waiting, as a synchronous checkpoint makes them).
-- Minutes come from core.gpu_minutes, so the share is the same at any sampling interval, through
-- marts.gpu_minutes_in_storage_writes: the host-minutes storage writes cover, built per UTC day, so a
-- rebuild reads those, not every minute of the history. Wasted GPU-hours =
-- the job's cards × duration × idle share (cards: a MIG instance as its share of the card,
-- core.workloads.gpu_cards; the idle share counts instances, as the job's GPUs do); avoidable = the
-- part a disk at $fast_disk_gbps GB/s would not take.
-- Priced at what the host's GPU-hour was paid when the write started (marts.gpu_hour_prices: net of
-- credits and negations, one row per resource and hour) where a charge covers the host, else the catalog's.
CREATE OR REPLACE TABLE findings.slow_disk_idle AS
WITH event_rows AS (
    SELECT event_id, host, workload_id, bytes, started_at, ended_at, storage_class, path
    FROM core.storage_events
    WHERE kind = 'checkpoint' AND ended_at > started_at AND bytes > 0
),
event_islands AS (
    -- A job's checkpoint events on one host that overlap in time are one wait of its GPUs: each rank
    -- logging its part of the shard (eight events 0.1 s apart) counted the host's GPUs eight times.
    SELECT *, sum(CASE WHEN started_at < prev_end THEN 0 ELSE 1 END)
                  OVER (PARTITION BY host, workload_id ORDER BY started_at, event_id ROWS UNBOUNDED PRECEDING) AS island
    FROM (SELECT *, max(ended_at) OVER (PARTITION BY host, workload_id ORDER BY started_at, event_id
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
          FROM event_rows)
),
events AS (
    SELECT min(event_id) AS event_id, host, workload_id, sum(bytes) AS bytes, min(started_at) AS started_at,
           max(ended_at) AS ended_at, min(storage_class) AS storage_class, min(path) AS path, 'checkpoint' AS subkind
    FROM event_islands
    GROUP BY host, workload_id, island
),
fast_writes AS (
    -- Disk-write intervals fast enough to be a checkpoint, on hosts whose GPUs then sat idle.
    SELECT d.host, d.path AS device, d.started_at, d.ended_at, d.bytes
    FROM core.storage_events AS d
    WHERE d.kind = 'disk_write' AND d.ended_at > d.started_at
      AND d.bytes / (datediff('millisecond', d.started_at, d.ended_at) / 1000.0) >= $signature_write_mb_s * 1e6
      -- The window's average busy fraction, to 12 decimals: a float sum's last bit follows the order
      -- it is added in, and whole-percent samples can average exactly the threshold.
      AND (SELECT round(sum(m.busy_sum) / sum(m.gpus_seen), 12) FROM marts.gpu_minutes_in_storage_writes AS m
           WHERE m.host = d.host AND m.minute >= utc_minute(d.started_at) AND m.minute < d.ended_at) < $idle_busy_threshold
      AND NOT EXISTS (SELECT 1 FROM events AS e WHERE e.host = d.host AND e.started_at < d.ended_at AND e.ended_at > d.started_at)
),
write_islands AS (
    -- Consecutive or overlapping intervals of a host's writes, on any of its devices, are one write.
    SELECT *, sum(CASE WHEN started_at <= prev_end THEN 0 ELSE 1 END)
                  OVER (PARTITION BY host ORDER BY started_at, device ROWS UNBOUNDED PRECEDING) AS island
    FROM (SELECT *, max(ended_at) OVER (PARTITION BY host ORDER BY started_at, device
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
          FROM fast_writes)
),
device_writes AS (
    SELECT host, island, device, sum(bytes) AS bytes, min(started_at) AS started_at, max(ended_at) AS ended_at
    FROM write_islands
    GROUP BY host, island, device
),
signatures AS (
    -- A volume and the disk under it (LVM's dm-0 over nvme0n1) both count the bytes written: one write
    -- of the busiest device's bytes, not a stall of the host's GPUs per device.
    SELECT 'disk:' || host || ':' || arg_max(device, bytes) || '@' || strftime(min(started_at), '%Y-%m-%dT%H:%M:%SZ') AS event_id,
           host, NULL AS workload_id, max(bytes) AS bytes, min(started_at) AS started_at, max(ended_at) AS ended_at,
           'disk ' || string_agg(device, ', ' ORDER BY device) AS storage_class, arg_max(device, bytes) AS path, 'signature' AS subkind
    FROM device_writes
    GROUP BY host, island
),
checkpoints AS (
    SELECT *, datediff('millisecond', started_at, ended_at) / 1000.0 AS duration_s
    FROM (SELECT * FROM events UNION ALL BY NAME SELECT * FROM signatures)
),
telemetry_minutes AS (
    -- Per minute of the write: the host's GPUs with a busy signal, and those near zero (under the
    -- idle threshold), waiting on the write.
    -- (Two writes can share an id: signatures are named to the second.)
    -- A minute the write covers in part (its first and last, where it starts or ends within one)
    -- also holds the job's own work before or after it, so its GPUs are busy on average: the share
    -- is judged on the minutes the write covers whole, and on the part-minutes only for a write
    -- shorter than any whole minute (a write from 10:50:30 to 11:10:30 is 19 idle minutes, not 19 of 21).
    SELECT c.event_id, m.minute, sum(m.gpus_seen) AS gpus_seen, sum(m.idle_gpus) AS idle_gpus,
           any_value(m.gpu_model) AS gpu_model,
           m.minute >= c.started_at AND m.minute + INTERVAL 1 MINUTE <= c.ended_at AS whole_minute
    FROM checkpoints AS c
    JOIN marts.gpu_minutes_in_storage_writes AS m
      ON m.host = c.host AND m.minute >= utc_minute(c.started_at) AND m.minute < c.ended_at
    GROUP BY ALL
),
host_jobs AS (
    SELECT c.event_id, w.workload_id, w.gpu_count, workload_cards(w.gpu_cards, w.gpu_count) AS gpu_cards,
           coalesce(w.workload_id = c.workload_id, false) AS own,
           sum(w.gpu_count) OVER (PARTITION BY c.event_id) AS held_gpus
    FROM checkpoints AS c
    JOIN core.workloads AS w
      ON w.host = c.host AND w.started_at < c.ended_at AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > c.started_at
    WHERE w.gpu_count > 0
),
job_gpus AS (
    -- The checkpoint's own workload where the event names one running on the host; else every
    -- workload holding GPUs there.
    SELECT event_id, sum(gpu_count) AS gpus, sum(gpu_cards) AS cards, string_agg(workload_id, ', ' ORDER BY workload_id) AS workloads,
           any_value(held_gpus) AS held_gpus, CASE WHEN bool_or(own) THEN 'the event''s workload' ELSE 'the host''s workloads' END AS gpus_from
    FROM (SELECT *, bool_or(own) OVER (PARTITION BY event_id) AS has_own FROM host_jobs)
    WHERE own OR NOT has_own
    GROUP BY event_id
    UNION ALL
    -- A checkpoint event on a host no workload record holds GPUs on then (a job started by hand on a
    -- rented node, a scheduler whose export is not loaded): the job writing it is taken to hold the
    -- GPUs busy on the host in the 5 minutes before the write (marts.gpu_spans_by_day; a MIG instance
    -- as its share of the card); cards idle since before it are nobody's, set aside as the workloads'
    -- unheld ones are. No GPU busy then, or no telemetry, and its GPUs are unknown: no finding. A
    -- disk-write signature needs a workload: a busy disk beside idle cards nobody holds is no checkpoint.
    SELECT event_id, count(*) AS gpus, sum(gpu_share) AS cards, NULL AS workloads, count(*) AS held_gpus,
           'the GPUs busy on the host just before the write (no workload record)' AS gpus_from
    FROM (SELECT c.event_id, g.gpu_key, sum(g.card_coverage_minutes) / sum(g.coverage_minutes) AS gpu_share
          FROM checkpoints AS c
          JOIN marts.gpu_spans_by_day AS g
            ON g.host = c.host AND NOT g.idle
           AND g.span_start < utc_minute(c.started_at) AND g.span_end > utc_minute(c.started_at) - INTERVAL 5 MINUTE
          WHERE c.subkind = 'checkpoint' AND c.event_id NOT IN (SELECT event_id FROM host_jobs)
            -- Jobs no record names cannot be told apart on the host: of their writes that overlap
            -- there, the first holds the GPUs' wait (three jobs' writes were three stalls of the same cards).
            AND NOT EXISTS (SELECT 1 FROM checkpoints AS o
                            WHERE o.host = c.host AND o.subkind = 'checkpoint' AND o.event_id <> c.event_id
                              AND o.event_id NOT IN (SELECT event_id FROM host_jobs)
                              AND o.started_at < c.ended_at AND o.ended_at > c.started_at
                              AND (o.started_at < c.started_at OR (o.started_at = c.started_at AND o.event_id < c.event_id)))
          GROUP BY c.event_id, g.gpu_key)
    GROUP BY event_id
),
telemetry AS (
    -- The share of the job's GPUs waiting, minute by minute. Idle GPUs are the job's own once the
    -- host's GPUs nobody held are set aside (a host reporting fewer GPUs than held counts by ratio);
    -- when the job holds the whole host this is the share of its GPU-minutes under the threshold.
    SELECT event_id, coalesce(avg(waiting) FILTER (WHERE whole_minute), avg(waiting)) AS idle_share,
           sum(gpus_seen) AS gpu_minutes_seen, any_value(gpu_model) AS telemetry_gpu_model
    FROM (SELECT t.*, least(1.0, greatest(0.0, t.idle_gpus * greatest(t.gpus_seen, j.held_gpus) / t.gpus_seen
                                              - greatest(0, t.gpus_seen - j.held_gpus)) / j.gpus) AS waiting
          FROM telemetry_minutes AS t
          JOIN job_gpus AS j USING (event_id))
    GROUP BY event_id
),
priced AS (
    SELECT c.*, coalesce(j.gpus, 0) AS gpus, coalesce(j.cards, 0) AS cards, j.workloads, j.gpus_from,
           coalesce(t.idle_share, 1.0) AS idle_share, coalesce(t.gpu_minutes_seen, 0) AS gpu_minutes_seen,
           p.price_per_gpu_hour AS charge_price, p.currency AS charge_currency,
           coalesce(p.gpu_model, t.telemetry_gpu_model) AS gpu_model
    FROM checkpoints AS c
    LEFT JOIN job_gpus AS j USING (event_id)
    LEFT JOIN telemetry AS t USING (event_id)
    LEFT JOIN marts.gpu_hour_prices AS p
      ON c.host IN (p.host, p.resource_host, p.name_host) AND p.period_start <= c.started_at AND p.period_end > c.started_at
    -- Two resources answering to the host: the dearer (one price per resource, so never a credit's).
    QUALIFY row_number() OVER (PARTITION BY c.event_id ORDER BY p.price_per_gpu_hour DESC NULLS LAST) = 1
),
catalog AS (
    SELECT gpu_model, price_per_gpu_hour, currency, provider || ' ' || sku AS sku
    FROM core.price_catalog WHERE price_per_gpu_hour IS NOT NULL AND term = 'on_demand'
    QUALIFY row_number() OVER (PARTITION BY gpu_model ORDER BY price_per_gpu_hour) = 1
),
measured AS (
    SELECT p.*,
           p.cards * p.duration_s / 3600.0 * p.idle_share AS wasted_gpu_hours,
           p.bytes / ($fast_disk_gbps * 1e9) AS fast_duration_s,
           coalesce(p.charge_price, k.price_per_gpu_hour) AS price_per_gpu_hour,
           coalesce(p.charge_currency, k.currency) AS currency,
           CASE WHEN p.charge_price IS NOT NULL THEN 'charge' WHEN k.price_per_gpu_hour IS NOT NULL THEN 'catalog: ' || k.sku END AS price_source
    FROM priced AS p
    LEFT JOIN catalog AS k ON k.gpu_model = gpu_model_key(p.gpu_model)
)
SELECT
    'slow_disk_idle' AS kind,
    subkind,
    event_id AS resource,
    host,
    started_at AS period_start,
    ended_at AS period_end,
    price_times(wasted_gpu_hours, price_per_gpu_hour) AS wasted_cost,
    price_times(wasted_gpu_hours * greatest(0, 1 - fast_duration_s / duration_s), price_per_gpu_hour) AS avoidable_cost,
    currency,
    price_source,
    json_object(
        'bytes', bytes, 'duration_s', round(duration_s, 1), 'throughput_mb_s', round(bytes / duration_s / 1e6, 1),
        'gpus', gpus, 'gpu_cards', round(cards, 4), 'workloads', workloads, 'gpus_from', gpus_from,
        'idle_share', round(idle_share, 4),
        'gpu_minutes_with_telemetry', gpu_minutes_seen, 'wasted_gpu_hours', round(wasted_gpu_hours, 4),
        'fast_disk_gbps', $fast_disk_gbps, 'duration_on_fast_disk_s', round(fast_duration_s, 1),
        'storage_class', storage_class, 'path', path,
        'price_per_gpu_hour', price_per_gpu_hour, 'price_source', price_source
    ) AS evidence,
    printf('%d GPUs waited %.0f s while %.0f GB went to %s at %.0f MB/s; local NVMe at %g GB/s would take %.0f s. '
           || 'Write checkpoints to local NVMe and copy them out asynchronously.',
           gpus, duration_s, bytes / 1e9, coalesce(storage_class, 'the disk'), bytes / duration_s / 1e6,
           $fast_disk_gbps, fast_duration_s) AS recommendation
FROM measured
WHERE gpus > 0 AND wasted_gpu_hours > 0;
