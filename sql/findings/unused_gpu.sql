-- findings.unused_gpu: GPUs paid for and not used.
--   idle_run          a GPU whose busy fraction stayed under $idle_busy_threshold for at least
--                     $idle_min_minutes consecutive minutes; a minute without telemetry breaks a run.
--                     Not while findings.overprovisioned_inference prices the host: its paid GPUs
--                     above the load's, idle cards included, are that finding's (valleys are a sizing
--                     question), and counting them here too would count them twice. An inference host
--                     that finding does not price (a steady load on one card of eight), or prices as a
--                     flat load ('rightsizing': replicas' cards at work only), has its idle cards here,
--                     as any host does.
--                     Minutes come from core.gpu_minutes, where each sample covers the time until the
--                     next (within the staleness bound), so a GPU sampled every 5 minutes has every
--                     minute; idle GPU-hours are the minutes' coverage, so the run is the same at any
--                     sampling interval; a MIG instance's are its share of the card's (gpu_share),
--                     so seven idle slices of one card are one idle GPU's hours, not seven.
--                     They are read as marts.gpu_spans_by_day's stretches (a few
--                     rows per GPU and day, built per day) and joined across midnight, so the run is
--                     the same as minute by minute. A run crossing a month boundary is one row per
--                     UTC month (the run's length is judged whole), so each month's leaks hold that
--                     month's hours. The idle GPU-hours inside a checkpoint stall on the host
--                     beyond its GPUs no workload held (findings.slow_disk_idle counted them, up to
--                     what its job waited) are that finding's, not the run's: one leak, its cause
--                     the slow disk.
--   no_telemetry      a GPU usage charge whose host reported no telemetry at all in its period, at
--                     what was paid for it (net of its hours' credits and negations, as priced below),
--                     less the share of its GPU-hours workloads held (their phases have those).
--   partial_telemetry a GPU usage charge whose host reported telemetry for part of its period only:
--                     the GPU-hours paid that neither telemetry covered nor workloads held (at least
--                     those: held hours are subtracted whole, wherever they fell), priced as
--                     no_telemetry prices them. Only when that is a tenth of what was paid and the
--                     host's such charges of the UTC month hold at least $idle_min_minutes of GPU time
--                     together (hourly bills): an exporter that died, or cards that never
--                     reported. Telemetry's own idle minutes are idle runs, so no hour is counted twice.
--   unused_commitment FOCUS lines for GPUs (a GPU model or count on the line) whose commitment or
--                     capacity reservation went unused; other commitments are findings.unused_commitment.
-- Priced at what the host's GPU-hours were paid (marts.gpu_hour_prices: net of credits and negations,
-- one price per resource and hour) where a charge covers the host, else the catalog's.
CREATE OR REPLACE TABLE findings.unused_gpu AS
WITH sized_inference AS (
    -- (A flat load's replicas held above its need are cards at work, never idle ones: its host's idle
    -- cards stay idle runs.)
    SELECT host, period_start, period_end FROM findings.overprovisioned_inference WHERE subkind <> 'rightsizing'
),
idle_spans AS (
    -- Idle stretches (marts.gpu_spans_by_day: a day's, never crossing midnight); one that starts
    -- where the GPU's previous idle stretch ended continues its run.
    SELECT s.*, coalesce(s.span_start = lag(s.span_end) OVER (PARTITION BY s.gpu_key ORDER BY s.span_start), false) AS continues
    FROM marts.gpu_spans_by_day AS s
    WHERE s.idle
      AND NOT EXISTS (SELECT 1 FROM sized_inference AS i
                      WHERE i.host = s.host AND i.period_start < s.span_end AND i.period_end > s.span_start)
),
idle_stretches AS (
    SELECT *, sum(CASE WHEN continues THEN 0 ELSE 1 END) OVER (PARTITION BY gpu_key ORDER BY span_start) AS run_no,
           date_trunc('month', timezone('UTC', span_start)) AS month
    FROM idle_spans
),
long_runs AS (
    SELECT gpu_key, run_no FROM idle_stretches GROUP BY ALL HAVING sum(minutes) >= $idle_min_minutes
),
whole_runs AS (
    SELECT gpu_key, any_value(host) AS host, any_value(gpu_model) AS gpu_model,
           min(span_start) AS period_start, max(span_end) AS period_end,
           CAST(sum(minutes) AS BIGINT) AS minutes, sum(card_coverage_minutes) / 60.0 AS idle_hours,
           sum(coverage_minutes) / 60.0 AS device_hours,
           -- The part of a card the run was (a MIG instance's share, over the run).
           sum(card_coverage_minutes) / sum(coverage_minutes) AS gpu_share,
           sum(busy_minutes) / sum(coverage_minutes) AS mean_busy
    FROM idle_stretches SEMI JOIN long_runs USING (gpu_key, run_no)
    GROUP BY gpu_key, run_no, month
),
stalls AS (
    SELECT resource AS stall, host, period_start, period_end,
           TRY_CAST(evidence ->> 'wasted_gpu_hours' AS DOUBLE) AS stall_gpu_hours,
           -- With no workload record on the host, the stall's job held the GPUs busy just before it (in cards).
           CASE WHEN coalesce(evidence ->> 'workloads', '') = '' THEN TRY_CAST(evidence ->> 'gpu_cards' AS DOUBLE) END AS busy_before_cards,
           datediff('second', period_start, period_end) / 3600.0 AS hours
    FROM findings.slow_disk_idle
),
stall_unheld AS (
    -- The host's GPUs no workload held while the stall ran (its GPUs seen, less those workloads
    -- held; with no workload record, less those busy just before it), in cards as the runs'
    -- hours are (a MIG instance as its share): the stall set them aside as idle, so their idle
    -- runs are not its.
    SELECT s.stall, greatest(0, coalesce(any_value(v.seen_cards), 0)
                                - coalesce(any_value(s.busy_before_cards), sum(workload_cards(w.gpu_cards, w.gpu_count)), 0)) AS unheld_gpus
    FROM stalls AS s
    LEFT JOIN (SELECT stall, sum(gpu_share) AS seen_cards
               FROM (SELECT s2.stall, g.gpu_key, sum(g.card_coverage_minutes) / sum(g.coverage_minutes) AS gpu_share
                     FROM stalls AS s2
                     JOIN marts.gpu_spans_by_day AS g
                       ON g.host = s2.host AND g.span_start < s2.period_end AND g.span_end > s2.period_start
                     GROUP BY s2.stall, g.gpu_key)
               GROUP BY stall) AS v USING (stall)
    LEFT JOIN core.workloads AS w
      ON w.host = s.host AND w.gpu_count > 0 AND w.started_at < s.period_end AND coalesce(w.ended_at, s.period_end) > s.period_start
    GROUP BY s.stall
),
stall_overlaps AS (
    -- The idle GPU-hours of each run inside a checkpoint stall on its host (findings.slow_disk_idle).
    SELECT r.gpu_key, r.period_start, s.stall,
           datediff('second', greatest(r.period_start, s.period_start), least(r.period_end, s.period_end)) / 3600.0
               * r.gpu_share AS overlap_hours
    FROM whole_runs AS r
    JOIN stalls AS s ON s.host = r.host AND s.period_start < r.period_end AND s.period_end > r.period_start
),
stall_shares AS (
    -- What the stall counted of the runs' hours inside it: those beyond the host's unheld GPUs' hours
    -- (idle cards beside the job stay idle runs), at most the GPU-hours its job waited. A card held
    -- by the job and idle through a 7-hour write is one leak (the slow disk), not that and an idle run.
    SELECT o.stall,
           least(coalesce(any_value(s.stall_gpu_hours), 0),
                 greatest(0, sum(o.overlap_hours) - any_value(u.unheld_gpus) * any_value(s.hours)))
               / sum(o.overlap_hours) AS share
    FROM stall_overlaps AS o
    JOIN stalls AS s USING (stall)
    JOIN stall_unheld AS u USING (stall)
    GROUP BY o.stall
    HAVING sum(o.overlap_hours) > 0
),
stalled AS (
    SELECT o.gpu_key, o.period_start, sum(o.overlap_hours * p.share) AS stalled_hours
    FROM stall_overlaps AS o JOIN stall_shares AS p USING (stall)
    GROUP BY o.gpu_key, o.period_start
),
runs AS (
    SELECT r.gpu_key, r.host, r.gpu_model, r.period_start, r.period_end, r.minutes,
           r.idle_hours - coalesce(s.stalled_hours, 0) AS idle_hours, r.device_hours, r.gpu_share, r.mean_busy,
           coalesce(s.stalled_hours, 0) AS stalled_hours
    FROM whole_runs AS r
    LEFT JOIN stalled AS s USING (gpu_key, period_start)
    WHERE r.idle_hours - coalesce(s.stalled_hours, 0) > 0
),
catalog AS (
    SELECT gpu_model, price_per_gpu_hour, currency, provider || ' ' || sku AS sku
    FROM core.price_catalog WHERE price_per_gpu_hour IS NOT NULL AND term = 'on_demand'
    QUALIFY row_number() OVER (PARTITION BY gpu_model ORDER BY price_per_gpu_hour) = 1
),
run_prices AS (
    -- A run may span several stretches of the host's charges: each prices the part of the run it
    -- covers (a stretch is one row per resource however many charges and credits it holds, so no
    -- hour counts twice and no credit is averaged in as if it were a price).
    SELECT r.gpu_key, r.period_start, any_value(p.currency) AS currency,
           from_units(sum(to_units(p.price_per_gpu_hour) * o.seconds) // sum(o.seconds)) AS price_per_gpu_hour
    FROM runs AS r
    JOIN marts.gpu_hour_prices AS p
      ON r.host IN (p.host, p.resource_host, p.name_host) AND p.period_start < r.period_end AND p.period_end > r.period_start,
    LATERAL (SELECT datediff('second', greatest(p.period_start, r.period_start), least(p.period_end, r.period_end)) AS seconds) AS o
    GROUP BY ALL
),
idle_runs AS (
    SELECT 'unused_gpu' AS kind, 'idle_run' AS subkind, r.gpu_key AS resource, r.host, r.period_start, r.period_end,
           price_times(r.idle_hours, coalesce(p.price_per_gpu_hour, k.price_per_gpu_hour)) AS wasted_cost,
           price_times(r.idle_hours, coalesce(p.price_per_gpu_hour, k.price_per_gpu_hour)) AS avoidable_cost,
           coalesce(p.currency, k.currency) AS currency,
           CASE WHEN p.price_per_gpu_hour IS NOT NULL THEN 'charge' WHEN k.price_per_gpu_hour IS NOT NULL THEN 'catalog: ' || k.sku END AS price_source,
           json_object('idle_minutes', r.minutes, 'idle_gpu_hours', round(r.idle_hours, 2), 'mean_busy', round(r.mean_busy, 4),
                       'checkpoint_stall_gpu_hours', round(r.stalled_hours, 4),
                       'threshold', $idle_busy_threshold, 'price_per_gpu_hour', coalesce(p.price_per_gpu_hour, k.price_per_gpu_hour),
                       'gpu_share', r.gpu_share) AS evidence,
           printf('%s sat idle (busy under %.0f %%) for %.1f hours from %s%s. Release it, or give it work: paid cards '
                  || 'idle for days are better returned or moved to on-demand.',
                  r.gpu_key, $idle_busy_threshold * 100, r.device_hours, strftime(r.period_start, '%Y-%m-%d %H:%M UTC'),
                  CASE WHEN r.gpu_share < 1 THEN printf(' (a MIG instance, %.2f of its card: %.1f GPU-hours)', r.gpu_share, r.idle_hours)
                       ELSE '' END) AS recommendation
    FROM runs AS r
    LEFT JOIN run_prices AS p USING (gpu_key, period_start)
    LEFT JOIN catalog AS k ON k.gpu_model = gpu_model_key(r.gpu_model)
),
stretches AS (
    SELECT row_number() OVER (ORDER BY host, resource_host, name_host, resource_id, currency, period_start) AS stretch, * FROM marts.gpu_hour_prices
),
stretch_adjustments AS (
    -- Each stretch's credits and negations as money: each line's EffectiveCost spread over the
    -- stretches of its period that usage charges cover (its own period's, or a month's credit over
    -- the days its instance was billed: the rule of marts.gpu_hour_prices and the attribution).
    SELECT s.stretch, sum(to_units(a.EffectiveCost) * datediff('second', s.period_start, s.period_end) // s.covered_seconds) AS units
    FROM (SELECT *, sum(datediff('second', period_start, period_end)) OVER (PARTITION BY x_ChargeId) AS covered_seconds
          FROM (SELECT stretch, period_start, period_end, unnest(adjustment_ids) AS x_ChargeId FROM stretches)) AS s
    JOIN core.cost_lines AS a USING (x_ChargeId)
    GROUP BY s.stretch
),
charge_parts AS (
    -- Each GPU usage charge's part of each of its stretches (marts.gpu_hour_prices: a credit or a
    -- negation pays for no GPU, so it is no charge here).
    SELECT s.stretch, s.x_ChargeId, s.host, s.resource_host, s.name_host,
           to_units(c.EffectiveCost) * datediff('second', s.period_start, s.period_end)
               // datediff('second', c.ChargePeriodStart, c.ChargePeriodEnd) AS units
    FROM (SELECT *, unnest(charge_ids) AS x_ChargeId FROM stretches) AS s
    JOIN core.cost_lines AS c USING (x_ChargeId)
),
charge_costs AS (
    -- What was paid for the charge: its stretches' credits and negations shared among the usage
    -- charges there by cost (all of them where it is alone), never below zero, as the stretch's price.
    SELECT p.x_ChargeId, any_value(p.host) AS host, any_value(p.resource_host) AS resource_host, any_value(p.name_host) AS name_host,
           sum(greatest(-p.units, coalesce(a.units, 0) * p.units // nullif(p.stretch_units, 0))) AS adjustment_units
    FROM (SELECT *, sum(units) OVER (PARTITION BY stretch) AS stretch_units FROM charge_parts) AS p
    LEFT JOIN stretch_adjustments AS a USING (stretch)
    GROUP BY p.x_ChargeId
),
gpu_charges AS (
    SELECT p.x_ChargeId, p.host, p.resource_host, p.name_host, c.ResourceId AS resource_id, c.x_GpuCount AS gpu_count, c.x_GpuModel AS gpu_model,
           c.ChargePeriodStart AS period_start, c.ChargePeriodEnd AS period_end, c.BillingCurrency AS currency,
           paid_gpu_seconds(c.x_GpuCount, c.ChargePeriodStart, c.ChargePeriodEnd, c.ConsumedQuantity, c.ConsumedUnit)
               AS paid_gpu_seconds,
           from_units(to_units(c.EffectiveCost) + p.adjustment_units) AS EffectiveCost
    FROM charge_costs AS p
    JOIN core.cost_lines AS c USING (x_ChargeId)
),
charge_coverage AS (
    -- The card-seconds the host's telemetry covered in each GPU charge's period: each stretch's
    -- card coverage, in the part of the stretch the period holds.
    SELECT g.x_ChargeId,
           sum(s.card_coverage_minutes * 60.0
               * datediff('second', greatest(s.span_start, g.period_start), least(s.span_end, g.period_end))
               / datediff('second', s.span_start, s.span_end)) AS covered_gpu_seconds
    FROM gpu_charges AS g
    JOIN marts.gpu_spans_by_day AS s
      ON s.host IN (g.host, g.resource_host, g.name_host) AND s.span_start < g.period_end AND s.span_end > g.period_start
    GROUP BY g.x_ChargeId
),
dark_charges AS (
    -- GPU charges whose host reported nothing in their period, or reported for part of it only.
    SELECT c.*, coalesce(v.covered_gpu_seconds, 0) AS covered_gpu_seconds,
           EXISTS (
               -- A minute of the host's telemetry in [period_start, period_end): a stretch holding one.
               -- Its first candidate is the stretch's first minute or the first whole minute of the period.
               SELECT 1 FROM marts.gpu_spans_by_day AS s
               WHERE s.host IN (c.host, c.resource_host, c.name_host)
                 AND greatest(s.span_start, utc_minute_ceil(c.period_start)) < least(s.span_end, c.period_end)
           ) AS reported
    FROM gpu_charges AS c
    LEFT JOIN charge_coverage AS v USING (x_ChargeId)
),
dark_held AS (
    -- GPU-seconds workloads held on a dark charge's host in its period (as marts.cost_attribution
    -- counts them, each rounded to whole seconds), at most what was paid: those hours went to the
    -- workloads' phases, so only the rest is a leak.
    SELECT d.x_ChargeId, d.paid_gpu_seconds,
           least(d.paid_gpu_seconds,
                 coalesce(sum(CAST(round(workload_cards(w.gpu_cards, w.gpu_count)
                                         * datediff('second', greatest(w.started_at, d.period_start),
                                                    least(coalesce(w.ended_at, d.period_end), d.period_end))) AS BIGINT)), 0))
               AS held_gpu_seconds
    FROM dark_charges AS d
    LEFT JOIN core.workloads AS w
      ON (w.host IN (d.host, d.resource_host, d.name_host) OR w.resource_id = d.resource_id)
     AND w.started_at < d.period_end AND coalesce(w.ended_at, d.period_end) > d.period_start
    GROUP BY d.x_ChargeId, d.paid_gpu_seconds
),
dark_parts AS (
    -- The GPU-seconds of each dark charge that nothing known ran on: all of a silent host's paid
    -- seconds but what workloads held; of a host that reported for part of the period, what its
    -- telemetry did not cover less every second workloads held (a lower bound: a held second may
    -- have been a covered one).
    SELECT d.*, h.held_gpu_seconds,
           CASE WHEN d.reported THEN greatest(0, CAST(floor(d.paid_gpu_seconds - d.covered_gpu_seconds) AS BIGINT) - h.held_gpu_seconds)
                ELSE d.paid_gpu_seconds - h.held_gpu_seconds END AS dark_gpu_seconds
    FROM dark_charges AS d
    JOIN dark_held AS h USING (x_ChargeId)
),
dark_months AS (
    -- A partly reporting host's dark time is judged over its UTC month: hourly charges of 8 cards
    -- with 2 that never report are 2 dark GPU-hours each, under the minimum one by one, 336 in a week.
    -- Each charge counts where at least a tenth of it was dark (not a sampling edge's seconds).
    SELECT *, sum(CASE WHEN reported AND paid_gpu_seconds > 0 AND dark_gpu_seconds >= paid_gpu_seconds / 10
                       THEN dark_gpu_seconds ELSE 0 END)
                  OVER (PARTITION BY coalesce(resource_id, host), date_trunc('month', timezone('UTC', period_start)))
                  AS month_dark_gpu_seconds
    FROM dark_parts
),
no_telemetry AS (
    SELECT 'unused_gpu' AS kind, CASE WHEN d.reported THEN 'partial_telemetry' ELSE 'no_telemetry' END AS subkind,
           coalesce(d.resource_id, d.host) AS resource, d.host, d.period_start, d.period_end,
           CASE WHEN NOT d.reported AND (d.held_gpu_seconds = 0 OR coalesce(d.paid_gpu_seconds, 0) <= 0) THEN d.EffectiveCost
                ELSE from_units(to_units(d.EffectiveCost) * d.dark_gpu_seconds // d.paid_gpu_seconds) END
               AS wasted_cost,
           CAST(0 AS DECIMAL(38, 10)) AS avoidable_cost, d.currency, 'charge' AS price_source,
           json_object('gpus', d.gpu_count, 'gpu_model', d.gpu_model, 'charge_id', d.x_ChargeId,
                       'held_gpu_hours', round(d.held_gpu_seconds / 3600, 2),
                       'covered_gpu_hours', round(d.covered_gpu_seconds / 3600, 2),
                       'dark_gpu_hours', round(d.dark_gpu_seconds / 3600, 2)) AS evidence,
           CASE WHEN d.reported THEN
               printf('%s was paid for %.1f GPU-hours (%d GPU%s); its telemetry covered %.1f and workloads held %.1f, so at '
                      || 'least %.1f were paid with no telemetry and no known workload: an exporter that stopped, or cards '
                      || 'that never report. Check its monitoring; if nothing runs on them, release them.',
                      coalesce(d.resource_id, d.host), d.paid_gpu_seconds / 3600, d.gpu_count,
                      CASE WHEN d.gpu_count = 1 THEN '' ELSE 's' END, d.covered_gpu_seconds / 3600,
                      d.held_gpu_seconds / 3600, d.dark_gpu_seconds / 3600)
           WHEN d.held_gpu_seconds = 0 OR coalesce(d.paid_gpu_seconds, 0) <= 0 THEN
               printf('%s was paid for (%d GPU%s) but reported no telemetry at all: an orphaned instance, or a host whose '
                      || 'monitoring is missing. Check it; if nothing runs there, release it.', coalesce(d.resource_id, d.host), d.gpu_count,
                      CASE WHEN d.gpu_count = 1 THEN '' ELSE 's' END)
           ELSE
               printf('%s was paid for (%d GPU%s) and reported no telemetry; workloads held %.1f of its %.1f GPU-hours, '
                      || 'and this is the rest, which nothing known ran on. Check its monitoring, and release it between jobs.',
                      coalesce(d.resource_id, d.host), d.gpu_count, CASE WHEN d.gpu_count = 1 THEN '' ELSE 's' END,
                      d.held_gpu_seconds / 3600, d.paid_gpu_seconds / 3600)
           END AS recommendation
    FROM dark_months AS d
    -- A silent host held the whole period: no leak (the attribution gave it all to the workloads'
    -- phases). A partly reporting host: enough dark time to matter (the doc above).
    WHERE CASE WHEN d.reported
               THEN d.paid_gpu_seconds > 0 AND d.month_dark_gpu_seconds >= $idle_min_minutes * 60
                    AND d.dark_gpu_seconds >= d.paid_gpu_seconds / 10
               ELSE d.paid_gpu_seconds IS NULL OR d.paid_gpu_seconds <= 0 OR d.held_gpu_seconds < d.paid_gpu_seconds END
),
unused_commitments AS (
    SELECT 'unused_gpu' AS kind, 'unused_commitment' AS subkind,
           coalesce(CommitmentDiscountId, CapacityReservationId, ResourceId) AS resource, NULL AS host,
           ChargePeriodStart AS period_start, ChargePeriodEnd AS period_end,
           EffectiveCost AS wasted_cost, EffectiveCost AS avoidable_cost, BillingCurrency AS currency, 'charge' AS price_source,
           json_object('commitment_status', CommitmentDiscountStatus, 'capacity_reservation_status', CapacityReservationStatus,
                       'charge_id', x_ChargeId) AS evidence,
           'A GPU commitment or capacity reservation went unused in this period. Move GPU jobs onto it, or '
           || 'right-size the next purchase.' AS recommendation
    FROM core.cost_lines
    WHERE (CommitmentDiscountStatus = 'Unused' OR CapacityReservationStatus = 'Unused') AND EffectiveCost <> 0
      AND (x_GpuModel IS NOT NULL OR coalesce(x_GpuCount, 0) > 0)
)
SELECT * FROM idle_runs
UNION ALL BY NAME SELECT * FROM no_telemetry
UNION ALL BY NAME SELECT * FROM unused_commitments;
