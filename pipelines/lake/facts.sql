-- The ledger's facts of one billing file version ($path, $sha256), by the provider, billing account
-- and billing period its lines state (and invoice, where its connector's invoices are deliveries:
-- $by_invoice): how many lines, whether any is invoiced, the earliest and latest charge start, the latest end, the earliest end of the lines starting last, Google Cloud's
-- newest export_time, Azure's dataset and the sub-accounts its lines bill (which narrower exports it
-- holds: a billing profile's export holds its subscriptions'). $lines is the version's rows.
INSERT INTO raw.file_slices BY NAME
SELECT $path AS path, $sha256 AS sha256, ProviderName AS line_provider, BillingAccountId AS line_account,
       BillingPeriodStart AS line_period, count(*) AS lines,
       coalesce(bool_or(InvoiceId IS NOT NULL), false) AS final, max(ChargePeriodEnd) AS max_charge_end,
       min(ChargePeriodStart) AS min_charge_start, max(ChargePeriodStart) AS max_charge_start,
       -- How far it has come: the earliest end of the lines starting last (an hourly export's last hour
       -- beside the day's daily lines; a month-long fee or tax says nothing of it).
       arg_min(ChargePeriodEnd, {'start': -epoch_us(ChargePeriodStart), 'end': ChargePeriodEnd})
           FILTER (WHERE ChargePeriodStart IS NOT NULL AND ChargePeriodEnd IS NOT NULL) AS last_start_end,
       max(CASE WHEN x_Connector = 'gcp_billing'
                THEN try_cast(try(json_extract_string(x_ExtraColumns, '$.export_time')) AS TIMESTAMPTZ) END) AS export_time,
       any_value(x_AzureDataset) AS dataset,
       coalesce(list(DISTINCT SubAccountId ORDER BY SubAccountId) FILTER (WHERE SubAccountId IS NOT NULL), []) AS sub_accounts,
       CASE WHEN $by_invoice THEN InvoiceId END AS line_invoice,
       $by_invoice AS by_invoice
FROM $lines
GROUP BY ProviderName, BillingAccountId, BillingPeriodStart, CASE WHEN $by_invoice THEN InvoiceId END;
