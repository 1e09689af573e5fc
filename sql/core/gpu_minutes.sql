-- core.gpu_minutes: one row per GPU per UTC minute that has at least one sample.
-- A minute with no samples has no row: missing is not zero. busy_fraction is NULL when samples
-- exist but none carried a busy signal. Different busy signals (util_kind) are never averaged.
CREATE OR REPLACE TABLE core.gpu_minutes AS
SELECT
    host,
    gpu_index,
    gpu_uuid,
    utc_minute(ts) AS minute,
    util_kind,
    any_value(gpu_model) AS gpu_model,
    count(*) AS samples,
    count(util_pct) AS busy_samples,
    avg(util_pct) / 100.0 AS busy_fraction,
    count(util_pct) / count(*) AS coverage,
    avg(mem_used_mib) AS mem_used_mib,
    max(mem_used_mib) AS mem_used_mib_max,
    avg(power_w) AS power_w
FROM core.gpu_samples
GROUP BY host, gpu_index, gpu_uuid, utc_minute(ts), util_kind
ORDER BY host, gpu_index, minute;
