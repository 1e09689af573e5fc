-- marts.gpu_hours_profile: one row per UTC hour, GPU model, phase and load over the measured period:
-- GPUs held by workloads (GPU-hours held in that hour, and the most held at once), GPU-hours busy (from core.gpu_minutes), and
-- the GPUs of that model paid for in that hour (from GPU charges), and its cards' busy GPU-hours
-- whatever ran (gpu_hours_busy_any, from telemetry: workloads or not), and of those the busy
-- GPU-hours no workload held (gpu_hours_busy_unheld: minutes at or over the busy threshold that no
-- workload record names). The purchasing model sizes and prices each GPU model on its own from it
-- (models/tco.py); a model no workload held but whose cards telemetry shows at work is sized from
-- the GPUs paid for and that busy time, and beside workloads, busy time no workload held is demand too.
-- gpu_model: the canonical key (gpu_model_key) of the workload's host, from its telemetry (the model
-- most of its minutes report), else from its GPU charges; 'unknown' when neither names one.
-- load: how the purchasing model annualizes the hours (README, "TCO"):
--   recurring: inference, and jobs of a family seen at least twice in the period (the family is the
--              job's name without a trailing run number: finetune-sft-01, -02 … are one family);
--              scaled from the measured period to a year;
--   one_off:   any other job, such as a pre-training run seen once; counted once a year, not scaled.
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
loads AS (SELECT unnest(['recurring', 'one_off']) AS load),
telemetry_models AS (
    SELECT host, arg_max(gpu_model, minutes) AS gpu_model
    FROM (SELECT host, gpu_model, sum(minutes) AS minutes FROM marts.gpu_spans_by_day WHERE gpu_model IS NOT NULL GROUP BY ALL)
    GROUP BY host
),
billed_models AS (
    -- Invoices name the host as the resource's name or its id, and core.host_names may give it
    -- another (an AWS instance's hostname): all are keys.
    SELECT host, arg_max(gpu_model, gpus) AS gpu_model
    FROM (SELECT unnest([norm_host(c.ResourceName), norm_host(c.ResourceId), n.host]) AS host, c.x_GpuModel AS gpu_model,
                 c.x_GpuCount AS gpus
          FROM core.cost_lines AS c
          LEFT JOIN core.host_names AS n ON n.resource_id = c.ResourceId
          WHERE c.x_GpuModel IS NOT NULL AND coalesce(c.x_GpuCount, 0) > 0)
    WHERE host IS NOT NULL
    GROUP BY host
),
gpu_workloads AS (
    SELECT *, regexp_replace(lower(trim(coalesce(name, workload_id))), '([-_.:]?[0-9]+)+$', '') AS family
    FROM core.workloads WHERE gpu_count > 0
),
families AS (
    -- Jobs per family: a multi-node job has a row per host but is one job.
    SELECT family, count(DISTINCT workload_id) AS jobs FROM gpu_workloads GROUP BY family
),
runs AS (
    SELECT w.*,
           coalesce(t.gpu_model, b.gpu_model, b2.gpu_model, 'unknown') AS gpu_model,
           CASE WHEN w.phase = 'inference' OR f.jobs >= 2 THEN 'recurring' ELSE 'one_off' END AS load
    FROM gpu_workloads AS w
    JOIN families AS f USING (family)
    LEFT JOIN telemetry_models AS t ON t.host = norm_host(w.host)
    LEFT JOIN billed_models AS b ON b.host = norm_host(w.host)
    LEFT JOIN billed_models AS b2 ON b2.host = norm_host(w.resource_id)
),
telemetry_host_hours AS (
    -- The host-hours telemetry covers (as marts.gpu_busy_by_workload_hour matches workloads to it: by host).
    SELECT DISTINCT host, hour FROM marts.gpu_busy_by_host_hour
),
held_parts AS (
    SELECT h.hour, w.gpu_model, w.phase, w.load, th.host IS NULL AS unseen,
           -- In cards (a MIG instance as its share of the card), as busy and paid hours count them.
           CAST(workload_cards(w.gpu_cards, w.gpu_count) * datediff('second', greatest(w.started_at, h.hour),
               least(coalesce(w.ended_at, h.hour + INTERVAL 1 HOUR), h.hour + INTERVAL 1 HOUR)) AS DECIMAL(38, 6)) AS gpu_seconds
    FROM hours AS h
    JOIN runs AS w
      ON w.started_at < h.hour + INTERVAL 1 HOUR AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > h.hour
    LEFT JOIN telemetry_host_hours AS th ON th.host = w.host AND th.hour = h.hour
),
held AS (
    -- Summed as DECIMAL, so the sum does not depend on the order it is taken in.
    SELECT hour, gpu_model, phase, load, sum(gpu_seconds) / 3600.0 AS gpu_hours_held,
           -- Held by workloads on a host telemetry does not cover that hour (or known by its resource
           -- id alone): their cards' busy minutes are no workload's in the busy split.
           coalesce(sum(gpu_seconds) FILTER (WHERE unseen), 0) / 3600.0 AS gpu_hours_held_unseen
    FROM held_parts
    GROUP BY ALL
),
card_events AS (
    -- Each workload's cards taken at its start and given back at its end, in every total they count
    -- in: all load, recurring load, training (every phase but inference) and its one-off part; and
    -- a no-change event at each hour's start, so each hour sees the level it starts at.
    SELECT gpu_model, instant, direction * cards AS all_cards,
           CASE WHEN load = 'recurring' THEN direction * cards ELSE 0 END AS recurring_cards,
           CASE WHEN phase <> 'inference' THEN direction * cards ELSE 0 END AS training_cards,
           CASE WHEN phase <> 'inference' AND load = 'one_off' THEN direction * cards ELSE 0 END AS one_off_training_cards
    FROM (
        SELECT gpu_model, load, phase, started_at AS instant, 1 AS direction, workload_cards(gpu_cards, gpu_count) AS cards FROM runs
        UNION ALL
        SELECT gpu_model, load, phase, ended_at, -1, workload_cards(gpu_cards, gpu_count) FROM runs WHERE ended_at IS NOT NULL
    )
    UNION ALL
    SELECT m.gpu_model, h.hour, 0, 0, 0, 0
    FROM hours AS h
    CROSS JOIN (SELECT DISTINCT gpu_model FROM runs) AS m
),
card_steps AS (
    -- The cards held at once from each event to the next, in each total: events of one instant
    -- share their level (a job ending when another starts does not overlap it), so all but the last
    -- last no time; an hour's start is an event, so no step crosses one.
    SELECT gpu_model, instant,
           sum(all_cards) OVER (PARTITION BY gpu_model ORDER BY instant) AS gpus,
           sum(recurring_cards) OVER (PARTITION BY gpu_model ORDER BY instant) AS recurring_gpus,
           sum(training_cards) OVER (PARTITION BY gpu_model ORDER BY instant) AS training_gpus,
           sum(one_off_training_cards) OVER (PARTITION BY gpu_model ORDER BY instant) AS one_off_training_gpus,
           lead(instant) OVER (PARTITION BY gpu_model ORDER BY instant) AS next_instant
    FROM card_events
),
held_peaks AS (
    -- The most cards held at once in the hour: what a fleet must have to run the hour's jobs. The
    -- hour's GPU-hours held are its average: four 8-GPU jobs of 15 minutes, two at a time, are
    -- 4 GPU-hours held but need 16 cards.
    SELECT timezone('UTC', date_trunc('hour', timezone('UTC', instant))) AS hour, gpu_model,
           max(gpus) AS gpus_held_peak, max(recurring_gpus) AS gpus_held_peak_recurring
    FROM card_steps
    GROUP BY ALL
),
training_levels AS (
    -- Training's cards at each instant, per hour and model (one that ran training), as JSON:
    -- [{gpus, one_off_gpus, seconds}, …], the seconds adding up to the hour. The hybrid strategy's
    -- monthly baseline and the on-demand hours above it are taken from it, not the hour's average.
    SELECT hour, gpu_model,
           to_json(list(json_object('gpus', gpus, 'one_off_gpus', one_off_gpus, 'seconds', seconds) ORDER BY gpus, one_off_gpus))
               AS training_levels
    FROM (
        SELECT timezone('UTC', date_trunc('hour', timezone('UTC', instant))) AS hour, gpu_model,
               training_gpus AS gpus, one_off_training_gpus AS one_off_gpus,
               sum(datediff('second', instant, least(coalesce(next_instant, 'infinity'::TIMESTAMPTZ),
                                                     timezone('UTC', date_trunc('hour', timezone('UTC', instant))) + INTERVAL 1 HOUR)))
                   AS seconds
        FROM card_steps
        WHERE gpu_model IN (SELECT gpu_model FROM runs WHERE phase <> 'inference')
        GROUP BY ALL
    )
    WHERE seconds > 0
    GROUP BY ALL
),
busy AS (
    -- Each workload's share of its host's busy GPU-minutes, by hour (marts.gpu_busy_by_workload_hour, built per day).
    -- Summed as DECIMAL (the mart's 9 decimals): a float sum's last bits follow the order rows come in.
    SELECT b.hour, w.gpu_model, w.phase, w.load, sum(CAST(b.busy_gpu_minutes AS DECIMAL(38, 9))) / 60.0 AS gpu_hours_busy
    FROM marts.gpu_busy_by_workload_hour AS b
    JOIN runs AS w ON w.workload_id = b.workload_id AND w.host = b.host  -- a multi-node job has a row per host
    GROUP BY ALL
),
paid AS (
    SELECT h.hour, coalesce(c.x_GpuModel, 'unknown') AS gpu_model,
           -- The charge's paid GPU-seconds (paid_gpu_seconds: fewer than its GPUs over the period
           -- where it ran part of it) spread evenly over the hours of its period, in whole seconds.
           sum(paid_gpu_seconds(c.x_GpuCount, c.ChargePeriodStart, c.ChargePeriodEnd, c.ConsumedQuantity, c.ConsumedUnit)
               * datediff('second', greatest(c.ChargePeriodStart, h.hour), least(c.ChargePeriodEnd, h.hour + INTERVAL 1 HOUR))
               // nullif(datediff('second', c.ChargePeriodStart, c.ChargePeriodEnd), 0)) / 3600.0 AS gpus_paid
    FROM hours AS h
    JOIN core.cost_lines AS c
      ON c.ChargePeriodStart < h.hour + INTERVAL 1 HOUR AND c.ChargePeriodEnd > h.hour AND coalesce(c.x_GpuCount, 0) > 0
     AND pays_for_gpu_hours(c.ChargeCategory, c.ChargeClass, c.EffectiveCost, c.BilledCost, c.CommitmentDiscountStatus,
                            c.CapacityReservationStatus)
    GROUP BY ALL
),
busy_any AS (
    -- Each host's busy GPU-hours whatever ran (marts.gpu_busy_by_host_hour), by its model.
    SELECT b.hour, coalesce(t.gpu_model, bm.gpu_model, 'unknown') AS gpu_model,
           sum(CAST(b.busy_gpu_minutes AS DECIMAL(38, 9))) / 60.0 AS gpu_hours_busy_any
    FROM marts.gpu_busy_by_host_hour AS b
    LEFT JOIN telemetry_models AS t ON t.host = b.host
    LEFT JOIN billed_models AS bm ON bm.host = norm_host(b.host)
    GROUP BY ALL
),
busy_unheld AS (
    -- Each host's busy GPU-hours no workload held (marts.gpu_busy_by_workload_hour's 'unattributed'
    -- minutes: at or over the busy threshold, no workload record names what ran), by its model.
    SELECT b.hour, coalesce(t.gpu_model, bm.gpu_model, 'unknown') AS gpu_model,
           sum(CAST(b.busy_gpu_minutes AS DECIMAL(38, 9))) / 60.0 AS gpu_hours_busy_unheld
    FROM marts.gpu_busy_by_workload_hour AS b
    LEFT JOIN telemetry_models AS t ON t.host = b.host
    LEFT JOIN billed_models AS bm ON bm.host = norm_host(b.host)
    WHERE b.workload_id IS NULL AND b.phase = 'unattributed'
    GROUP BY ALL
),
models AS (
    SELECT gpu_model FROM runs UNION SELECT gpu_model FROM paid UNION SELECT gpu_model FROM busy_unheld
)
SELECT h.hour, g.gpu_model, p.phase, l.load,
       coalesce(held.gpu_hours_held, 0) AS gpu_hours_held,
       -- Of those, held on a host telemetry does not cover in the hour.
       coalesce(held.gpu_hours_held_unseen, 0) AS gpu_hours_held_unseen,
       -- The most GPUs of this model workloads held at once in the hour, of any load and of
       -- recurring load alone: the same on each phase and load row.
       coalesce(held_peaks.gpus_held_peak, 0) AS gpus_held_peak,
       coalesce(held_peaks.gpus_held_peak_recurring, 0) AS gpus_held_peak_recurring,
       -- Training's cards held at each instant of the hour: JSON [{gpus, one_off_gpus, seconds}, …];
       -- the same on each phase and load row, NULL where no training workload of this model ran.
       training_levels.training_levels,
       coalesce(busy.gpu_hours_busy, 0) AS gpu_hours_busy,
       -- GPUs of this model paid for in the hour, whatever ran: the same on each phase and load row.
       coalesce(paid.gpus_paid, 0) AS gpus_paid,
       -- Busy GPU-hours of this model's cards in the hour, workloads or not: the same on each phase and load row.
       coalesce(busy_any.gpu_hours_busy_any, 0) AS gpu_hours_busy_any,
       -- Of those, the busy GPU-hours no workload held: the same on each phase and load row.
       coalesce(busy_unheld.gpu_hours_busy_unheld, 0) AS gpu_hours_busy_unheld
FROM hours AS h
CROSS JOIN models AS g
CROSS JOIN phases AS p
CROSS JOIN loads AS l
LEFT JOIN held ON held.hour = h.hour AND held.gpu_model = g.gpu_model AND held.phase = p.phase AND held.load = l.load
LEFT JOIN held_peaks ON held_peaks.hour = h.hour AND held_peaks.gpu_model = g.gpu_model
LEFT JOIN training_levels ON training_levels.hour = h.hour AND training_levels.gpu_model = g.gpu_model
LEFT JOIN busy ON busy.hour = h.hour AND busy.gpu_model = g.gpu_model AND busy.phase = p.phase AND busy.load = l.load
LEFT JOIN paid ON paid.hour = h.hour AND paid.gpu_model = g.gpu_model
LEFT JOIN busy_any ON busy_any.hour = h.hour AND busy_any.gpu_model = g.gpu_model
LEFT JOIN busy_unheld ON busy_unheld.hour = h.hour AND busy_unheld.gpu_model = g.gpu_model
ORDER BY h.hour, g.gpu_model, p.phase, l.load;
