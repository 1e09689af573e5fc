-- marts.daily_cost_by_billing_month: cost per UTC day × billing month × provider × billing account ×
-- sub-account × service category × service × phase, in the billing currency and in the reporting currency:
-- marts.daily_cost with the billing month the charges were billed in (a charge counts on the day
-- its period starts). A named service has one category (core.cost_lines labels it); lines without
-- a ServiceName keep their own, the one thing that tells a disk from a load balancer among them.
-- Built per billing month ($billing_months) as marts.cost_attribution, which it sums: a new
-- delivery adds its own month's days, and marts.daily_cost re-aggregates this small table instead
-- of joining every charge of the history to its line again.
CREATE OR REPLACE TABLE marts.daily_cost_by_billing_month AS
WITH attribution AS (
    SELECT * FROM marts.cost_attribution WHERE in_listed_months(billing_period_start, $billing_months)
),
lines AS (
    SELECT x_ChargeId, ProviderName, BillingAccountId, SubAccountId, ServiceCategory, ServiceName, BillingCurrency, x_ReportingCurrency, x_GpuCount
    FROM core.cost_lines WHERE in_listed_months(BillingPeriodStart, $billing_months)
)
SELECT
    a.charge_day AS day,
    a.billing_period_start,
    c.ProviderName AS provider,
    -- Each billing account's export arrives on its own: marts.daily_series tells its late days from no spend.
    c.BillingAccountId AS billing_account_id,
    c.SubAccountId AS sub_account_id,
    c.ServiceCategory AS service_category,
    c.ServiceName AS service_name,
    a.phase,
    c.BillingCurrency AS billing_currency,
    sum(a.amount_billing) AS cost_billing,
    c.x_ReportingCurrency AS reporting_currency,
    sum(a.amount_reporting) AS cost_reporting,
    count(a.amount_billing) - count(a.amount_reporting) AS lines_without_fx_rate,
    count(DISTINCT a.x_ChargeId) AS charge_lines,
    -- GPU-seconds paid (the parts a GPU charge's paid time went to, busy time nobody held included;
    -- a credit's or negation's parts carry none): marts.spend_by_phase's GPU-hours paid.
    sum(a.gpu_seconds) AS gpu_seconds_paid,
    -- Every part of the GPU charges (lines with a GPU count), whatever its phase or method: the report's
    -- GPU spend. A row can mix them with other lines of its service (storage, a purchase).
    sum(a.amount_reporting) FILTER (WHERE c.x_GpuCount > 0) AS gpu_cost_reporting
FROM attribution AS a
JOIN lines AS c USING (x_ChargeId)
GROUP BY ALL
ORDER BY day, billing_period_start, provider, service_category, service_name, phase;
