-- Exact money arithmetic helpers. Money is DECIMAL(38, 10) (±10^12 and far beyond, to 10^-10).
-- DuckDB divides DECIMALs as DOUBLE, so splits and rates work in whole units of 10^-10 (HUGEINT,
-- ±1.7·10^38: a 10^12 amount is 10^22 units, leaving 10^16 of room for weights and sums) and
-- convert back: no float ever touches an amount, and no product is left at an implicit width.
CREATE OR REPLACE MACRO to_units(amount) AS CAST(round(CAST(amount AS DECIMAL(38, 10)) * 10000000000) AS HUGEINT);
CREATE OR REPLACE MACRO from_units(units) AS CAST(CAST(units AS DECIMAL(38, 0)) * 0.0000000001 AS DECIMAL(38, 10));
-- Micro-units (10^-6) where a coarser integer is wanted (anomaly series): widened first, so a
-- 10^12 amount never overflows DECIMAL(18) on the way.
CREATE OR REPLACE MACRO to_micros(amount) AS CAST(round(CAST(amount AS DECIMAL(38, 10)) * 1000000) AS HUGEINT);
CREATE OR REPLACE MACRO from_micros(micros) AS CAST(CAST(micros AS DECIMAL(38, 0)) * 0.000001 AS DECIMAL(38, 10));
-- Money × an FX rate (DECIMAL(38, 12)), rounded to money's 10 decimals. DECIMAL × DECIMAL adds the
-- scales (10 + 12 = 22, leaving 16 integer digits at width 38: 10^12 × a rate of 10^5 overflows),
-- so the whole part and the fraction are multiplied apart: whole × rate stays at scale 12 (26
-- integer digits), fraction (|f| < 1) × rate at scale 22 is rounded to 12; their sum is exact at
-- 12 decimals and rounded once more to 10.
CREATE OR REPLACE MACRO convert_money(amount, rate) AS CAST(round(
    CAST(trunc(CAST(amount AS DECIMAL(38, 10))) AS DECIMAL(38, 0)) * CAST(rate AS DECIMAL(38, 12))
    + CAST(round(CAST(CAST(amount AS DECIMAL(38, 10)) - trunc(CAST(amount AS DECIMAL(38, 10))) AS DECIMAL(11, 10))
                 * CAST(rate AS DECIMAL(38, 12)), 12) AS DECIMAL(38, 12)), 10) AS DECIMAL(38, 10));
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
-- fixed to 10 decimals first, so the product itself is exact decimal arithmetic (scale 10 + the
-- price's), then rounded to money's 10 decimals.
CREATE OR REPLACE MACRO price_times(quantity, price) AS
    CAST(round(CAST(round(quantity, 10) AS DECIMAL(28, 10)) * price, 10) AS DECIMAL(38, 10));
-- FX rates as whole units of 10^-12, so inverse and cross rates divide integers, never floats.
CREATE OR REPLACE MACRO rate_units(rate) AS CAST(round(rate * 1000000000000) AS HUGEINT);
CREATE OR REPLACE MACRO from_rate_units(units) AS CAST(CAST(units AS DECIMAL(38, 0)) * 0.000000000001 AS DECIMAL(38, 12));
-- A charge line that moves data out (internet or cross-region), as findings.egress and
-- marts.daily_series both recognise it.
CREATE OR REPLACE MACRO is_egress_line(consumed_unit, consumed_quantity, service_category, description, sku, service_name) AS
    consumed_unit IN ('GB', 'GiB', 'gb') AND consumed_quantity > 0
    AND (service_category = 'Networking' OR description ILIKE '%transfer out%' OR description ILIKE '%egress%'
         OR sku ILIKE '%DataTransfer-Out%' OR service_name ILIKE '%data transfer%');
