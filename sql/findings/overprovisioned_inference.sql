-- findings.overprovisioned_inference: inference hosts paid for at their peak around the clock.
-- Per host serving inference: busy GPUs hour by hour (from core.gpu_minutes, busy fraction ×
-- coverage: the same at any sampling interval, summed by hour in marts.gpu_busy_by_host_hour) against the GPUs
-- paid in that hour and what each cost, net of credits (marts.gpu_hour_prices: each hour once).
-- When the peak hour (95th percentile) is at least $inference_min_ratio times the valley (5th
-- percentile), the host is over-provisioned.
-- Wasted: what the fleet paid above a right-sized fleet serving the same load, at the fleet's own
-- price per GPU-hour. A right-sized fleet runs, each hour, the busy GPUs ÷ $inference_target_util,
-- rounded up (never more than were paid), and no GPU in a valley hour (busy under
-- $inference_valley_busy GPUs: a load that a no-GPU mode serves, as the design's hybrid plan does).
-- Not the whole inference spend: the GPU-hours the load needed were money well spent.
-- Avoidable: the best of three remedies. Autoscaling (as right-sized, but at least one GPU every
-- hour); valleys moved to the catalog's cheapest on-demand card in the same currency (autoscaled
-- there); and a no-GPU mode in valleys (the right-sized fleet). On a tie the simpler remedy names
-- the finding (autoscaling, then the cheaper card).
-- A flat load (peak under $inference_min_ratio times the valley) is sized by replicas instead
-- (subkind 'rightsizing'): each inference workload holding GPUs is a replica of its service (its
-- `app` label, else its name without a trailing number: svc-a-0 and svc-a-1 are one service) and
-- of its size in cards, which it keeps (a model sharded over 8 cards needs 8 however idle they
-- are). A fixed fleet for the service's busiest hour is that hour's busy GPUs ÷
-- ($inference_target_util × replica cards) replicas, rounded up, at least one; the replicas held
-- above it, hour by hour, are the waste, priced as above. Only cards at work count
-- (marts.gpu_busy_by_host_hour's active_gpu_minutes): held cards under the idle threshold are
-- findings.unused_gpu's idle runs, which go on counting on such a host, so no hour counts twice.
CREATE OR REPLACE TABLE findings.overprovisioned_inference AS
WITH inference_hosts AS (
    SELECT DISTINCT host FROM core.workloads WHERE phase = 'inference' AND gpu_count > 0
),
busy AS (
    -- Every busy GPU-minute of the host's hour, whatever ran (marts.gpu_busy_by_host_hour, built per day).
    SELECT b.host, b.hour, b.busy_gpu_minutes / 60.0 AS busy_gpus, b.active_gpu_minutes / 60.0 AS active_gpus,
           b.covered_gpu_minutes / 60.0 AS covered_gpus
    FROM marts.gpu_busy_by_host_hour AS b
    WHERE b.host IN (SELECT host FROM inference_hosts)
),
cheapest_card AS (
    SELECT currency, price_per_gpu_hour AS cheap_price, gpu_model || ' (' || provider || ')' AS cheap_card
    FROM core.price_catalog
    WHERE term = 'on_demand' AND price_per_gpu_hour > 0
    QUALIFY row_number() OVER (PARTITION BY currency ORDER BY price_per_gpu_hour, provider) = 1
),
hours AS (
    -- The GPUs paid in the hour and what they cost in it, from the stretches of the host's charges
    -- that overlap the hour (marts.gpu_hour_prices: per resource, net of credits and negations, so a
    -- charge and its credit are one hour at the net price, not two). A resource's GPUs are the most
    -- its stretches in the hour paid for (its stretches follow one another); two resources answering
    -- to the host add up. The cost is each stretch's price per hour of the clock for the part of the
    -- hour it covers: a charge ending at 12:30 pays half of 12:00-13:00, and one starting at 12:30
    -- the other half.
    SELECT host, hour, any_value(busy_gpus) AS busy_gpus, any_value(active_gpus) AS active_gpus,
           any_value(covered_gpus) AS covered_gpus, CAST(sum(gpus) AS INTEGER) AS paid_gpus, from_units(sum(paid_units) // sum(gpus)) AS price_per_gpu_hour, currency
    FROM (SELECT b.host, b.hour, any_value(b.busy_gpus) AS busy_gpus, any_value(b.active_gpus) AS active_gpus,
                 any_value(b.covered_gpus) AS covered_gpus, p.currency,
                 max(p.gpu_count) AS gpus,
                 sum(p.gpu_count * to_units(p.price_per_gpu_clock_hour)
                     * held_us(p.period_start, p.period_end, b.hour, b.hour + INTERVAL 1 HOUR) // 3600000000) AS paid_units
          FROM busy AS b
          JOIN marts.gpu_hour_prices AS p
            ON b.host IN (p.host, p.resource_host, p.name_host) AND p.period_start < b.hour + INTERVAL 1 HOUR AND p.period_end > b.hour
          GROUP BY b.host, b.hour, p.currency, p.resource_id)
    GROUP BY host, hour, currency
),
valley_prices AS (
    SELECT h.*, least(h.price_per_gpu_hour, coalesce(k.cheap_price, h.price_per_gpu_hour)) AS valley_price, k.cheap_card
    FROM hours AS h
    LEFT JOIN cheapest_card AS k ON k.currency = h.currency
),
sized AS (
    SELECT *,
           -- Whole GPUs, so savings stay exact: (GPUs paid − GPUs needed) × DECIMAL price.
           CAST(least(paid_gpus, greatest(1, ceil(busy_gpus / $inference_target_util))) AS INTEGER) AS autoscaled_gpus,
           CAST(CASE WHEN busy_gpus < $inference_valley_busy THEN 0
                     ELSE least(paid_gpus, ceil(busy_gpus / $inference_target_util)) END AS INTEGER) AS right_sized_gpus
    FROM valley_prices
),
per_host AS (
    SELECT host, any_value(currency) AS currency, min(hour) AS period_start, max(hour) + INTERVAL 1 HOUR AS period_end,
           count(*) AS hours, sum(paid_gpus) AS paid_gpu_hours, sum(busy_gpus) AS busy_gpu_hours,
           quantile_cont(busy_gpus, 0.95) AS peak_busy_gpus, quantile_cont(busy_gpus, 0.05) AS valley_busy_gpus,
           sum(paid_gpus * price_per_gpu_hour) AS paid_cost,
           sum((paid_gpus - autoscaled_gpus) * price_per_gpu_hour) AS autoscaling_saving,
           sum(right_sized_gpus) AS right_sized_gpu_hours,
           sum((paid_gpus - right_sized_gpus) * price_per_gpu_hour) AS overprovisioned_cost,
           sum((paid_gpus - right_sized_gpus) * price_per_gpu_hour) AS no_gpu_mode_saving,
           sum(CASE WHEN right_sized_gpus = 0
                    THEN paid_gpus * price_per_gpu_hour - autoscaled_gpus * valley_price
                    ELSE (paid_gpus - autoscaled_gpus) * price_per_gpu_hour END) AS cheaper_card_saving,
           any_value(cheap_card) AS cheap_card,
           sum(CASE WHEN right_sized_gpus = 0 THEN 1 ELSE 0 END) AS valley_hours
    FROM sized
    GROUP BY host
),
peaked AS (
    SELECT * FROM per_host
    WHERE peak_busy_gpus >= $inference_min_ratio * greatest(valley_busy_gpus, 0.001)
      AND greatest(autoscaling_saving, cheaper_card_saving, no_gpu_mode_saving) > 0
),
replicas AS (
    -- Inference workloads holding GPUs on the hosts of a flat load, each a replica of its service:
    -- its `app` label, else its name without a trailing number (svc-a-0, svc-a-1) or, from
    -- Kubernetes, without the generated suffix of a Deployment's pod (one with a pod-template-hash
    -- label: embed-7c6d5f4b9-q1w2e is embed); a number is stripped only after a separator (embed-v2
    -- and embed-v3 stay two), and a name that is only a number (a Slurm job id) is its own service.
    SELECT workload_id, host, started_at, ended_at, workload_cards(gpu_cards, gpu_count) AS replica_cards,
           coalesce(json_extract_string(labels, '$.app'), json_extract_string(labels, '$."app.kubernetes.io/name"'),
                    CASE WHEN named LIKE '%-' || lower(json_extract_string(labels, '$."pod-template-hash"')) || '-_____'
                         THEN regexp_replace(named, '-[a-z0-9]+-[a-z0-9]{5}$', '') END,
                    nullif(regexp_replace(named, '([-_.:][0-9]+)+$', ''), ''),
                    named) AS service
    FROM (SELECT *, lower(trim(coalesce(name, workload_id))) AS named FROM core.workloads)
    WHERE phase = 'inference' AND gpu_count > 0 AND host NOT IN (SELECT host FROM peaked)
),
holders AS (
    -- Per host-hour, the cards every workload holding GPUs there held (any phase, their parts of the hour).
    SELECT w.host, h.hour, sum(workload_cards(w.gpu_cards, w.gpu_count) * held_us(w.started_at, w.ended_at, h.hour, h.hour + INTERVAL 1 HOUR)
                               / 3600000000.0) AS held_cards
    FROM (SELECT DISTINCT host, hour FROM busy WHERE host IN (SELECT host FROM replicas)) AS h
    JOIN core.workloads AS w ON w.host = h.host AND w.gpu_count > 0
     AND w.started_at < h.hour + INTERVAL 1 HOUR AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > h.hour
    GROUP BY ALL
),
service_hours AS (
    -- Per service, replica size and hour with telemetry: the replicas held (their parts of the hour)
    -- and their busy GPUs. Where the service's replicas are the only holders of GPUs on the host that
    -- hour, its busy GPUs are marts.gpu_busy_by_workload_hour's (the host's busy minutes, the busiest
    -- cards the holders'). Beside other holders that split is by cards held, not by who was busy (a
    -- busy service beside an idle job would look half as busy), so the service is taken as busy as
    -- it can be: the host's busy GPUs, up to its own cards. Held cards the telemetry does not cover
    -- count as fully busy (their load is not known). An hour without telemetry has no row: its load
    -- is not known, so none of it is waste.
    SELECT s.*, least(s.held_cards, CASE WHEN round(o.held_cards - s.held_cards, 9) > 0 THEN least(s.held_cards, b.busy_gpus)
                                         ELSE s.split_busy_gpus END
                                    + greatest(0, o.held_cards - b.covered_gpus)) AS busy_gpus
    FROM (SELECT r.host, r.service, r.replica_cards, b.hour,
                 sum(held_us(r.started_at, r.ended_at, b.hour, b.hour + INTERVAL 1 HOUR) / 3600000000.0) AS replicas,
                 replicas * r.replica_cards AS held_cards,
                 sum(b.busy_gpu_minutes) / 60.0 AS split_busy_gpus
          FROM marts.gpu_busy_by_workload_hour AS b
          JOIN replicas AS r ON r.workload_id = b.workload_id AND r.host = b.host
          GROUP BY r.host, r.service, r.replica_cards, b.hour) AS s
    JOIN holders AS o ON o.host = s.host AND o.hour = s.hour
    JOIN busy AS b ON b.host = s.host AND b.hour = s.hour
),
service_fleets AS (
    -- The fixed fleet each service needs in a UTC month: its busiest hour at the target
    -- utilization, whole replicas.
    SELECT host, service, replica_cards, date_trunc('month', timezone('UTC', hour)) AS month,
           max(busy_gpus) AS peak_busy_gpus, max(replicas) AS most_replicas,
           CAST(greatest(1, ceil(max(busy_gpus) / ($inference_target_util * replica_cards))) AS INTEGER) AS needed_replicas
    FROM service_hours
    GROUP BY host, service, replica_cards, date_trunc('month', timezone('UTC', hour))
),
flat_hours AS (
    -- Per host-hour: the cards the replicas held, those a fixed fleet needs (never more than were
    -- held that hour), and what is left of them among the cards at work that are surely theirs (the
    -- host's cards at work less every card they do not hold: an idle replica's card beside another
    -- holder's busy one is an idle run, never a replica too many) and the cards paid. busy_gpus: the
    -- replicas' busy GPUs, never more than the host's.
    SELECT h.host, h.hour, s.month, h.currency, h.paid_gpus, h.price_per_gpu_hour,
           greatest(0, h.active_gpus - greatest(0, h.covered_gpus - s.held_cards)) AS working_cards,
           least(s.held_cards, h.paid_gpus) AS held_cards, s.needed_cards, least(s.busy_gpus, h.busy_gpus) AS busy_gpus,
           greatest(0, least(s.held_cards, h.active_gpus - greatest(0, h.covered_gpus - s.held_cards), h.paid_gpus)
                       - s.needed_cards) AS surplus_cards
    FROM (SELECT sh.host, sh.hour, f.month, sum(sh.held_cards) AS held_cards,
                 sum(least(sh.replicas, f.needed_replicas) * sh.replica_cards) AS needed_cards, sum(sh.busy_gpus) AS busy_gpus
          FROM service_hours AS sh
          JOIN service_fleets AS f
            ON f.host = sh.host AND f.service = sh.service AND f.replica_cards = sh.replica_cards
           AND f.month = date_trunc('month', timezone('UTC', sh.hour))
          GROUP BY sh.host, sh.hour, f.month) AS s
    JOIN hours AS h ON h.host = s.host AND h.hour = s.hour
),
flat_hosts AS (
    -- A host's flat load per UTC month (hidden_costs' period), as idle runs are split at month ends.
    SELECT host, month, currency, min(hour) AS period_start, max(hour) + INTERVAL 1 HOUR AS period_end, count(*) AS hours,
           sum(paid_gpus) AS paid_gpu_hours, sum(held_cards) AS held_gpu_hours, sum(busy_gpus) AS busy_gpu_hours,
           sum(least(held_cards, working_cards)) AS working_gpu_hours, max(busy_gpus) AS peak_busy_gpus,
           sum(surplus_cards) AS surplus_gpu_hours,
           sum(paid_gpus * price_per_gpu_hour) AS paid_cost,
           sum(price_times(surplus_cards, price_per_gpu_hour)) AS surplus_cost
    FROM flat_hours
    GROUP BY host, month, currency
),
flat_services AS (
    -- The services with replicas to spare, in words and in the evidence.
    SELECT host, month,
           string_agg(printf('%s on %d of its %s replicas of %s GPU%s', service, needed_replicas,
                             regexp_replace(CAST(round(most_replicas, 2) AS VARCHAR), '\.0$', ''),
                             regexp_replace(CAST(round(replica_cards, 3) AS VARCHAR), '\.0$', ''),
                             CASE WHEN replica_cards = 1 THEN '' ELSE 's' END), '; '
                      ORDER BY service, replica_cards) AS fleets,
           to_json(list(json_object('service', service, 'replica_cards', replica_cards, 'most_replicas', round(most_replicas, 3),
                                    'needed_replicas', needed_replicas, 'peak_busy_gpus', round(peak_busy_gpus, 3))
                        ORDER BY service, replica_cards)) AS services
    FROM service_fleets
    WHERE round(most_replicas, 9) > needed_replicas
    GROUP BY host, month
)
SELECT
    'overprovisioned_inference' AS kind,
    CASE greatest(autoscaling_saving, cheaper_card_saving, no_gpu_mode_saving)
        WHEN autoscaling_saving THEN 'autoscaling'
        WHEN cheaper_card_saving THEN 'cheaper_card_in_valleys'
        ELSE 'no_gpu_mode'
    END AS subkind,
    host AS resource, host, period_start, period_end,
    CAST(overprovisioned_cost AS DECIMAL(38, 10)) AS wasted_cost,
    CAST(greatest(autoscaling_saving, cheaper_card_saving, no_gpu_mode_saving) AS DECIMAL(38, 10)) AS avoidable_cost,
    currency, 'charge' AS price_source,
    CAST(paid_cost AS DECIMAL(38, 10)) AS paid_cost,
    json_object('hours', hours, 'paid_gpu_hours', paid_gpu_hours, 'busy_gpu_hours', round(busy_gpu_hours, 2),
                'right_sized_gpu_hours', right_sized_gpu_hours, 'paid_cost', paid_cost,
                'peak_busy_gpus', round(peak_busy_gpus, 3), 'valley_busy_gpus', round(valley_busy_gpus, 3),
                'peak_valley_ratio', round(peak_busy_gpus / greatest(valley_busy_gpus, 0.001), 1),
                'autoscaling_saving', autoscaling_saving, 'no_gpu_mode_saving', no_gpu_mode_saving,
                'cheaper_card_saving', cheaper_card_saving, 'cheaper_card', cheap_card,
                'valley_hours', valley_hours, 'target_utilization', $inference_target_util) AS evidence,
    printf('%s served inference at %.0f %% utilization: its peak hour is %.0fx its valley, and it paid %d GPU-hours '
           || '(%s %s) where a right-sized fleet needs %d. Scaling to no GPU in the '
           || '%d valley hours saves %s %s; serving the valleys on %s saves %s %s; autoscaling to %.0f %% '
           || 'utilization saves %s %s.',
           host, 100 * busy_gpu_hours / paid_gpu_hours, peak_busy_gpus / greatest(valley_busy_gpus, 0.001),
           paid_gpu_hours, CAST(round(paid_cost, 2) AS VARCHAR), currency, right_sized_gpu_hours, valley_hours,
           CAST(round(no_gpu_mode_saving, 2) AS VARCHAR), currency, coalesce(cheap_card, 'a cheaper card'),
           CAST(round(cheaper_card_saving, 2) AS VARCHAR), currency, 100 * $inference_target_util,
           CAST(round(autoscaling_saving, 2) AS VARCHAR), currency) AS recommendation
FROM peaked
UNION ALL BY NAME
SELECT
    'overprovisioned_inference' AS kind, 'rightsizing' AS subkind, f.host AS resource, f.host, f.period_start, f.period_end,
    f.surplus_cost AS wasted_cost, f.surplus_cost AS avoidable_cost, f.currency, 'charge' AS price_source,
    CAST(f.paid_cost AS DECIMAL(38, 10)) AS paid_cost,
    json_object('hours', f.hours, 'paid_gpu_hours', f.paid_gpu_hours, 'held_gpu_hours', round(f.held_gpu_hours, 2),
                'working_gpu_hours', round(f.working_gpu_hours, 2), 'busy_gpu_hours', round(f.busy_gpu_hours, 2),
                'surplus_gpu_hours', round(f.surplus_gpu_hours, 2), 'peak_busy_gpus', round(f.peak_busy_gpus, 3),
                'paid_cost', f.paid_cost, 'services', json(s.services), 'target_utilization', $inference_target_util) AS evidence,
    printf('%s served inference at a steady load: its replicas'' cards at work were %.0f %% busy over %.0f GPU-hours, '
           || 'and never more than %s GPUs were busy in an hour. At %.0f %% utilization fewer replicas serve it (%s): '
           || 'the %s GPU-hours held above them cost %s %s. Scale down to those replicas.',
           f.host, 100 * f.busy_gpu_hours / f.working_gpu_hours, f.working_gpu_hours, CAST(round(f.peak_busy_gpus, 2) AS VARCHAR),
           100 * $inference_target_util, s.fleets, CAST(round(f.surplus_gpu_hours, 2) AS VARCHAR),
           CAST(round(f.surplus_cost, 2) AS VARCHAR), f.currency) AS recommendation
FROM flat_hosts AS f
JOIN flat_services AS s ON s.host = f.host AND s.month = f.month
WHERE f.surplus_cost > 0;
