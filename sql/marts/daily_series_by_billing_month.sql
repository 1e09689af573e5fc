-- marts.daily_series_by_billing_month: the usage marts.daily_series is made of, per UTC day,
-- billing month and series (provider × sub-account × service × phase), only where a charge had
-- a part: cost, GPU-seconds, egress GB and charges, with the days a charge covers spread as
-- marts.daily_series explains. Built per billing month ($billing_months) as
-- marts.cost_attribution, which it reads: a new delivery spreads its own month's charges, and
-- marts.daily_series adds the months up and fills the days without charges.
--
-- Only usage charges count (ChargeCategory = 'Usage'): purchases, credits, taxes and adjustments
-- are not day-to-day spend and would be false alarms.
-- A charge whose period spans several UTC days (a monthly fee, a weekly line) is spread over
-- them by the seconds of its period in each (charge_days, sql/macros.sql): a fixed 500 USD a
-- month is about 16.67 a day, not a 500 spike on the 1st that alerts every month. Money stays
-- exact: each day gets floor(amount × seconds ÷ period) in 10^-10 units and the remainder goes to
-- the day with the most seconds (the first of them), so a charge's days add up to it exactly.
-- GPU-hours and egress GB are spread the same way.
-- Egress GB are marts.egress_lines_by_billing_month's (a line moving data out, and its GB, found
-- once per month there), not the transfer macros' string matching again over every usage line.
-- Speed (a 1M-row CUR): a charge within one UTC day (hourly usage: nearly all lines) is its day as
-- it is, so only multi-day charges go through the spreading windows.
CREATE OR REPLACE TABLE marts.daily_series_by_billing_month AS
WITH usage_lines AS (
    SELECT * FROM core.cost_lines
    WHERE ChargeCategory = 'Usage' AND in_listed_months(BillingPeriodStart, $billing_months)
),
egress_lines AS (
    SELECT x_ChargeId, gb FROM marts.egress_lines_by_billing_month
    WHERE in_listed_months(billing_period_start, $billing_months)
),
usage_parts AS (
    SELECT
        a.billing_period_start,
        c.ProviderName AS provider,
        coalesce(c.SubAccountId, '(none)') AS sub_account,
        coalesce(c.ServiceName, '(none)') AS service,
        a.phase,
        c.x_ReportingCurrency AS reporting_currency,
        a.x_ChargeId,
        a.method,  -- with the charge and phase, names the part: one phase can have two (see below)
        c.ChargePeriodStart,
        c.ChargePeriodEnd,
        a.amount_reporting,
        a.gpu_seconds,
        CAST(e.gb AS DOUBLE) * a.weight / a.total_weight AS egress_gb,
        -- Within one UTC day (charge_days gives it one day).
        c.ChargePeriodEnd IS NULL OR c.ChargePeriodEnd <= c.ChargePeriodStart
            OR utc_day(c.ChargePeriodStart) = utc_day(c.ChargePeriodEnd - INTERVAL 1 MICROSECOND) AS one_day
    FROM marts.cost_attribution AS a
    JOIN usage_lines AS c USING (x_ChargeId)
    LEFT JOIN egress_lines AS e USING (x_ChargeId)
    WHERE in_listed_months(a.billing_period_start, $billing_months)
),
spread AS (
    SELECT p.* EXCLUDE (ChargePeriodStart, ChargePeriodEnd, one_day),
           d.cd.day AS day,
           d.cd.seconds AS seconds,
           sum(d.cd.seconds) OVER part AS period_seconds,
           row_number() OVER (PARTITION BY p.x_ChargeId, p.phase, p.method ORDER BY d.cd.seconds DESC, d.cd.day) AS day_rank,
           to_units(p.amount_reporting) AS units,
           to_units(p.amount_reporting) * d.cd.seconds // sum(d.cd.seconds) OVER part AS day_units
    FROM usage_parts AS p, unnest(charge_days(p.ChargePeriodStart, p.ChargePeriodEnd)) AS d(cd)
    WHERE NOT p.one_day
    -- One part of a charge: its charge, phase and method. A charge's GPU time held by a workload
    -- without a phase and its busy time nobody held are two 'unattributed' parts; spreading by
    -- charge and phase alone summed both parts' seconds and dropped one part's money.
    WINDOW part AS (PARTITION BY p.x_ChargeId, p.phase, p.method)
),
daily_parts AS (
    SELECT day, billing_period_start, provider, sub_account, service, phase, reporting_currency, x_ChargeId,
           from_units(day_units + CASE WHEN day_rank = 1
               THEN units - sum(day_units) OVER (PARTITION BY x_ChargeId, phase, method) ELSE 0 END) AS amount_reporting,
           gpu_seconds * seconds / period_seconds AS gpu_seconds,
           egress_gb * seconds / period_seconds AS egress_gb
    FROM spread
    UNION ALL
    -- A one-day charge: its own day and amount (already in 10^-10 units); usage × its seconds ÷
    -- the same seconds, as a spread day computes it, so both give the same bits.
    SELECT day, billing_period_start, provider, sub_account, service, phase, reporting_currency, x_ChargeId,
           amount_reporting,
           gpu_seconds * seconds / seconds AS gpu_seconds,
           egress_gb * seconds / seconds AS egress_gb
    FROM (SELECT *, utc_day(ChargePeriodStart) AS day,
                 CASE WHEN ChargePeriodEnd IS NULL OR ChargePeriodEnd <= ChargePeriodStart THEN CAST(1 AS BIGINT)
                      ELSE datediff('second', ChargePeriodStart, ChargePeriodEnd) END AS seconds
          FROM usage_parts WHERE one_day)
)
SELECT
    day, billing_period_start, provider, sub_account, service, phase,
    any_value(reporting_currency) AS reporting_currency,
    sum(amount_reporting) AS cost,  -- of the parts with an FX rate
    count(*) - count(amount_reporting) AS parts_without_fx_rate,
    sum(gpu_seconds) AS gpu_seconds,
    sum(egress_gb) AS egress_gb,
    count(DISTINCT x_ChargeId) AS charge_lines
FROM daily_parts
GROUP BY ALL
ORDER BY day, billing_period_start, provider, sub_account, service, phase;
