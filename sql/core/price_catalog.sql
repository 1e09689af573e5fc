-- core.price_catalog: GPU and egress prices with provenance, the bundled catalog plus the user's
-- own file (which wins for the same provider, SKU, term and region). Instance and monthly prices
-- are also given per GPU-hour (a month is 720 hours). Terms: on_demand, monthly, commit_1y,
-- commit_3y, spot. gpu_model is the canonical key (gpu_model_key): a user's file may spell it as
-- its provider does; gpu_model_known is false for a name models/data/gpu_models.csv does not know.
-- Input: price_catalog_input (the CSV columns plus priority).
CREATE OR REPLACE TABLE core.price_catalog AS
SELECT
    provider, sku, gpu_model_key(gpu_model) AS gpu_model, gpu_count, term,
    CAST(price AS DECIMAL(18, 6)) AS price, upper(currency) AS currency, unit, region, nullif(path, '') AS path,
    CASE unit
        WHEN 'gpu_hour' THEN CAST(price AS DECIMAL(18, 6))
        WHEN 'instance_hour' THEN from_micros(to_micros(CAST(price AS DECIMAL(18, 6))) // gpu_count)
        WHEN 'gpu_month' THEN from_micros(to_micros(CAST(price AS DECIMAL(18, 6))) // (gpu_count * 720))
    END AS price_per_gpu_hour,
    CASE WHEN unit = 'gb' THEN CAST(price AS DECIMAL(18, 6)) END AS price_per_gb,
    source, as_of,
    gpu_model_known(gpu_model_key(gpu_model)) AS gpu_model_known
FROM price_catalog_input
QUALIFY row_number() OVER (PARTITION BY provider, sku, term, coalesce(region, '') ORDER BY priority) = 1
ORDER BY unit, gpu_model, provider, sku;
