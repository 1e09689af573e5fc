-- marts.cost_attribution: every charge split into ML phases, one row per charge, phase and method:
-- a part per phase, except that a GPU charge's time held by workloads without a phase and its busy
-- time nobody held are both 'unattributed' (methods workload_overlap and busy_telemetry).
--
-- Order of evidence:
--   1. a phase tag on the charge (tag keys: $phase_tag_keys); an untagged credit or
--      negation of a GPU charge: the tag its resource's usage lines of the same
--      charge period (else inside it) all carry                                  → method 'tag'
--   2. GPU charges: workloads on the charged host during the charge period, split
--      by GPU-seconds held (in cards: a MIG instance as its share of the card)    → 'workload_overlap'
--      of the GPU-seconds paid (paid_gpu_seconds: the GPUs over the period, or the
--      part of it the line's ConsumedQuantity says they ran)
--      paid GPU-seconds nobody held while telemetry shows the host's GPUs busy
--      (at or over $idle_busy_threshold, beyond the GPUs workloads held that
--      minute) go to 'unattributed', never 'idle'                                  → 'busy_telemetry'
--      the rest of the paid GPU-seconds nobody held (idle or unmonitored) go to
--      'idle'                                                                     → 'no_workload'
--   3. other charges: the first charge rule (charge_rules: one row per condition)
--      whose conditions all match                                                → 'rule'
--   4. anything else                                                             → 'unattributed'
--
-- Money is conserved exactly: each part is floor(cost × weight / total) in 10^-10 units, and the
-- rounding residue goes to the charge's largest part (ties by phase name), so the parts of a
-- charge always add up to its EffectiveCost, and to its x_EffectiveCostReporting.
--
-- Built per billing month ($billing_months: YYYY-MM, 'unknown' for lines without a billing period;
-- ['*'] builds every month): a run re-attributes only the months whose inputs changed
-- (pipelines/warehouse/periods.py, MONTHLY_MARTS). The months are tested as a range first, which
-- skips the other months' row groups of core.cost_lines. Kept in the lake like core.cost_lines: a
-- Parquet folder per billing month, read through a view (pipelines/warehouse/lake_tables.py).
CREATE OR REPLACE TABLE marts.cost_attribution AS
WITH charges AS (
    SELECT
        x_ChargeId,
        BillingPeriodStart,
        ChargePeriodStart,
        coalesce(ChargePeriodEnd, ChargePeriodStart) AS ChargePeriodEnd,
        EffectiveCost,
        x_EffectiveCostReporting,
        coalesce(x_GpuCount, 0) AS gpu_count,
        ConsumedQuantity,
        ConsumedUnit,
        -- A credit or negation of a GPU charge is split like the charge, but pays for no GPU-hours of its own.
        pays_for_gpu_hours(ChargeCategory, ChargeClass, EffectiveCost, BilledCost, CommitmentDiscountStatus,
                           CapacityReservationStatus) AS pays_for_gpu_hours,
        ResourceId,
        ResourceName,
        SkuId,
        coalesce(SubAccountName, SubAccountId) AS sub_account,
        ServiceName,
        (
            SELECT lower(replace(replace(json_extract_string(Tags, '$."' || k || '"'), '-', ''), '_', ''))
            FROM unnest($phase_tag_keys::VARCHAR[]) AS keys(k)
            WHERE json_valid(Tags) AND json_extract_string(Tags, '$."' || k || '"') IS NOT NULL
            LIMIT 1
        ) AS tag_value
    FROM core.cost_lines
    WHERE in_listed_months(BillingPeriodStart, $billing_months)
),
usage_runs AS (
    -- What the GPU usage lines of each resource and charge period ran of what they could: a credit
    -- or negation of theirs that states no quantity pays for the same share. And the phase their
    -- tags name, where they all name the same one: an untagged refund of a tagged VM's usage gives
    -- back that phase's money, not idle time's.
    SELECT coalesce(ResourceId, ResourceName) AS resource_key, ChargePeriodStart, ChargePeriodEnd,
           sum(paid_gpu_seconds(gpu_count, ChargePeriodStart, ChargePeriodEnd, ConsumedQuantity, ConsumedUnit)) AS ran,
           sum(gpu_count * datediff('second', ChargePeriodStart, ChargePeriodEnd)) AS could,
           CASE WHEN count(*) FILTER (WHERE tag_value IN ('pretraining', 'finetuning', 'inference')) = count(*)
                     AND count(DISTINCT tag_value) = 1
                THEN any_value(tag_value) END AS tag_phase
    FROM charges
    WHERE gpu_count > 0 AND pays_for_gpu_hours
    GROUP BY ALL
),
same_period AS (
    -- Each GPU credit or negation's usage lines of the same resource and charge period (a CUR's
    -- hourly negations): an equality join, so what is left for the range join below is only the
    -- credits no usage line of their own period answers.
    SELECT c.*, u.ran, u.could, u.tag_phase AS usage_tag_phase
    FROM charges AS c
    LEFT JOIN usage_runs AS u
      ON c.gpu_count > 0 AND NOT c.pays_for_gpu_hours AND u.resource_key = coalesce(c.ResourceId, c.ResourceName)
     AND u.ChargePeriodStart = c.ChargePeriodStart AND u.ChargePeriodEnd = c.ChargePeriodEnd
),
usage_inside AS (
    -- A credit with none (a month's credit over an instance's daily lines): the usage lines of its
    -- resource within its period, each clipped to it (a day billed from noon to noon counts the
    -- part inside), with what they ran of what they could in that part. A credit's whole period
    -- counted as paid time put the days its instance was not billed in `idle`, as negative money.
    SELECT c.x_ChargeId, greatest(u.ChargePeriodStart, c.ChargePeriodStart) AS s, least(u.ChargePeriodEnd, c.ChargePeriodEnd) AS e,
           part_within(u.ran, u.ChargePeriodStart, u.ChargePeriodEnd, c.ChargePeriodStart, c.ChargePeriodEnd) AS ran,
           part_within(u.could, u.ChargePeriodStart, u.ChargePeriodEnd, c.ChargePeriodStart, c.ChargePeriodEnd) AS could,
           u.tag_phase
    FROM same_period AS c
    JOIN usage_runs AS u
      ON u.resource_key = coalesce(c.ResourceId, c.ResourceName)
     AND u.ChargePeriodStart < c.ChargePeriodEnd AND u.ChargePeriodEnd > c.ChargePeriodStart
    WHERE c.gpu_count > 0 AND NOT c.pays_for_gpu_hours AND c.could IS NULL
      AND u.ChargePeriodEnd > u.ChargePeriodStart
),
usage_inside_islands AS (
    -- The clipped usage periods merged where they overlap (hourly and daily lines of one day), so
    -- the time they cover counts once.
    SELECT *, sum(CASE WHEN s <= prev_e THEN 0 ELSE 1 END) OVER (PARTITION BY x_ChargeId ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island
    FROM (SELECT *, max(e) OVER (PARTITION BY x_ChargeId ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
          FROM usage_inside)
),
credit_cover AS (
    -- The seconds of each such credit's period its usage covers, overlaps once.
    SELECT x_ChargeId, sum(datediff('second', s, e)) AS covered
    FROM (SELECT x_ChargeId, island, min(s) AS s, max(e) AS e FROM usage_inside_islands GROUP BY x_ChargeId, island)
    GROUP BY x_ChargeId
),
credit_usage AS (
    SELECT u.x_ChargeId, sum(u.ran) AS ran, sum(u.could) AS could, any_value(v.covered) AS covered,
           CASE WHEN count(u.tag_phase) = count(*) AND count(DISTINCT u.tag_phase) = 1 THEN any_value(u.tag_phase) END AS tag_phase
    FROM usage_inside AS u JOIN credit_cover AS v USING (x_ChargeId)
    GROUP BY u.x_ChargeId
),
classified AS (
    SELECT c.* EXCLUDE (ran, could, usage_tag_phase),
        CASE WHEN c.tag_value IN ('pretraining', 'finetuning', 'inference') THEN c.tag_value
             WHEN c.tag_value IS NULL THEN coalesce(c.usage_tag_phase, i.tag_phase) END AS tag_phase,
        c.tag_value IS NULL AND coalesce(c.usage_tag_phase, i.tag_phase) IS NOT NULL AS tag_of_usage,
        -- Its GPUs over the charge period, or the part of it the consumed quantity says they ran (a
        -- credit: the part its usage lines ran).
        followed_paid_gpu_seconds(
            paid_gpu_seconds(c.gpu_count, c.ChargePeriodStart, c.ChargePeriodEnd, c.ConsumedQuantity, c.ConsumedUnit),
            c.gpu_count * datediff('second', c.ChargePeriodStart, c.ChargePeriodEnd), c.pays_for_gpu_hours,
            coalesce(c.ran, i.ran), coalesce(c.could, i.could), i.covered, datediff('second', c.ChargePeriodStart, c.ChargePeriodEnd))
            AS paid_gpu_seconds
    FROM same_period AS c
    LEFT JOIN credit_usage AS i USING (x_ChargeId)
),
gpu_charges AS (
    -- The GPU charges that workloads and telemetry split, with the hosts their resource may be: its
    -- id's, its name's, and the one core.host_names gives it (an AWS instance's hostname).
    SELECT c.x_ChargeId, c.ChargePeriodStart, c.ChargePeriodEnd, c.gpu_count, c.ResourceId,
           norm_host(c.ResourceId) AS id_host, norm_host(c.ResourceName) AS name_host, n.host AS named_host
    FROM classified AS c
    LEFT JOIN core.host_names AS n ON n.resource_id = c.ResourceId
    WHERE c.tag_phase IS NULL AND c.paid_gpu_seconds > 0
),
charge_hosts AS (
    -- One row per GPU charge and host it may be, so workloads and telemetry are joined on equality
    -- (a join on `host IN (id's, name's)` compares every charge with every minute on Spark).
    SELECT x_ChargeId, ChargePeriodStart, ChargePeriodEnd, gpu_count, id_host AS host FROM gpu_charges WHERE id_host IS NOT NULL
    UNION
    SELECT x_ChargeId, ChargePeriodStart, ChargePeriodEnd, gpu_count, name_host AS host FROM gpu_charges WHERE name_host IS NOT NULL
    UNION
    SELECT x_ChargeId, ChargePeriodStart, ChargePeriodEnd, gpu_count, named_host AS host FROM gpu_charges WHERE named_host IS NOT NULL
),
charge_workloads AS (
    -- Workloads on the charged resource inside the charge period: on one of its hosts, or else (on
    -- another host) naming its resource id; two joins on equality, no pair in both.
    SELECT x_ChargeId, workload_id, phase, gpu_count, workload_cards(gpu_cards, gpu_count) AS gpu_cards,
           gpu_cards IS NULL AS unsized,
           greatest(started_at, ChargePeriodStart) AS held_from,
           least(coalesce(ended_at, ChargePeriodEnd), ChargePeriodEnd) AS held_to
    FROM (SELECT c.x_ChargeId, c.ChargePeriodStart, c.ChargePeriodEnd,
                 w.workload_id, w.phase, w.gpu_count, w.gpu_cards, w.started_at, w.ended_at
          FROM charge_hosts AS c
          JOIN core.workloads AS w ON w.host = c.host
          UNION ALL
          SELECT c.x_ChargeId, c.ChargePeriodStart, c.ChargePeriodEnd,
                 w.workload_id, w.phase, w.gpu_count, w.gpu_cards, w.started_at, w.ended_at
          FROM gpu_charges AS c
          JOIN core.workloads AS w
            ON w.resource_id = c.ResourceId AND NOT coalesce(w.host IN (c.id_host, c.name_host, c.named_host), false))
    WHERE started_at < ChargePeriodEnd AND coalesce(ended_at, ChargePeriodEnd) > ChargePeriodStart
),
held AS (
    -- GPU-seconds each workload held on the charged resource inside the charge period, in cards as the
    -- charge counts GPUs (a 1g.10gb MIG instance of an A100 for an hour: 514 of 3,600), each rounded
    -- to whole seconds, so their sum does not depend on the order it is taken in.
    SELECT x_ChargeId, phase,
           sum(CAST(round(gpu_cards * datediff('second', held_from, held_to)) AS BIGINT)) AS gpu_seconds,
           string_agg(workload_id, ', ' ORDER BY workload_id) AS workloads
    FROM charge_workloads
    GROUP BY x_ChargeId, phase
),
busy_gpus AS (
    -- Per GPU charge and minute: the charged host's GPUs busy at or over $idle_busy_threshold
    -- (time-weighted, so the same at any sampling interval; a minute without telemetry is no evidence):
    -- busy_gpus in cards (a MIG instance as its share of the card, core.gpu_minutes' gpu_share), as the
    -- charge counts GPUs; busy_devices counting a MIG instance as one, as the workloads holding it do.
    SELECT c.x_ChargeId, m.minute, any_value(c.gpu_count) AS gpu_count,
           sum(m.coverage * m.gpu_share) AS busy_gpus, sum(m.coverage) AS busy_devices
    FROM charge_hosts AS c
    JOIN core.gpu_minutes AS m
      ON m.host = c.host
     AND m.minute >= c.ChargePeriodStart AND m.minute < c.ChargePeriodEnd
    WHERE m.busy_fraction >= $idle_busy_threshold
    GROUP BY c.x_ChargeId, m.minute
),
busy_minutes AS (
    SELECT b.x_ChargeId, b.minute, any_value(b.gpu_count) AS gpu_count, any_value(b.busy_gpus) AS busy_gpus,
           any_value(b.busy_devices) AS busy_devices,
           -- A workload holds its GPUs for the part of the minute it ran (a job of 30 s: half of it).
           coalesce(sum(w.gpu_count * held_in_minute(w.held_from, w.held_to, b.minute)), 0) AS held_gpus,
           coalesce(sum(w.gpu_cards * held_in_minute(w.held_from, w.held_to, b.minute)), 0) AS held_cards,
           coalesce(sum(w.gpu_count) FILTER (WHERE w.unsized), 0) AS held_unsized
    FROM busy_gpus AS b
    LEFT JOIN charge_workloads AS w
      ON w.x_ChargeId = b.x_ChargeId AND w.held_from < b.minute + INTERVAL 1 MINUTE AND w.held_to > b.minute
    GROUP BY b.x_ChargeId, b.minute
),
busy_unheld AS (
    -- GPU-seconds busy beyond the GPUs workloads held that minute: used by something with no record.
    -- With no workload holding GPUs, the busy cards; with workloads that name the MIG profiles they
    -- hold (gpu_cards), the busy cards less the cards held. A workload that names none holds whole
    -- GPUs or slices of unknown size (MIG's single strategy advertises a slice as nvidia.com/gpu):
    -- with one of those, also the busy GPUs less the GPUs held counting a MIG instance as one, if
    -- that is more (a whole busy card beside a job on one slice is not idle). Whole GPUs count the
    -- same every way.
    SELECT x_ChargeId, sum(unheld) * 60 AS gpu_seconds, count(*) FILTER (WHERE unheld > 0) AS minutes
    FROM (SELECT x_ChargeId,
                 CASE WHEN held_gpus = 0 THEN least(gpu_count, busy_gpus)
                      WHEN held_unsized = 0 THEN greatest(0, least(gpu_count, busy_gpus) - held_cards)
                      ELSE greatest(0, least(gpu_count, busy_gpus) - held_cards, least(gpu_count, busy_devices) - held_gpus)
                 END AS unheld
          FROM busy_minutes)
    GROUP BY x_ChargeId
),
-- Charge rules are matched once per distinct (SKU, sub-account, resource, service), not per charge:
-- a pattern read from a table is compiled for every row it meets (17 of 13 s of CPU on a 1M-row CUR).
rule_candidates AS (
    SELECT x_ChargeId, SkuId, sub_account, coalesce(ResourceName, ResourceId) AS resource, ServiceName
    FROM classified
    WHERE tag_phase IS NULL AND paid_gpu_seconds <= 0
),
rule_values AS (SELECT DISTINCT SkuId, sub_account, resource, ServiceName FROM rule_candidates),
value_hits AS (
    SELECT v.SkuId, v.sub_account, v.resource, v.ServiceName, r.rule_order,
           any_value(r.rule_name) AS rule_name, any_value(r.phase) AS phase
    FROM rule_values AS v
    CROSS JOIN charge_rules AS r
    GROUP BY ALL
    HAVING bool_and(coalesce(regexp_matches(
        CASE r.field
            WHEN 'sku' THEN v.SkuId
            WHEN 'sub_account' THEN v.sub_account
            WHEN 'resource' THEN v.resource
            WHEN 'service' THEN v.ServiceName
        END, r.pattern), false))
),
rule_hits AS (
    SELECT c.x_ChargeId, h.rule_order, h.rule_name, h.phase
    FROM rule_candidates AS c
    JOIN value_hits AS h
      ON h.SkuId IS NOT DISTINCT FROM c.SkuId AND h.sub_account IS NOT DISTINCT FROM c.sub_account
     AND h.resource IS NOT DISTINCT FROM c.resource AND h.ServiceName IS NOT DISTINCT FROM c.ServiceName
),
first_rule AS (
    SELECT * FROM rule_hits QUALIFY row_number() OVER (PARTITION BY x_ChargeId ORDER BY rule_order) = 1
),
held_total AS (
    SELECT x_ChargeId, sum(gpu_seconds) AS gpu_seconds FROM held GROUP BY x_ChargeId
),
unheld AS (
    -- Paid GPU-seconds no workload held, split into busy (whole seconds, at most what is unheld) and idle.
    SELECT c.x_ChargeId, c.paid_gpu_seconds,
           greatest(0, c.paid_gpu_seconds - coalesce(t.gpu_seconds, 0)) AS unheld_seconds,
           least(greatest(0, c.paid_gpu_seconds - coalesce(t.gpu_seconds, 0)),
                 CAST(round(coalesce(b.gpu_seconds, 0)) AS BIGINT)) AS busy_seconds,
           coalesce(b.minutes, 0) AS busy_minutes
    FROM classified AS c
    LEFT JOIN held_total AS t USING (x_ChargeId)
    LEFT JOIN busy_unheld AS b USING (x_ChargeId)
    WHERE c.tag_phase IS NULL AND c.paid_gpu_seconds > 0
),
-- A charge goes whole to one phase (tag, rule, no evidence) or is split over several (a GPU charge:
-- workloads, busy, idle). Only split charges need the windows that rank parts and place the
-- rounding residue; a whole charge's part is its amount as it is (most charges: a CUR's non-GPU
-- lines, 8 of 9 s of this model on a 1M-row CUR went to those windows).
-- Each carries its charge's day, month and amounts from `classified` as it is read: joining them
-- back by x_ChargeId (a hash join of every charge on its 32-character id) made this model 2.8-2.9 s
-- instead of 2.4-2.5 s on a 1M-line CUR.
whole_parts AS (
    SELECT x_ChargeId, tag_phase AS phase, 'tag' AS method,
           1 AS weight, 1 AS total_weight, CASE WHEN paid_gpu_seconds > 0 AND pays_for_gpu_hours THEN paid_gpu_seconds END AS gpu_seconds,
           CASE WHEN tag_of_usage THEN json_object('tag_phase', tag_phase, 'tagged', 'its resource''s usage lines')
                ELSE json_object('tag_phase', tag_phase) END AS evidence,
           ChargePeriodStart, BillingPeriodStart, EffectiveCost, x_EffectiveCostReporting
    FROM classified WHERE tag_phase IS NOT NULL
    UNION ALL
    SELECT c.x_ChargeId, r.phase, 'rule', 1, 1, NULL,
           json_object('rule', 'rule ' || r.rule_order || ': ' || r.rule_name),
           c.ChargePeriodStart, c.BillingPeriodStart, c.EffectiveCost, c.x_EffectiveCostReporting
    FROM classified AS c JOIN first_rule AS r USING (x_ChargeId)
    UNION ALL
    SELECT x_ChargeId, 'unattributed', 'no_evidence', 1, 1, NULL,
           json_object('reason', 'no phase tag, no GPU resource to match workloads against, and no charge rule matched'),
           ChargePeriodStart, BillingPeriodStart, EffectiveCost, x_EffectiveCostReporting
    FROM classified
    WHERE tag_phase IS NULL AND paid_gpu_seconds <= 0 AND x_ChargeId NOT IN (SELECT x_ChargeId FROM first_rule)
),
parts AS (
    SELECT h.x_ChargeId, h.phase, 'workload_overlap' AS method,
           h.gpu_seconds AS weight, greatest(c.paid_gpu_seconds, t.gpu_seconds) AS total_weight, h.gpu_seconds,
           json_object('workloads', h.workloads, 'gpu_hours_held', round(h.gpu_seconds / 3600, 3),
                       'gpu_hours_paid', round(c.paid_gpu_seconds / 3600, 3)) AS evidence
    FROM held AS h
    JOIN classified AS c USING (x_ChargeId)
    JOIN held_total AS t USING (x_ChargeId)
    UNION ALL
    SELECT x_ChargeId, 'unattributed', 'busy_telemetry', busy_seconds, paid_gpu_seconds, busy_seconds,
           json_object('gpu_hours_busy_without_workload', round(busy_seconds / 3600, 3), 'busy_minutes', busy_minutes,
                       'busy_threshold', $idle_busy_threshold, 'gpu_hours_paid', round(paid_gpu_seconds / 3600, 3))
    FROM unheld
    WHERE busy_seconds > 0
    UNION ALL
    SELECT x_ChargeId, 'idle', 'no_workload',
           unheld_seconds - busy_seconds, paid_gpu_seconds, unheld_seconds - busy_seconds,
           json_object('gpu_hours_idle', round((unheld_seconds - busy_seconds) / 3600, 3),
                       'gpu_hours_paid', round(paid_gpu_seconds / 3600, 3))
    FROM unheld
    WHERE unheld_seconds > busy_seconds
),
split AS (
    SELECT
        p.*,
        c.ChargePeriodStart,
        c.BillingPeriodStart,
        c.pays_for_gpu_hours,
        to_units(c.EffectiveCost) AS cost_units,
        to_units(c.x_EffectiveCostReporting) AS reporting_units,
        to_units(c.EffectiveCost) * p.weight // p.total_weight AS part_units,
        to_units(c.x_EffectiveCostReporting) * p.weight // p.total_weight AS part_reporting_units,
        row_number() OVER (PARTITION BY p.x_ChargeId ORDER BY p.weight DESC, p.phase) AS rank_in_charge
    FROM parts AS p
    JOIN classified AS c USING (x_ChargeId)
)
SELECT
    x_ChargeId,
    utc_day(ChargePeriodStart) AS charge_day,
    BillingPeriodStart AS billing_period_start,
    phase,
    method,
    from_units(part_units + CASE WHEN rank_in_charge = 1
        THEN cost_units - sum(part_units) OVER (PARTITION BY x_ChargeId) ELSE 0 END) AS amount_billing,
    from_units(part_reporting_units + CASE WHEN rank_in_charge = 1
        THEN reporting_units - sum(part_reporting_units) OVER (PARTITION BY x_ChargeId) ELSE 0 END) AS amount_reporting,
    -- GPU-seconds are whole numbers well inside BIGINT; their sums come out of DuckDB as HUGEINT,
    -- which Parquet (the lake this mart is kept in) would hold only as DOUBLE.
    CAST(CASE WHEN pays_for_gpu_hours THEN gpu_seconds END AS BIGINT) AS gpu_seconds,
    CAST(weight AS BIGINT) AS weight,
    CAST(total_weight AS BIGINT) AS total_weight,
    evidence
FROM split
UNION ALL
SELECT x_ChargeId, utc_day(ChargePeriodStart) AS charge_day, BillingPeriodStart AS billing_period_start, phase, method,
       EffectiveCost AS amount_billing, x_EffectiveCostReporting AS amount_reporting,
       CAST(gpu_seconds AS BIGINT), CAST(weight AS BIGINT), CAST(total_weight AS BIGINT), evidence
FROM whole_parts
-- By day, so a query of some days reads only their row groups. Not by charge and phase too: sorting
-- the wide parts by those held more than the write's memory (4.3 against 3.3-3.7 s at 1M lines).
ORDER BY charge_day;
