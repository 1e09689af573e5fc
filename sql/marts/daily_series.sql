-- marts.daily_series: one row per UTC day and series (provider × sub-account × service × phase)
-- with its cost and its usage, the input of anomaly detection (findings.anomalies).
--
-- Only usage charges count (ChargeCategory = 'Usage'): purchases, credits, taxes and adjustments
-- are not day-to-day spend and would be false alarms.
-- A day its provider billed anything but the series had no charge counts as zero spend. A day
-- the provider billed nothing at all (its export has not arrived) has no row: missing, not zero.
-- cost is NULL where a line of the day had no FX rate into the reporting currency (unknown, not
-- low). gpu_hours is NULL for series without GPU charges, egress_gb for series without egress.
CREATE OR REPLACE TABLE marts.daily_series AS
WITH usage_parts AS (
    SELECT
        a.charge_day AS day,
        c.ProviderName AS provider,
        coalesce(c.SubAccountId, '(none)') AS sub_account,
        coalesce(c.ServiceName, '(none)') AS service,
        a.phase,
        c.x_ReportingCurrency AS reporting_currency,
        a.x_ChargeId,
        a.amount_reporting,
        a.gpu_seconds,
        CASE WHEN is_egress_line(c.ConsumedUnit, c.ConsumedQuantity, c.ServiceCategory, c.ChargeDescription, c.SkuId, c.ServiceName)
             THEN CAST(c.ConsumedQuantity AS DOUBLE) * a.weight / a.total_weight END AS egress_gb
    FROM marts.cost_attribution AS a
    JOIN core.cost_lines AS c USING (x_ChargeId)
    WHERE c.ChargeCategory = 'Usage'
),
observed AS (
    SELECT
        day, provider, sub_account, service, phase,
        any_value(reporting_currency) AS reporting_currency,
        CASE WHEN count(amount_reporting) = count(*) THEN sum(amount_reporting) END AS cost,
        sum(gpu_seconds) / 3600.0 AS gpu_hours,
        sum(egress_gb) AS egress_gb,
        count(DISTINCT x_ChargeId) AS charge_lines
    FROM usage_parts
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
billed_days AS (
    SELECT DISTINCT ProviderName AS provider, utc_day(ChargePeriodStart) AS day FROM core.cost_lines
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
