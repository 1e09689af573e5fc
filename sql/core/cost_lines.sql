-- core.cost_lines: one FOCUS charge row per billing line that counts, with the effective cost in
-- the reporting currency. Which lines count (deliveries, restatements, duplicates, incremental
-- line keys) is the ledger's business: core.billing_lines (README, "The ledger").
-- Parameters: $reporting_currency, $max_rate_age_days (an older rate counts as missing).
CREATE OR REPLACE TABLE core.cost_lines AS
WITH current_lines AS (
    SELECT * FROM core.billing_lines
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
    END AS x_FxStatus
FROM rated
ORDER BY ChargePeriodStart, x_SourceFile, x_SourceRow;
