-- marts.gpu_hours_profile: one row per UTC hour and phase over the measured period: GPUs held by
-- workloads (GPU-hours held in that hour), GPU-hours busy (from core.gpu_minutes), and the GPUs
-- paid for in that hour (from GPU charges). The purchasing model sizes strategies from it.
CREATE OR REPLACE TABLE marts.gpu_hours_profile AS
WITH bounds AS (
    SELECT date_trunc('hour', timezone('UTC', min(ChargePeriodStart))) AS first_hour,
           date_trunc('hour', timezone('UTC', max(ChargePeriodEnd))) AS end_hour
    FROM core.cost_lines WHERE coalesce(x_GpuCount, 0) > 0
),
hours AS (
    SELECT timezone('UTC', h) AS hour
    FROM bounds, generate_series(first_hour, end_hour - INTERVAL 1 HOUR, INTERVAL 1 HOUR) AS g(h)
),
phases AS (SELECT unnest(['pretraining', 'finetuning', 'inference', 'unattributed']) AS phase),
held AS (
    SELECT h.hour, w.phase,
           sum(w.gpu_count * datediff('second', greatest(w.started_at, h.hour),
               least(coalesce(w.ended_at, h.hour + INTERVAL 1 HOUR), h.hour + INTERVAL 1 HOUR))) / 3600.0 AS gpu_hours_held
    FROM hours AS h
    JOIN core.workloads AS w
      ON w.started_at < h.hour + INTERVAL 1 HOUR AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > h.hour
    WHERE w.gpu_count > 0
    GROUP BY ALL
),
busy AS (
    SELECT timezone('UTC', date_trunc('hour', timezone('UTC', m.minute))) AS hour, w.phase,
           sum(m.busy_fraction * m.coverage * w.gpu_count / t.gpus) / 60.0 AS gpu_hours_busy
    FROM core.gpu_minutes AS m
    JOIN core.workloads AS w
      ON w.host = m.host AND w.started_at <= m.minute AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > m.minute
    JOIN (
        SELECT m2.gpu_key, m2.minute, sum(w2.gpu_count) AS gpus
        FROM core.gpu_minutes AS m2
        JOIN core.workloads AS w2
          ON w2.host = m2.host AND w2.started_at <= m2.minute AND coalesce(w2.ended_at, 'infinity'::TIMESTAMPTZ) > m2.minute
        WHERE w2.gpu_count > 0
        GROUP BY ALL
    ) AS t ON t.gpu_key = m.gpu_key AND t.minute = m.minute
    WHERE w.gpu_count > 0
    GROUP BY ALL
),
paid AS (
    SELECT h.hour, sum(c.x_GpuCount * datediff('second', greatest(c.ChargePeriodStart, h.hour),
               least(c.ChargePeriodEnd, h.hour + INTERVAL 1 HOUR))) / 3600.0 AS gpus_paid
    FROM hours AS h
    JOIN core.cost_lines AS c
      ON c.ChargePeriodStart < h.hour + INTERVAL 1 HOUR AND c.ChargePeriodEnd > h.hour AND coalesce(c.x_GpuCount, 0) > 0
    GROUP BY ALL
)
SELECT h.hour, p.phase,
       coalesce(held.gpu_hours_held, 0) AS gpu_hours_held,
       coalesce(busy.gpu_hours_busy, 0) AS gpu_hours_busy,
       coalesce(paid.gpus_paid, 0) AS gpus_paid
FROM hours AS h
CROSS JOIN phases AS p
LEFT JOIN held ON held.hour = h.hour AND held.phase = p.phase
LEFT JOIN busy ON busy.hour = h.hour AND busy.phase = p.phase
LEFT JOIN paid ON paid.hour = h.hour
ORDER BY h.hour, p.phase;
