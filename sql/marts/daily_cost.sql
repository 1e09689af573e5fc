-- marts.daily_cost: cost per UTC day × provider × sub-account × service category × service × phase,
-- in the billing currency and in the reporting currency. A charge counts on the day its charge
-- period starts. Lines without a ServiceName are told apart by their category, as in
-- marts.daily_cost_by_billing_month.
-- The sum of marts.daily_cost_by_billing_month over billing months (a charge is billed in one
-- month, so its lines and charges are counted once).
CREATE OR REPLACE TABLE marts.daily_cost AS
SELECT
    day,
    provider,
    sub_account_id,
    service_category,
    service_name,
    phase,
    billing_currency,
    sum(cost_billing) AS cost_billing,
    reporting_currency,
    sum(cost_reporting) AS cost_reporting,
    CAST(sum(lines_without_fx_rate) AS BIGINT) AS lines_without_fx_rate,
    CAST(sum(charge_lines) AS BIGINT) AS charge_lines
FROM marts.daily_cost_by_billing_month
GROUP BY ALL
ORDER BY day, provider, service_category, service_name, phase;
