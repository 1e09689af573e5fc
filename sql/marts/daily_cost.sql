-- marts.daily_cost: cost per UTC day × provider × service × phase, in the billing currency and
-- in the reporting currency. A charge counts on the day its charge period starts.
CREATE OR REPLACE TABLE marts.daily_cost AS
SELECT
    a.charge_day AS day,
    c.ProviderName AS provider,
    c.SubAccountId AS sub_account_id,
    c.ServiceCategory AS service_category,
    c.ServiceName AS service_name,
    a.phase,
    c.BillingCurrency AS billing_currency,
    sum(a.amount_billing) AS cost_billing,
    c.x_ReportingCurrency AS reporting_currency,
    sum(a.amount_reporting) AS cost_reporting,
    count(a.amount_billing) - count(a.amount_reporting) AS lines_without_fx_rate,
    count(DISTINCT a.x_ChargeId) AS charge_lines
FROM marts.cost_attribution AS a
JOIN core.cost_lines AS c USING (x_ChargeId)
GROUP BY ALL
ORDER BY day, provider, service_name, phase;
