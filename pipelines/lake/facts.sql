-- The ledger's facts of one billing file version ($path, $sha256), by the provider, billing account
-- and billing period its lines state: how many lines, whether any is invoiced, the latest charge
-- end, Google Cloud's newest export_time and Azure's dataset. $lines is the version's rows.
INSERT INTO raw.file_slices
SELECT $path, $sha256, ProviderName, BillingAccountId, BillingPeriodStart, count(*),
       coalesce(bool_or(InvoiceId IS NOT NULL), false), max(ChargePeriodEnd),
       max(CASE WHEN x_Connector = 'gcp_billing'
                THEN try_cast(try(json_extract_string(x_ExtraColumns, '$.export_time')) AS TIMESTAMPTZ) END),
       any_value(x_AzureDataset)
FROM $lines
GROUP BY ProviderName, BillingAccountId, BillingPeriodStart;
