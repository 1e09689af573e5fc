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
WITH gpu_lines AS (
    SELECT *,
           paid_gpu_seconds(x_GpuCount, ChargePeriodStart, ChargePeriodEnd, ConsumedQuantity, ConsumedUnit) AS own_paid,
           x_GpuCount * datediff('second', ChargePeriodStart, ChargePeriodEnd) AS capacity,
           pays_for_gpu_hours(ChargeCategory, ChargeClass, EffectiveCost, BilledCost, CommitmentDiscountStatus,
                              CapacityReservationStatus) AS usage_charge,
           coalesce(ResourceId, ResourceName) AS resource_of_line
    FROM core.cost_lines
    WHERE coalesce(x_GpuCount, 0) > 0 AND ChargePeriodEnd > ChargePeriodStart
      AND ChargeCategory IN ('Usage', 'Credit', 'Adjustment') AND ChargeClass IS DISTINCT FROM 'Correction'
),
same_period AS (
    -- What the usage lines of each line's resource, currency and period ran of what they could.
    SELECT *, sum(CASE WHEN usage_charge THEN own_paid END) OVER same AS ran, sum(CASE WHEN usage_charge THEN capacity END) OVER same AS could
    FROM gpu_lines
    WINDOW same AS (PARTITION BY resource_of_line, BillingCurrency, ChargePeriodStart, ChargePeriodEnd)
),
usage_periods AS (
    SELECT resource_of_line, BillingCurrency, ChargePeriodStart, ChargePeriodEnd, sum(own_paid) AS ran, sum(capacity) AS could
    FROM gpu_lines WHERE usage_charge GROUP BY ALL
),
usage_inside AS (
    -- A credit or negation with no usage line of its own period (a month's credit over an
    -- instance's daily lines): the usage lines of its resource and currency within its period,
    -- each clipped to it, with what they ran of what they could there (marts.cost_attribution's rule).
    SELECT c.x_ChargeId, greatest(u.ChargePeriodStart, c.ChargePeriodStart) AS s, least(u.ChargePeriodEnd, c.ChargePeriodEnd) AS e,
           part_within(u.ran, u.ChargePeriodStart, u.ChargePeriodEnd, c.ChargePeriodStart, c.ChargePeriodEnd) AS ran,
           part_within(u.could, u.ChargePeriodStart, u.ChargePeriodEnd, c.ChargePeriodStart, c.ChargePeriodEnd) AS could
    FROM same_period AS c
    JOIN usage_periods AS u
      ON u.resource_of_line = c.resource_of_line AND u.BillingCurrency = c.BillingCurrency
     AND u.ChargePeriodStart < c.ChargePeriodEnd AND u.ChargePeriodEnd > c.ChargePeriodStart
    WHERE NOT c.usage_charge AND c.could IS NULL
),
usage_inside_cover AS (
    -- The seconds of each such credit's period its usage covers, overlapping lines once.
    SELECT x_ChargeId, sum(datediff('second', s, e)) AS covered
    FROM (SELECT x_ChargeId, island, min(s) AS s, max(e) AS e
          FROM (SELECT *, sum(CASE WHEN s <= prev_e THEN 0 ELSE 1 END)
                              OVER (PARTITION BY x_ChargeId ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island
                FROM (SELECT *, max(e) OVER (PARTITION BY x_ChargeId ORDER BY s, e
                                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
                      FROM usage_inside))
          GROUP BY x_ChargeId, island)
    GROUP BY x_ChargeId
),
usage_inside_runs AS (
    SELECT u.x_ChargeId, sum(u.ran) AS ran, sum(u.could) AS could, any_value(v.covered) AS covered
    FROM usage_inside AS u JOIN usage_inside_cover AS v USING (x_ChargeId)
    GROUP BY u.x_ChargeId
),
paid AS (
    -- The GPU-seconds each line paid for (paid_gpu_seconds); a credit or negation that states no
    -- quantity pays for what its resource's usage lines of the same period (else inside it) ran of
    -- what they could (followed_paid_gpu_seconds), as marts.cost_attribution splits it.
    SELECT l.* EXCLUDE (ran, could, resource_of_line),
           followed_paid_gpu_seconds(l.own_paid, l.capacity, l.usage_charge, coalesce(l.ran, i.ran), coalesce(l.could, i.could),
                                     i.covered, datediff('second', l.ChargePeriodStart, l.ChargePeriodEnd)) AS paid_gpu_seconds
    FROM same_period AS l
    LEFT JOIN usage_inside_runs AS i USING (x_ChargeId)
),
lines AS (
    SELECT x_ChargeId,
           -- Telemetry and workloads may name the host as the resource's name or its id: keep both. A
           -- host core.host_names gives the resource (an AWS instance's hostname) comes before its name.
           coalesce(n.host, norm_host(coalesce(ResourceName, ResourceId))) AS host, norm_host(ResourceId) AS resource_host,
           norm_host(ResourceName) AS name_host,
           ResourceId AS resource_id, BillingCurrency AS currency, x_GpuModel AS gpu_model, x_GpuCount AS gpu_count,
           ChargePeriodStart AS period_start, ChargePeriodEnd AS period_end,
           usage_charge,
           -- Per hour the resource ran: a CUR hour an instance ran 0.684 h of costs 0.684 of its hourly
           -- price, which its running minutes cost at the full price (paid GPU-seconds ÷ its GPUs).
           to_units(EffectiveCost) * 3600 * x_GpuCount // paid_gpu_seconds AS units_per_hour,
           -- Per hour of the clock: what the stretch's hours cost, run or not (the fleet's hourly bill).
           to_units(EffectiveCost) * 3600 // datediff('second', ChargePeriodStart, ChargePeriodEnd) AS units_per_clock_hour
    FROM paid
    LEFT JOIN core.host_names AS n ON n.resource_id = paid.ResourceId
),
keyed AS (
    -- One text key per resource and currency, so every join below is an equality.
    SELECT *, concat_ws('|', host, resource_host, name_host, resource_id, currency) AS resource_key FROM lines
),
bounds AS (
    -- The resource's line starts and ends in order: stretch n runs from bound n to bound n + 1.
    SELECT resource_key, t, row_number() OVER (PARTITION BY resource_key ORDER BY t) AS n,
           lead(t) OVER (PARTITION BY resource_key ORDER BY t) AS next_t
    FROM (SELECT DISTINCT resource_key, unnest([period_start, period_end]) AS t FROM keyed)
),
line_stretches AS (
    -- Each line on the stretches it covers, found by its own start and end bounds: linear in what
    -- the lines cover (matching every line with every stretch of its resource was quadratic:
    -- 9.6 s for 720,000 hourly lines of 1,000 hosts, against 0.6 s for a row per line).
    SELECT l.*, unnest(range(a.n, b.n)) AS n
    FROM keyed AS l
    JOIN bounds AS a ON a.resource_key = l.resource_key AND a.t = l.period_start
    JOIN bounds AS b ON b.resource_key = l.resource_key AND b.t = l.period_end
),
priced AS (
    SELECT any_value(l.host) AS host, any_value(l.resource_host) AS resource_host, any_value(l.name_host) AS name_host, any_value(l.resource_id) AS resource_id,
           any_value(l.currency) AS currency, s.t AS period_start, s.next_t AS period_end,
           max(l.gpu_model) FILTER (WHERE l.usage_charge) AS gpu_model,
           -- Two usage charges of one resource at once bill the same GPUs (say, instance and accelerator lines).
           max(l.gpu_count) FILTER (WHERE l.usage_charge) AS gpu_count,
           sum(l.units_per_hour) FILTER (WHERE l.usage_charge) AS usage_units_per_hour,
           greatest(0, sum(l.units_per_hour)) AS units_per_hour,
           greatest(0, sum(l.units_per_clock_hour)) AS units_per_clock_hour,
           list_sort(list(l.x_ChargeId) FILTER (WHERE l.usage_charge)) AS charge_ids,
           coalesce(list_sort(list(l.x_ChargeId) FILTER (WHERE NOT l.usage_charge)), []) AS adjustment_ids
    FROM line_stretches AS l
    JOIN bounds AS s USING (resource_key, n)
    GROUP BY l.resource_key, s.t, s.next_t
    HAVING bool_or(l.usage_charge)
)
SELECT host, resource_host, name_host, resource_id, gpu_model, gpu_count, period_start, period_end, currency,
       from_units(usage_units_per_hour // gpu_count) AS usage_price_per_gpu_hour,
       from_units(units_per_hour // gpu_count) AS price_per_gpu_hour,
       from_units(units_per_clock_hour // gpu_count) AS price_per_gpu_clock_hour,
       charge_ids, adjustment_ids
FROM priced;
