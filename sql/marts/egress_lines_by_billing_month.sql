-- marts.egress_lines_by_billing_month: every billing line that moves data out, with its GB and
-- path (internet, cross_region, cross_az, intra_region), per billing month: what findings.egress
-- prices. Built per billing month ($billing_months) of core.cost_lines, so a new delivery finds
-- its own month's transfer lines and findings.egress reads these lines, not the whole history.
-- Kept in the lake, a Parquet folder per billing month (pipelines/warehouse/lake_tables.py).
-- Which lines are egress, their GB and their path come from the macros in sql/macros.sql
-- (data_gb, transfer_path): any data-size unit ('GB', 'GiB', '1 GB', bytes, gibibyte), outbound
-- only (inbound 'data transfer in' lines are not egress), the path from the provider's own fields.
-- The transfer macros are string matching: they run once per distinct kind of line (a few hundred
-- on a 1M-row CUR), and only the lines of kinds that move data out are read further.
CREATE OR REPLACE TABLE marts.egress_lines_by_billing_month AS
WITH month_lines AS (
    SELECT * FROM core.cost_lines WHERE in_listed_months(BillingPeriodStart, $billing_months)
),
line_kinds AS (FROM transfer_line_kinds(month_lines)),
transfer_lines AS (
    -- A line without a resource (account-level transfer) is named by its service, never dropped.
    SELECT c.x_ChargeId,
           c.BillingPeriodStart AS billing_period_start,
           c.ProviderName AS provider,
           coalesce(c.ResourceName, c.ResourceId, c.ServiceName, '(no resource)') AS resource,
           c.ResourceId AS resource_id,
           utc_day(c.ChargePeriodStart) AS day, c.ChargePeriodStart, c.ChargePeriodEnd, c.EffectiveCost, c.BillingCurrency,
           k.path,
           -- GB from usage only: a credit, discount or refund on a transfer (AWS writes the discounted
           -- line's usage type on it) moves no data again, but nets its money in at 0 GB.
           CASE WHEN c.ChargeCategory = 'Usage'
                THEN egress_gb_of(c.ConsumedQuantity, k.consumed_gb_per_unit, c.PricingQuantity, k.pricing_gb_per_unit, k.path)
                WHEN c.ChargeCategory IN ('Credit', 'Adjustment') THEN CAST(0 AS DECIMAL(38, 10)) END AS gb
    FROM month_lines AS c
    JOIN line_kinds AS k
      ON k.ProviderName IS NOT DISTINCT FROM c.ProviderName AND k.fields IS NOT DISTINCT FROM transfer_fields(c.x_ExtraColumns)
     AND k.SkuId IS NOT DISTINCT FROM c.SkuId AND k.ChargeDescription IS NOT DISTINCT FROM c.ChargeDescription
     AND k.ServiceName IS NOT DISTINCT FROM c.ServiceName AND k.ConsumedUnit IS NOT DISTINCT FROM c.ConsumedUnit
     AND k.PricingUnit IS NOT DISTINCT FROM c.PricingUnit
    WHERE k.path IS NOT NULL AND k.path <> 'inbound'  -- egress_gb is NULL for any other line
)
SELECT * FROM transfer_lines WHERE gb IS NOT NULL;
