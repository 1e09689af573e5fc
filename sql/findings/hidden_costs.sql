-- findings.hidden_costs: the leaks a person acts on, one row per (kind, subkind, thing to act on,
-- UTC month, billing currency), ranked by avoidable cost in the reporting currency.
-- The per-kind tables hold one row per GPU, object, checkpoint or charge; here they are grouped by
-- what one person fixes: a host's idle cards (unused_gpu idle_run) and a host's checkpoint stalls
-- (slow_disk_idle) by host, a bucket's repeated downloads by bucket (the part of
-- 'bucket/object' before the first '/'), everything else (an egress resource, a commitment, an
-- inference service, a dark instance) by its resource. A detail belongs to the month its leak
-- started in (idle runs are already split at month boundaries). Each detail is in `evidence`
-- (`details`, money as exact decimal strings), largest first.
-- Money: each detail is converted at the rate of its own start day (ASOF, at most
-- $max_rate_age_days old) and the finding's reporting amounts are the sums; one detail without a
-- rate leaves them NULL and the finding 'unrated'. Severity: high from $severity_high avoidable,
-- medium from $severity_medium, else low. Findings that wasted less than $min_finding_cost are left
-- out (their details stay in the per-kind tables). The three are stated in $thresholds_currency
-- (USD unless set) and converted into the reporting currency at the rate of the finding's start day,
-- so a leak is as severe in a KRW report as in a USD one; with no rate between the two currencies
-- they are read as amounts of the reporting currency.
-- finding_id is stable across runs: kind, subkind, thing, month and currency.
CREATE OR REPLACE TABLE findings.hidden_costs AS
WITH all_findings AS (
    SELECT * FROM findings.egress
    UNION ALL BY NAME SELECT * FROM findings.slow_disk_idle
    UNION ALL BY NAME SELECT * FROM findings.unused_gpu
    UNION ALL BY NAME SELECT * FROM findings.unused_commitment
    UNION ALL BY NAME SELECT * FROM findings.overprovisioned_inference
),
converted AS (
    SELECT f.*,
           CASE
               WHEN f.kind IN ('unused_gpu', 'slow_disk_idle') AND f.subkind NOT IN ('no_telemetry', 'partial_telemetry') THEN coalesce(f.host, f.resource)
               WHEN f.kind = 'egress' AND f.subkind = 'repeated_download' THEN split_part(f.resource, '/', 1)
               ELSE f.resource
           END AS target,
           strftime(timezone('UTC', f.period_start), '%Y-%m') AS period,
           CASE
               WHEN f.currency = $reporting_currency THEN CAST(1 AS DECIMAL(38, 12))
               WHEN utc_day(f.period_start) - fx.rate_date <= $max_rate_age_days THEN fx.rate
           END AS fx_rate
    FROM all_findings AS f
    ASOF LEFT JOIN core.fx_rates AS fx
      ON fx.from_currency = f.currency AND fx.to_currency = $reporting_currency AND fx.rate_date <= utc_day(f.period_start)
),
grouped AS (
    SELECT kind, subkind, target AS resource, period, currency,
           CASE WHEN count(DISTINCT host) = 1 THEN any_value(host) END AS host,
           min(period_start) AS period_start, max(period_end) AS period_end,
           count(*) AS items, count(DISTINCT resource) AS resources,
           -- Idle runs of MIG instances (evidence gpu_share under 1: a slice of a card, priced as its share).
           count(DISTINCT resource) FILTER (WHERE TRY_CAST(evidence ->> 'gpu_share' AS DOUBLE) < 1) AS mig_resources,
           sum(wasted_cost) AS wasted_cost, sum(avoidable_cost) AS avoidable_cost,
           -- Converted detail by detail (each at its own day's rate), then summed.
           CASE WHEN bool_and(fx_rate IS NOT NULL) THEN sum(convert_money(wasted_cost, fx_rate)) END AS wasted_cost_reporting,
           CASE WHEN bool_and(fx_rate IS NOT NULL) THEN sum(convert_money(avoidable_cost, fx_rate)) END AS avoidable_cost_reporting,
           CASE WHEN count(DISTINCT price_source) = 1 THEN any_value(price_source)
                ELSE string_agg(DISTINCT price_source, '; ' ORDER BY price_source) END AS price_source,
           sum(TRY_CAST(evidence ->> 'idle_gpu_hours' AS DOUBLE)) AS idle_gpu_hours,
           sum(TRY_CAST(evidence ->> 'wasted_gpu_hours' AS DOUBLE)) AS wasted_gpu_hours,
           sum(coalesce(TRY_CAST(evidence ->> 'total_gb' AS DOUBLE), TRY_CAST(evidence ->> 'gb' AS DOUBLE))) AS gb,
           sum(TRY_CAST(evidence ->> 'downloads' AS BIGINT)) AS downloads,
           any_value(recommendation) AS only_recommendation,
           to_json(list(json_object(
               'resource', resource, 'period_start', period_start, 'period_end', period_end,
               'wasted_cost', CAST(wasted_cost AS VARCHAR), 'avoidable_cost', CAST(avoidable_cost AS VARCHAR),
               'evidence', evidence, 'recommendation', recommendation)
               ORDER BY avoidable_cost DESC, wasted_cost DESC, resource, period_start)) AS details
    FROM converted
    GROUP BY kind, subkind, target, period, currency
),
described AS (
    SELECT *,
           substr(md5(kind || '|' || subkind || '|' || resource || '|' || period || '|' || currency), 1, 16) AS finding_id,
           CASE
               WHEN kind = 'unused_gpu' AND subkind = 'idle_run' THEN printf('%d idle %s on %s', resources, idle_noun, resource)
               WHEN kind = 'unused_gpu' AND subkind = 'no_telemetry' THEN 'Paid GPUs with no telemetry: ' || resource
               WHEN kind = 'unused_gpu' AND subkind = 'partial_telemetry' THEN 'Paid GPUs with telemetry for part of the time: ' || resource
               WHEN kind = 'unused_gpu' AND subkind = 'unused_commitment' THEN 'Unused GPU commitment ' || resource
               WHEN kind = 'unused_commitment' THEN 'Unused ' || replace(subkind, '_', ' ') || ' ' || resource
               WHEN kind = 'egress' AND subkind = 'repeated_download' THEN 'Repeated downloads from ' || resource
               WHEN kind = 'egress' THEN replace(subkind, '_', '-') || ' egress from ' || resource
               WHEN kind = 'slow_disk_idle' THEN 'GPUs waiting on checkpoint writes on ' || resource
               WHEN kind = 'overprovisioned_inference' AND subkind = 'rightsizing' THEN 'Inference on ' || resource || ' on more replicas than its load needs'
               WHEN kind = 'overprovisioned_inference' THEN 'Inference on ' || resource || ' sized for its peak'
               ELSE replace(kind, '_', ' ') || ': ' || resource
           END AS title,
           CASE
               WHEN items = 1 THEN only_recommendation
               WHEN kind = 'unused_gpu' AND subkind = 'idle_run' THEN
                   printf('%d %s on %s sat idle (busy under %.0f %%) for %.0f GPU-hours in %s, over %d idle runs. '
                          || 'Release the idle cards or move them to on-demand; or send queued jobs to this host first.',
                          resources, idle_noun, resource, $idle_busy_threshold * 100, coalesce(idle_gpu_hours, 0), period, items)
               WHEN kind = 'slow_disk_idle' THEN
                   printf('%d checkpoint writes on %s kept GPUs waiting for %.1f GPU-hours in %s. '
                          || 'Write checkpoints to local NVMe and copy them out asynchronously.',
                          items, resource, coalesce(wasted_gpu_hours, 0), period)
               WHEN kind = 'egress' AND subkind = 'repeated_download' THEN
                   printf('%d objects in %s were downloaded repeatedly from outside the cloud in %s (%d downloads, %.0f GB). '
                          || 'Serve them from a local cache or an internal NAS.',
                          resources, resource, period, coalesce(downloads, 0), coalesce(gb, 0))
               WHEN kind = 'egress' THEN
                   printf('%.0f GB left %s over %d days in %s. Find out who downloads it; keep repeated reads in the '
                          || 'same region or on a cache.', coalesce(gb, 0), resource, items, period)
               ELSE printf('%d %s findings on %s in %s (see the evidence for each). ', items, replace(kind, '_', ' '), resource, period)
                    || only_recommendation
           END AS recommendation
    FROM (SELECT *,
                 CASE WHEN mig_resources = 0 THEN CASE WHEN resources = 1 THEN 'GPU' ELSE 'GPUs' END
                      WHEN mig_resources = resources THEN CASE WHEN resources = 1 THEN 'MIG instance' ELSE 'MIG instances' END
                      ELSE 'GPUs and MIG instances' END AS idle_noun
          FROM grouped)
),
thresholded AS (
    -- 1 unit of the thresholds' currency in the reporting currency, on the finding's start day.
    SELECT d.*,
           CASE WHEN $thresholds_currency = $reporting_currency THEN CAST(1 AS DECIMAL(38, 12))
                ELSE coalesce(t.rate, CAST(1 AS DECIMAL(38, 12))) END AS threshold_rate
    FROM described AS d
    ASOF LEFT JOIN core.fx_rates AS t
      ON t.from_currency = $thresholds_currency AND t.to_currency = $reporting_currency AND t.rate_date <= utc_day(d.period_start)
)
SELECT
    finding_id,
    CAST(row_number() OVER (ORDER BY avoidable_cost_reporting DESC NULLS LAST, wasted_cost_reporting DESC NULLS LAST,
                                     avoidable_cost DESC, finding_id) AS INTEGER) AS rank,
    kind, subkind, resource, host, title, period, period_start, period_end, items,
    wasted_cost, avoidable_cost, currency,
    wasted_cost_reporting, avoidable_cost_reporting, $reporting_currency AS reporting_currency,
    CASE
        WHEN avoidable_cost_reporting IS NULL THEN 'unrated'  -- no FX rate: the amount cannot be compared with the thresholds
        WHEN avoidable_cost_reporting >= $severity_high * threshold_rate THEN 'high'
        WHEN avoidable_cost_reporting >= $severity_medium * threshold_rate THEN 'medium'
        ELSE 'low'
    END AS severity,
    price_source,
    json_object('items', items, 'resources', resources, 'idle_gpu_hours', round(idle_gpu_hours, 2),
                'wasted_gpu_hours', round(wasted_gpu_hours, 4), 'gb', round(gb, 3), 'downloads', downloads,
                'details', details) AS evidence,
    recommendation
FROM thresholded
WHERE wasted_cost_reporting IS NULL OR wasted_cost_reporting >= $min_finding_cost * threshold_rate
ORDER BY rank;
