-- marts.daily_series: one row per UTC day and series (provider × sub-account × service × phase)
-- with its cost and its usage, the input of anomaly detection (findings.anomalies).
--
-- Only usage charges count (ChargeCategory = 'Usage'): purchases, credits, taxes and adjustments
-- are not day-to-day spend and would be false alarms.
-- A charge whose period spans several UTC days (a monthly fee, a weekly line) is spread over
-- them by the seconds of its period in each (charge_days, sql/macros.sql): a fixed 500 USD a
-- month is about 16.67 a day, not a 500 spike on the 1st that alerts every month. Money stays
-- exact: each day gets floor(amount × seconds ÷ period) in 10^-10 units and the remainder goes to
-- the day with the most seconds (the first of them), so a charge's days add up to it exactly.
-- GPU-hours and egress GB are spread the same way.
-- A day its provider billed anything but the series had no charge counts as zero spend. A day
-- the provider billed nothing at all (its export has not arrived) has no row: missing, not zero.
-- Days a spread charge covers count as billed up to the provider's last day with a charge of its
-- own; a spread part past that day waits for it (the rest of a month whose days have not come).
-- cost is NULL where a line of the day had no FX rate into the reporting currency (unknown, not
-- low). gpu_hours is NULL for series without GPU charges, egress_gb for series without egress.
-- Speed (a 1M-row CUR): the transfer macros are string matching, so they run once per distinct
-- kind of line (`line_kinds`: a few hundred, not a million lines) and join back; and a charge
-- within one UTC day (hourly usage: nearly all lines) is its day as it is, so only multi-day
-- charges go through the spreading windows.
CREATE OR REPLACE TABLE marts.daily_series AS
WITH line_kinds AS (
    SELECT *,
           transfer_path(ProviderName, x_ExtraColumns, SkuId, ChargeDescription, ServiceName) AS path,
           data_unit_gb(ConsumedUnit) AS consumed_gb_per_unit,
           data_unit_gb(PricingUnit) AS pricing_gb_per_unit
    -- One line per kind speaks for it: its kind's lines share the extra fields transfer_path reads.
    FROM (SELECT ProviderName, transfer_fields(x_ExtraColumns) AS fields, SkuId, ChargeDescription, ServiceName,
                 ConsumedUnit, PricingUnit, any_value(x_ExtraColumns) AS x_ExtraColumns
          FROM core.cost_lines WHERE ChargeCategory = 'Usage' GROUP BY ALL)
),
usage_parts AS (
    SELECT
        c.ProviderName AS provider,
        coalesce(c.SubAccountId, '(none)') AS sub_account,
        coalesce(c.ServiceName, '(none)') AS service,
        a.phase,
        c.x_ReportingCurrency AS reporting_currency,
        a.x_ChargeId,
        c.ChargePeriodStart,
        c.ChargePeriodEnd,
        a.amount_reporting,
        a.gpu_seconds,
        CAST(egress_gb_of(c.ConsumedQuantity, k.consumed_gb_per_unit, c.PricingQuantity, k.pricing_gb_per_unit, k.path) AS DOUBLE)
            * a.weight / a.total_weight AS egress_gb,
        -- Within one UTC day (charge_days gives it one day).
        c.ChargePeriodEnd IS NULL OR c.ChargePeriodEnd <= c.ChargePeriodStart
            OR utc_day(c.ChargePeriodStart) = utc_day(c.ChargePeriodEnd - INTERVAL 1 MICROSECOND) AS one_day
    FROM marts.cost_attribution AS a
    JOIN core.cost_lines AS c USING (x_ChargeId)
    JOIN line_kinds AS k
      ON k.ProviderName IS NOT DISTINCT FROM c.ProviderName AND k.fields IS NOT DISTINCT FROM transfer_fields(c.x_ExtraColumns)
     AND k.SkuId IS NOT DISTINCT FROM c.SkuId AND k.ChargeDescription IS NOT DISTINCT FROM c.ChargeDescription
     AND k.ServiceName IS NOT DISTINCT FROM c.ServiceName AND k.ConsumedUnit IS NOT DISTINCT FROM c.ConsumedUnit
     AND k.PricingUnit IS NOT DISTINCT FROM c.PricingUnit
    WHERE c.ChargeCategory = 'Usage'
),
spread AS (
    SELECT p.* EXCLUDE (ChargePeriodStart, ChargePeriodEnd, one_day),
           d.cd.day AS day,
           d.cd.seconds AS seconds,
           sum(d.cd.seconds) OVER part AS period_seconds,
           row_number() OVER (PARTITION BY p.x_ChargeId, p.phase ORDER BY d.cd.seconds DESC, d.cd.day) AS day_rank,
           to_units(p.amount_reporting) AS units,
           to_units(p.amount_reporting) * d.cd.seconds // sum(d.cd.seconds) OVER part AS day_units
    FROM usage_parts AS p, unnest(charge_days(p.ChargePeriodStart, p.ChargePeriodEnd)) AS d(cd)
    WHERE NOT p.one_day
    WINDOW part AS (PARTITION BY p.x_ChargeId, p.phase)
),
daily_parts AS (
    SELECT day, provider, sub_account, service, phase, reporting_currency, x_ChargeId,
           from_units(day_units + CASE WHEN day_rank = 1
               THEN units - sum(day_units) OVER (PARTITION BY x_ChargeId, phase) ELSE 0 END) AS amount_reporting,
           gpu_seconds * seconds / period_seconds AS gpu_seconds,
           egress_gb * seconds / period_seconds AS egress_gb
    FROM spread
    UNION ALL
    -- A one-day charge: its own day and amount (already in 10^-10 units); usage × its seconds ÷
    -- the same seconds, as a spread day computes it, so both give the same bits.
    SELECT day, provider, sub_account, service, phase, reporting_currency, x_ChargeId,
           amount_reporting,
           gpu_seconds * seconds / seconds AS gpu_seconds,
           egress_gb * seconds / seconds AS egress_gb
    FROM (SELECT *, utc_day(ChargePeriodStart) AS day,
                 CASE WHEN ChargePeriodEnd IS NULL OR ChargePeriodEnd <= ChargePeriodStart THEN CAST(1 AS BIGINT)
                      ELSE datediff('second', ChargePeriodStart, ChargePeriodEnd) END AS seconds
          FROM usage_parts WHERE one_day)
),
observed AS (
    SELECT
        day, provider, sub_account, service, phase,
        any_value(reporting_currency) AS reporting_currency,
        CASE WHEN count(amount_reporting) = count(*) THEN sum(amount_reporting) END AS cost,
        sum(gpu_seconds) / 3600.0 AS gpu_hours,
        sum(egress_gb) AS egress_gb,
        count(DISTINCT x_ChargeId) AS charge_lines
    FROM daily_parts
    GROUP BY ALL
),
series AS (
    SELECT provider, sub_account, service, phase,
           any_value(reporting_currency) AS reporting_currency,
           bool_or(gpu_hours IS NOT NULL) AS has_gpu_hours,
           bool_or(egress_gb IS NOT NULL) AS has_egress
    FROM observed
    GROUP BY ALL
),
start_days AS (
    SELECT DISTINCT ProviderName AS provider, utc_day(ChargePeriodStart) AS day FROM core.cost_lines
),
billed_days AS (
    SELECT provider, day FROM start_days
    UNION
    SELECT o.provider, o.day FROM observed AS o
    WHERE o.day <= (SELECT max(s.day) FROM start_days AS s WHERE s.provider = o.provider)
)
SELECT
    b.day,
    s.provider, s.sub_account, s.service, s.phase,
    s.reporting_currency,
    CASE WHEN o.day IS NULL THEN CAST(0 AS DECIMAL(38, 10)) ELSE CAST(o.cost AS DECIMAL(38, 10)) END AS cost,
    CASE WHEN s.has_gpu_hours THEN coalesce(o.gpu_hours, 0) END AS gpu_hours,
    CASE WHEN s.has_egress THEN coalesce(o.egress_gb, 0) END AS egress_gb,
    coalesce(o.charge_lines, 0) AS charge_lines
FROM series AS s
JOIN billed_days AS b USING (provider)
LEFT JOIN observed AS o USING (day, provider, sub_account, service, phase)
ORDER BY b.day, s.provider, s.sub_account, s.service, s.phase;
