-- marts.gpu_hour_prices: what one GPU-hour cost on each charged GPU resource, per charge period,
-- computed from the charge itself (EffectiveCost ÷ GPUs ÷ hours, in whole 10^-10 units). Findings
-- price telemetry-only waste with it, and fall back to the catalog where no charge exists.
CREATE OR REPLACE TABLE marts.gpu_hour_prices AS
SELECT
    x_ChargeId,
    -- Telemetry and workloads may name the host as the resource's name or its id: keep both.
    norm_host(coalesce(ResourceName, ResourceId)) AS host,
    norm_host(ResourceId) AS resource_host,
    ResourceId AS resource_id,
    x_GpuModel AS gpu_model,
    x_GpuCount AS gpu_count,
    ChargePeriodStart AS period_start,
    ChargePeriodEnd AS period_end,
    BillingCurrency AS currency,
    from_units(to_units(EffectiveCost) * 3600
                // (x_GpuCount * datediff('second', ChargePeriodStart, ChargePeriodEnd))) AS price_per_gpu_hour
FROM core.cost_lines
WHERE coalesce(x_GpuCount, 0) > 0 AND ChargePeriodEnd > ChargePeriodStart;
