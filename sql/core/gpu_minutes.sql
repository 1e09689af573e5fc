-- core.gpu_minutes: one row per GPU (gpu_key) per UTC minute that has at least one sample.
-- A minute with no samples has no row: missing is not zero. busy_fraction comes from the best
-- busy signal present in the minute ($util_kinds, best first) and is NULL when no sample carried
-- one; coverage is the share of the minute's samples that carried that signal.
CREATE OR REPLACE TABLE core.gpu_minutes AS
WITH by_kind AS (
    SELECT gpu_key, utc_minute(ts) AS minute, util_kind,
           avg(util_pct) / 100.0 AS busy_fraction, count(*) AS busy_samples
    FROM core.gpu_samples
    WHERE util_pct IS NOT NULL
    GROUP BY ALL
),
best_kind AS (
    SELECT * FROM by_kind
    QUALIFY row_number() OVER (PARTITION BY gpu_key, minute ORDER BY coalesce(list_position($util_kinds, util_kind), 99)) = 1
),
minutes AS (
    SELECT gpu_key, utc_minute(ts) AS minute,
           any_value(host) AS host, any_value(gpu_index) AS gpu_index, any_value(gpu_uuid) AS gpu_uuid,
           any_value(gpu_model) AS gpu_model, any_value(mig_instance) AS mig_instance,
           any_value(pod) AS pod, any_value(namespace) AS namespace,
           count(*) AS samples,
           avg(mem_used_mib) AS mem_used_mib, max(mem_used_mib) AS mem_used_mib_max,
           avg(power_w) AS power_w
    FROM core.gpu_samples
    GROUP BY ALL
)
SELECT
    m.host, m.gpu_key, m.gpu_index, m.gpu_uuid, m.mig_instance, m.minute, m.gpu_model, m.pod, m.namespace,
    m.samples,
    coalesce(b.busy_samples, 0) AS busy_samples,
    b.util_kind,
    b.busy_fraction,
    coalesce(b.busy_samples, 0) / m.samples AS coverage,
    m.mem_used_mib, m.mem_used_mib_max, m.power_w
FROM minutes AS m
LEFT JOIN best_kind AS b USING (gpu_key, minute);
