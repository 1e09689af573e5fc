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
CREATE OR REPLACE TABLE findings.overprovisioned_inference AS
WITH inference_hosts AS (
    SELECT DISTINCT host FROM core.workloads WHERE phase = 'inference' AND gpu_count > 0
),
busy AS (
    -- Every busy GPU-minute of the host's hour, whatever ran (marts.gpu_busy_by_host_hour, built per day).
    SELECT b.host, b.hour, b.busy_gpu_minutes / 60.0 AS busy_gpus
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
    -- The GPUs paid in the hour and their price, from the stretch of the host's charges the hour
    -- starts in (marts.gpu_hour_prices: one row per resource, net of credits and negations), so a
    -- charge and its credit are one hour at the net price, not two. Two resources answering to the
    -- host add up.
    SELECT b.host, b.hour, any_value(b.busy_gpus) AS busy_gpus, CAST(sum(p.gpu_count) AS INTEGER) AS paid_gpus,
           -- Per hour of the clock (a GPU of an instance that ran half the hour: half its hourly rate), as
           -- the GPUs are counted per hour paid.
           from_units(sum(p.gpu_count * to_units(p.price_per_gpu_clock_hour)) // sum(p.gpu_count)) AS price_per_gpu_hour, p.currency
    FROM busy AS b
    JOIN marts.gpu_hour_prices AS p
      ON b.host IN (p.host, p.resource_host, p.name_host) AND p.period_start <= b.hour AND p.period_end > b.hour
    GROUP BY b.host, b.hour, p.currency
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
FROM per_host
WHERE peak_busy_gpus >= $inference_min_ratio * greatest(valley_busy_gpus, 0.001)
  AND greatest(autoscaling_saving, cheaper_card_saving, no_gpu_mode_saving) > 0;
