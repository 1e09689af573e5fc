-- The ledger's facts of one billing file version ($path, $sha256), by the provider, billing account
-- and billing period its lines state (and invoice, where its connector's invoices are deliveries:
-- $by_invoice): how many lines, whether any is invoiced, the earliest and latest charge start, the
-- latest end, the earliest end of the lines starting last, Google Cloud's newest export_time, Azure's
-- dataset, and how far it has come for each sub-account its lines bill (which narrower exports it
-- holds, and up to when: a billing profile's export holds its subscriptions'). $lines is the version's rows.
-- Grouped by sub-account first, then by slice: one scan of the lines.
INSERT INTO raw.file_slices BY NAME
SELECT $path AS path, $sha256 AS sha256, line_provider, line_account, line_period, sum(lines) AS lines,
       bool_or(final) AS final, max(max_charge_end) AS max_charge_end,
       min(min_charge_start) AS min_charge_start, max(max_charge_start) AS max_charge_start,
       -- How far it has come: the earliest end of the lines starting last (an hourly export's last hour
       -- beside the day's daily lines; a month-long fee or tax says nothing of it).
       arg_min(last_start_end, {'start': -epoch_us(max_charge_start), 'end': last_start_end})
           FILTER (WHERE last_start_end IS NOT NULL) AS last_start_end,
       max(export_time) AS export_time, any_value(dataset) AS dataset,
       coalesce(list({'id': sub_account, 'first_start': coalesce(first_day_start, min_charge_start), 'last_start': max_charge_start,
                      'last_start_end': last_start_end}
                     ORDER BY sub_account) FILTER (WHERE sub_account IS NOT NULL), []) AS sub_account_reach,
       line_invoice, $by_invoice AS by_invoice
FROM (
    SELECT ProviderName AS line_provider, BillingAccountId AS line_account, BillingPeriodStart AS line_period,
           CASE WHEN $by_invoice THEN InvoiceId END AS line_invoice, SubAccountId AS sub_account, count(*) AS lines,
           coalesce(bool_or(InvoiceId IS NOT NULL), false) AS final, max(ChargePeriodEnd) AS max_charge_end,
           min(ChargePeriodStart) AS min_charge_start, max(ChargePeriodStart) AS max_charge_start,
           -- When a sub-account's lines begin: of those no longer than a day (a month-long fee or tax
           -- line says nothing of when a subscription came to the scope).
           min(ChargePeriodStart) FILTER (WHERE ChargePeriodEnd <= ChargePeriodStart + INTERVAL 1 DAY) AS first_day_start,
           arg_min(ChargePeriodEnd, {'start': -epoch_us(ChargePeriodStart), 'end': ChargePeriodEnd})
               FILTER (WHERE ChargePeriodStart IS NOT NULL AND ChargePeriodEnd IS NOT NULL) AS last_start_end,
           max(CASE WHEN x_Connector = 'gcp_billing'
                    THEN try_cast(try(json_extract_string(x_ExtraColumns, '$.export_time')) AS TIMESTAMPTZ) END) AS export_time,
           any_value(x_AzureDataset) AS dataset
    FROM $lines
    GROUP BY ALL
)
GROUP BY line_provider, line_account, line_period, line_invoice;
