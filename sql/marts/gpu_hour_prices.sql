-- marts.gpu_hour_prices: what one GPU-hour of a charged GPU resource cost, over each stretch of time
-- in which the resource's charges stay the same. Stretches of a resource never overlap, so an hour
-- of a host meets one row per resource, never one per charge (a charge and its credit would count
-- the hour twice, and averaging them prices it at a fraction of what was paid).
-- The rule: an hour costs what was paid for it. The usage charges (Usage lines not negative, and not
-- the unused part of a commitment: the GPUs running) set the GPUs paid and the usage price, at
-- EffectiveCost, so covered usage is at its commitment's rate; the lines that adjust them in the
-- same hours are added: negations (negative Usage; AWS's savings-plan negations cost 0 and change
-- nothing) and credits. Corrections (ChargeClass Correction: a refund, an earlier invoice restated)
-- are left out: a settlement, not the rate of the hours it names, and not saved by releasing a GPU.
-- A stretch whose credits exceed its charges cost nothing (never a negative price); credits without
-- a usage charge price nothing. Rates are per hour in whole 10^-10 units, then ÷ GPUs.
CREATE OR REPLACE TABLE marts.gpu_hour_prices AS
WITH lines AS (
    SELECT x_ChargeId,
           -- Telemetry and workloads may name the host as the resource's name or its id: keep both.
           norm_host(coalesce(ResourceName, ResourceId)) AS host, norm_host(ResourceId) AS resource_host,
           ResourceId AS resource_id, BillingCurrency AS currency, x_GpuModel AS gpu_model, x_GpuCount AS gpu_count,
           ChargePeriodStart AS period_start, ChargePeriodEnd AS period_end,
           ChargeCategory = 'Usage' AND EffectiveCost >= 0 AND BilledCost >= 0
               AND coalesce(CommitmentDiscountStatus, '') <> 'Unused' AND coalesce(CapacityReservationStatus, '') <> 'Unused' AS usage_charge,
           to_units(EffectiveCost) * 3600 // datediff('second', ChargePeriodStart, ChargePeriodEnd) AS units_per_hour
    FROM core.cost_lines
    WHERE coalesce(x_GpuCount, 0) > 0 AND ChargePeriodEnd > ChargePeriodStart
      AND ChargeCategory IN ('Usage', 'Credit', 'Adjustment') AND ChargeClass IS DISTINCT FROM 'Correction'
),
bounds AS (
    SELECT DISTINCT host, resource_host, resource_id, currency, unnest([period_start, period_end]) AS t FROM lines
),
stretches AS (
    -- Between consecutive starts and ends of the resource's lines: every line covers a stretch whole or not at all.
    SELECT * FROM (
        SELECT host, resource_host, resource_id, currency, t AS period_start,
               lead(t) OVER (PARTITION BY host, resource_host, resource_id, currency ORDER BY t) AS period_end
        FROM bounds)
    WHERE period_end IS NOT NULL
),
priced AS (
    SELECT s.host, s.resource_host, s.resource_id, s.currency, s.period_start, s.period_end,
           max(l.gpu_model) FILTER (WHERE l.usage_charge) AS gpu_model,
           -- Two usage charges of one resource at once bill the same GPUs (say, instance and accelerator lines).
           max(l.gpu_count) FILTER (WHERE l.usage_charge) AS gpu_count,
           sum(l.units_per_hour) FILTER (WHERE l.usage_charge) AS usage_units_per_hour,
           greatest(0, sum(l.units_per_hour)) AS units_per_hour,
           list(l.x_ChargeId ORDER BY l.x_ChargeId) FILTER (WHERE l.usage_charge) AS charge_ids,
           coalesce(list(l.x_ChargeId ORDER BY l.x_ChargeId) FILTER (WHERE NOT l.usage_charge), []) AS adjustment_ids
    FROM stretches AS s
    JOIN lines AS l
      ON l.host = s.host AND l.resource_host IS NOT DISTINCT FROM s.resource_host
     AND l.resource_id IS NOT DISTINCT FROM s.resource_id AND l.currency = s.currency
     AND l.period_start <= s.period_start AND l.period_end >= s.period_end
    GROUP BY ALL
    HAVING bool_or(l.usage_charge)
)
SELECT host, resource_host, resource_id, gpu_model, gpu_count, period_start, period_end, currency,
       from_units(usage_units_per_hour // gpu_count) AS usage_price_per_gpu_hour,
       from_units(units_per_hour // gpu_count) AS price_per_gpu_hour,
       charge_ids, adjustment_ids
FROM priced;
