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
