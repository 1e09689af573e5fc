-- core.service_names_by_billing_month: how many billing lines of each billing month carry each
-- ServiceName with each ServiceCategory and ServiceSubcategory, as the sources state them.
-- FOCUS wants one ServiceCategory and one ServiceSubcategory per ServiceName across the dataset
-- (ServiceName-C-005-C, -C-008-C); core.cost_lines labels every line of a name by these counts over
-- every month (macro service_name_labels), so a month built alone labels its lines as a build of
-- the whole history would. Built per billing month, as core.cost_lines is, from the same lines.
-- Parameters: $billing_months (YYYY-MM; ['*'] builds every month).
CREATE OR REPLACE TABLE core.service_names_by_billing_month AS
SELECT
    -- The month core.cost_lines builds the line in: its billing period's, else its charge's (UTC).
    date_trunc('month', timezone('UTC', coalesce(BillingPeriodStart, ChargePeriodStart))) AS billing_period_start,
    ServiceName,
    coalesce(ServiceCategory, 'Other') AS ServiceCategory,
    ServiceSubcategory,
    count(*) AS lines
FROM core.billing_lines
WHERE ServiceName IS NOT NULL AND in_listed_months(coalesce(BillingPeriodStart, ChargePeriodStart), $billing_months)
GROUP BY ALL
ORDER BY ALL;
