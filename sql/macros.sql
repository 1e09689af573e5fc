-- Exact money arithmetic helpers. DuckDB divides DECIMALs as DOUBLE, so splits and rates work in
-- whole micro-units (HUGEINT) and convert back: no float ever touches an amount.
CREATE OR REPLACE MACRO to_micros(amount) AS CAST(round(amount * 1000000) AS HUGEINT);
CREATE OR REPLACE MACRO from_micros(micros) AS CAST(CAST(micros AS DECIMAL(38, 0)) * 0.000001 AS DECIMAL(18, 6));
-- The UTC calendar day and minute of a TIMESTAMPTZ, whatever the session's TimeZone setting.
CREATE OR REPLACE MACRO utc_day(ts) AS CAST(timezone('UTC', ts) AS DATE);
CREATE OR REPLACE MACRO utc_minute(ts) AS timezone('UTC', date_trunc('minute', timezone('UTC', ts)));
-- Host names as every connector normalises them (connectors/_telemetry.py): lower case, DNS
-- suffix dropped, IP addresses kept whole. Invoices' resource names go through the same rule.
CREATE OR REPLACE MACRO norm_host(h) AS CASE
    WHEN regexp_matches(lower(trim(h)), '^\d{1,3}(\.\d{1,3}){3}$') THEN lower(trim(h))
    ELSE regexp_replace(lower(trim(h)), '\..*$', '')
END;
-- A GPU's marketing name as the price catalog spells it ('NVIDIA A100-SXM4-80GB' → 'A100 80G').
CREATE OR REPLACE MACRO gpu_model_key(name) AS CASE
    WHEN name IS NULL THEN NULL
    WHEN regexp_matches(name, '(?i)A100.*80') THEN 'A100 80G'
    WHEN regexp_matches(name, '(?i)A100') THEN 'A100 40G'
    WHEN regexp_matches(name, '(?i)H200') THEN 'H200'
    WHEN regexp_matches(name, '(?i)H100') THEN 'H100'
    WHEN regexp_matches(name, '(?i)B200') THEN 'B200'
    WHEN regexp_matches(name, '(?i)L40S') THEN 'L40S'
    WHEN regexp_matches(name, '(?i)RTX 6000 Ada') THEN 'RTX 6000 Ada'
    ELSE name
END;
-- A quantity (a double: GPU-hours, GB) times a DECIMAL price, as DECIMAL money: the quantity is
-- fixed to 10 decimals first, so the product itself is exact decimal arithmetic.
CREATE OR REPLACE MACRO price_times(quantity, price) AS
    CAST(round(CAST(round(quantity, 10) AS DECIMAL(28, 10)) * price, 6) AS DECIMAL(18, 6));
-- FX rates as whole units of 10^-12, so inverse and cross rates divide integers, never floats.
CREATE OR REPLACE MACRO rate_units(rate) AS CAST(round(rate * 1000000000000) AS HUGEINT);
CREATE OR REPLACE MACRO from_rate_units(units) AS CAST(CAST(units AS DECIMAL(38, 0)) * 0.000000000001 AS DECIMAL(38, 12));
-- A charge line that moves data out (internet or cross-region), as findings.egress and
-- marts.daily_series both recognise it.
CREATE OR REPLACE MACRO is_egress_line(consumed_unit, consumed_quantity, service_category, description, sku, service_name) AS
    consumed_unit IN ('GB', 'GiB', 'gb') AND consumed_quantity > 0
    AND (service_category = 'Networking' OR description ILIKE '%transfer out%' OR description ILIKE '%egress%'
         OR sku ILIKE '%DataTransfer-Out%' OR service_name ILIKE '%data transfer%');
-- Azure's actual-cost and amortized-cost exports of one scope merged into one row per charge
-- (core.cost_lines; the connector sets x_AzureDataset and x_AzureChargeKey). Within a billing
-- account and billing period that has both datasets loaded, the actual export alone states
-- BilledCost and the amortized export alone states EffectiveCost, so the totals are the
-- provider's own totals whatever pairs up:
--   a charge in both: one row, the amortized one, with BilledCost from its actual twin;
--   a charge only in actual (a commitment purchase, which amortized data spreads over usage):
--     BilledCost as billed, EffectiveCost 0;
--   a charge only in amortized (unused commitment, or usage the actual export lacks): as the
--     amortized export says, BilledCost 0.
-- A scope with one dataset keeps what that dataset says. Twins pair by key and, for identical
-- keys, by their order (file, row). Rows of other providers pass through unchanged.
CREATE OR REPLACE MACRO azure_actual_amortized(lines) AS TABLE
WITH azure AS (
    SELECT *,
           bool_or(x_AzureDataset = 'actual') OVER scope AS __has_actual,
           bool_or(x_AzureDataset = 'amortized') OVER scope AS __has_amortized,
           coalesce(BillingPeriodStart, date_trunc('month', ChargePeriodStart)) AS __period,
           x_AzureChargeKey || '#' || row_number() OVER (
               PARTITION BY ProviderName, BillingAccountId, coalesce(BillingPeriodStart, date_trunc('month', ChargePeriodStart)),
                            x_AzureDataset, x_AzureChargeKey
               ORDER BY x_SourceFile, x_SourceRow) AS __twin
    FROM query_table(lines)
    WHERE x_AzureDataset IS NOT NULL
    WINDOW scope AS (PARTITION BY ProviderName, BillingAccountId, coalesce(BillingPeriodStart, date_trunc('month', ChargePeriodStart)))
),
twins AS (
    SELECT *,
           sum(BilledCost) FILTER (WHERE x_AzureDataset = 'actual') OVER twin AS __actual_billed,
           count(*) FILTER (WHERE x_AzureDataset = 'amortized') OVER twin AS __amortized_rows
    FROM azure
    WINDOW twin AS (PARTITION BY ProviderName, BillingAccountId, __period, __twin)
)
SELECT * FROM query_table(lines) WHERE x_AzureDataset IS NULL
UNION ALL
SELECT * EXCLUDE (__has_actual, __has_amortized, __period, __twin, __actual_billed, __amortized_rows) REPLACE (
    CASE WHEN x_AzureDataset = 'amortized' AND __has_actual THEN coalesce(__actual_billed, 0) ELSE BilledCost END AS BilledCost,
    CASE WHEN x_AzureDataset = 'actual' AND __has_amortized THEN 0 ELSE EffectiveCost END AS EffectiveCost)
FROM twins
WHERE NOT (x_AzureDataset = 'actual' AND __has_amortized AND __amortized_rows > 0);
