-- core.billing_lines: the raw cost lines that count after the ledger's rules, each once, with their
-- delivery. The rules (README, "The ledger") are applied over every raw row, so the result does
-- not depend on which run loaded which file:
--   * a line counts through the delivery its file belongs to (raw.files.delivery_id), and only
--     where that delivery's slice counts (raw.delivery_slices: the newest complete delivery of its
--     export, scope and billing period; incremental deliveries always), and for a plain upload
--     that counts for part of its charge time (counts_for), where its charge lies within that part;
--   * the same content counts once, however many files carry it (raw.files.content_sha256);
--   * incremental sources append, and a line seen again counts once, its newest version winning:
--     Google Cloud by every identifying column and export_time (cost, credits and usage excluded),
--     Oracle by lineItem/referenceNo;
--   * Oracle's two forms of a tenancy's charges (cost reports, FOCUS reports) count once: each
--     hour both hold counts through the one holding more of its lines;
--   * a GPU cloud's month-to-date line (no invoice id) that an invoice bills again counts through
--     the invoice (invoiced_again); one the invoice bills part of counts the rest (invoiced_in_part).
-- A view: core.cost_lines reads it once per build; nothing else needs its rows stored.
CREATE OR REPLACE VIEW core.billing_lines AS
WITH readers AS (
    -- One file version per content still in play (a file holds it: loaded, incomplete, superseded,
    -- or a duplicate of one), the one whose rows were read into raw.cost_lines. A version since
    -- overwritten at its own path still serves its rows while a duplicate elsewhere holds its content.
    -- (The ledger's rules pick the same: ledger_readers in pipelines/ledger/deliveries.sql.)
    SELECT path, sha256, coalesce(content_sha256, sha256) AS content
    FROM raw.files
    WHERE kind = 'billing'
      AND (status IN ('loaded', 'incomplete', 'superseded') OR (status = 'replaced' AND rows_loaded > 0))
      AND coalesce(content_sha256, sha256) IN (
          SELECT coalesce(content_sha256, sha256) FROM raw.files
          WHERE kind = 'billing' AND status IN ('loaded', 'incomplete', 'superseded', 'duplicate'))
    QUALIFY row_number() OVER (PARTITION BY coalesce(content_sha256, sha256)
                               ORDER BY status = 'replaced', ingested_at, path, sha256) = 1
),
delivery_contents AS (
    SELECT DISTINCT delivery_id, coalesce(content_sha256, sha256) AS content
    FROM raw.files
    WHERE kind = 'billing' AND status IN ('loaded', 'incomplete', 'superseded', 'duplicate') AND delivery_id IS NOT NULL
),
-- Per content and slice of lines (provider, billing account, billing period), the one counting
-- delivery it counts through: a content in two counting deliveries (of different exports) still
-- counts once. Chosen over the small slice tables, then joined to the lines, so no window runs
-- over the lines themselves.
-- Where the connector's invoices are deliveries, an invoice is a slice of its own (by_invoice).
content_slices AS (
    SELECT dc.content, s.line_provider, s.line_account, s.line_period, s.line_invoice, coalesce(s.by_invoice, false) AS by_invoice,
           d.delivery_id, d.export_name, d.created_at, d.complete, d.mode, d.seq, d.first_seen_at, s.counts_for
    FROM delivery_contents AS dc
    JOIN raw.deliveries AS d ON d.delivery_id = dc.delivery_id
    JOIN raw.delivery_slices AS s ON s.delivery_id = d.delivery_id AND s.counts
    QUALIFY row_number() OVER (PARTITION BY dc.content, s.line_provider, s.line_account, s.line_period, s.line_invoice
                               ORDER BY d.created_at DESC NULLS LAST, d.delivery_id DESC) = 1
),
-- Read several times (the lines, Oracle's tenancy-hours, the invoiced lines below): scanned again, not copied.
counted AS NOT MATERIALIZED (
    SELECT c.*, cs.by_invoice, cs.delivery_id AS x_DeliveryId, cs.export_name AS x_ExportName,
           cs.created_at AS x_DeliveryCreatedAt, cs.complete AS x_DeliveryComplete, cs.mode AS delivery_mode,
           cs.seq AS delivery_seq, cs.first_seen_at AS delivery_first_seen
    FROM raw.cost_lines AS c
    JOIN readers AS r ON r.path = c.x_SourceFile AND r.sha256 = c.x_SourceSha256
    JOIN content_slices AS cs
      ON cs.content = r.content
     AND cs.line_provider IS NOT DISTINCT FROM c.ProviderName
     AND cs.line_account IS NOT DISTINCT FROM c.BillingAccountId
     AND cs.line_period IS NOT DISTINCT FROM c.BillingPeriodStart
     AND cs.line_invoice IS NOT DISTINCT FROM CASE WHEN cs.by_invoice THEN c.InvoiceId END
    -- A line within a range (a daily line on a day another upload covers from 03:00 is not: it
    -- would count beside that upload's hours).
    WHERE cs.counts_for IS NULL OR c.ChargePeriodStart IS NULL
       OR array_length(list_filter(cs.counts_for, lambda r: r.since <= c.ChargePeriodStart AND c.ChargePeriodStart < r.until
                                                            AND coalesce(c.ChargePeriodEnd, c.ChargePeriodStart) <= r.until)) > 0
),
keyed AS (
    SELECT *,
           CASE
               WHEN x_Connector = 'gcp_billing' THEN md5(to_json(struct_pack(
                   BillingAccountId, SubAccountId, ServiceName, SkuId, ChargeCategory, ChargeDescription,
                   ChargePeriodStart, ChargePeriodEnd, RegionId, AvailabilityZone, ResourceId, Tags, BillingCurrency,
                   cost_type := try(json_extract_string(x_ExtraColumns, '$.cost_type')),
                   export_time := try(json_extract_string(x_ExtraColumns, '$.export_time')))))
               WHEN x_Connector = 'oci_cost' THEN try(json_extract_string(x_ExtraColumns, '$.reference_no'))
           END AS line_key,
           try_cast(try(json_extract_string(x_ExtraColumns, '$.export_time')) AS TIMESTAMPTZ) AS line_version
    FROM counted
),
numbered AS (
    -- Lines a file repeats with the same key are distinct lines: the n-th of one file meets the n-th of another.
    SELECT *, row_number() OVER (PARTITION BY x_SourceSha256, line_key ORDER BY x_SourceRow) AS key_ordinal
    FROM keyed
),
-- Oracle's cost reports and FOCUS reports of one tenancy are the same charges in two forms (Oracle
-- maps one line to one line), and a bucket synced whole holds both: each tenancy and UTC hour that
-- both hold lines starting in counts through one of them (oracle_hour_form), so a month whose sync
-- moved from one folder to the other mid-month counts each hour once and loses none. Only Oracle's
-- lines are read (the lake's provider folder).
oracle_hours AS (
    SELECT oracle_tenancy(ProviderName, x_Connector, BillingAccountId, SubAccountId) AS tenancy,
           epoch_us(ChargePeriodStart) // 3600000000 AS hour_no,  -- the UTC hour, whatever the session's zone
           oracle_hour_form(count(*) FILTER (WHERE x_Connector = 'oci_cost'),
                            count(*) FILTER (WHERE x_Connector = 'focus')) AS form
    FROM counted
    WHERE ProviderName = 'Oracle' AND x_Connector IN ('oci_cost', 'focus') AND ChargePeriodStart IS NOT NULL
    GROUP BY ALL
    HAVING count(DISTINCT x_Connector) = 2 AND tenancy IS NOT NULL
),
-- A GPU cloud's month to date (lines without an invoice id, where its invoices are deliveries) is
-- restated line by line by the invoice: a line whose resource's charge time an invoiced usage line
-- of another file covers (same provider, billing account and resource; the invoice's line from
-- its start to its end) counts through the invoice, wherever either file lies and whichever came
-- first. Only the lines an invoice bills again: other resources' and later days' lines of the
-- month to date still count, and credit notes (no positive cost) restate nothing.
-- (pipelines/cli/summary.py names the files, with the same rule: keep the two in step.)
invoiced_again AS (
    SELECT DISTINCT m.x_SourceSha256, m.x_SourceRow
    FROM counted AS m
    JOIN counted AS i
      ON i.ProviderName = m.ProviderName AND i.BillingAccountId = m.BillingAccountId AND i.ResourceId = m.ResourceId
    WHERE m.by_invoice AND m.InvoiceId IS NULL AND i.by_invoice AND i.InvoiceId IS NOT NULL AND i.BilledCost > 0
      AND i.x_SourceSha256 <> m.x_SourceSha256
      AND i.ChargePeriodStart <= m.ChargePeriodStart
      AND coalesce(m.ChargePeriodEnd, m.ChargePeriodStart) <= coalesce(i.ChargePeriodEnd, i.ChargePeriodStart)
),
-- A month-to-date line that an invoice bills part of (one line per instance for the month so far,
-- and the first week's invoice): it counts what the invoice has not billed yet. Each invoiced
-- usage line of another file for the same provider, billing account, resource and currency takes
-- its amount for the part of its time inside the line (all of it for a line within), and the
-- month-to-date line keeps the rest of its BilledCost, never below zero (nothing left: it no longer
-- counts). Its other amounts and quantities shrink in the same proportion, and where the invoice
-- bills its first part without a gap its charge starts where the invoice's ends, so the time is
-- paid once. (Lines wholly within one invoiced line are invoiced_again; the run summary names both.)
invoice_overlaps AS (
    SELECT m.x_SourceSha256, m.x_SourceRow, m.BilledCost AS line_billed, m.ChargePeriodStart AS line_start,
           m.ChargePeriodEnd AS line_end, i.ChargePeriodStart AS invoiced_start, i.ChargePeriodEnd AS invoiced_end,
           datediff('second', greatest(m.ChargePeriodStart, i.ChargePeriodStart), least(m.ChargePeriodEnd, i.ChargePeriodEnd))
               AS overlap_seconds,
           to_units(i.BilledCost)
               * datediff('second', greatest(m.ChargePeriodStart, i.ChargePeriodStart), least(m.ChargePeriodEnd, i.ChargePeriodEnd))
               // datediff('second', i.ChargePeriodStart, i.ChargePeriodEnd) AS invoiced_units
    FROM counted AS m
    JOIN counted AS i
      ON i.ProviderName = m.ProviderName AND i.BillingAccountId = m.BillingAccountId AND i.ResourceId = m.ResourceId
     AND i.BillingCurrency = m.BillingCurrency
    WHERE m.by_invoice AND m.InvoiceId IS NULL AND m.BilledCost > 0 AND m.ChargePeriodEnd > m.ChargePeriodStart
      AND i.by_invoice AND i.InvoiceId IS NOT NULL AND i.BilledCost > 0 AND i.ChargePeriodEnd > i.ChargePeriodStart
      AND i.x_SourceSha256 <> m.x_SourceSha256
      AND i.ChargePeriodStart < m.ChargePeriodEnd AND m.ChargePeriodStart < i.ChargePeriodEnd
),
invoiced_in_part AS (
    SELECT x_SourceSha256, x_SourceRow, to_units(any_value(line_billed)) AS billed_units,
           greatest(0, to_units(any_value(line_billed)) - sum(invoiced_units)) AS left_units,
           -- Invoiced from the line's start on, without a gap (the lines' overlaps add up to the span).
           CASE WHEN min(invoiced_start) <= any_value(line_start)
                 AND sum(overlap_seconds) = datediff('second', any_value(line_start), least(max(invoiced_end), any_value(line_end)))
                THEN least(max(invoiced_end), any_value(line_end)) ELSE any_value(line_start) END AS left_start
    FROM invoice_overlaps
    GROUP BY x_SourceSha256, x_SourceRow
)
SELECT n.* EXCLUDE (by_invoice, delivery_mode, delivery_seq, delivery_first_seen, line_key, line_version, key_ordinal)
           REPLACE (
               CASE WHEN p.left_units IS NULL THEN n.BilledCost ELSE from_units(p.left_units) END AS BilledCost,
               CASE WHEN p.left_units IS NULL THEN n.EffectiveCost
                    ELSE from_units(to_units(n.EffectiveCost) * p.left_units // p.billed_units) END AS EffectiveCost,
               CASE WHEN p.left_units IS NULL THEN n.ListCost
                    ELSE from_units(to_units(n.ListCost) * p.left_units // p.billed_units) END AS ListCost,
               CASE WHEN p.left_units IS NULL THEN n.ContractedCost
                    ELSE from_units(to_units(n.ContractedCost) * p.left_units // p.billed_units) END AS ContractedCost,
               CASE WHEN p.left_units IS NULL THEN n.PricingCurrencyEffectiveCost
                    ELSE from_units(to_units(n.PricingCurrencyEffectiveCost) * p.left_units // p.billed_units)
               END AS PricingCurrencyEffectiveCost,
               CASE WHEN p.left_units IS NULL THEN n.x_SourceCost
                    ELSE from_units(to_units(n.x_SourceCost) * p.left_units // p.billed_units) END AS x_SourceCost,
               CASE WHEN p.left_units IS NULL THEN n.ConsumedQuantity
                    ELSE CAST(from_units(to_units(n.ConsumedQuantity) * p.left_units // p.billed_units) AS DECIMAL(28, 10))
               END AS ConsumedQuantity,
               CASE WHEN p.left_units IS NULL THEN n.PricingQuantity
                    ELSE CAST(from_units(to_units(n.PricingQuantity) * p.left_units // p.billed_units) AS DECIMAL(28, 10))
               END AS PricingQuantity,
               coalesce(p.left_start, n.ChargePeriodStart) AS ChargePeriodStart)
FROM numbered AS n
LEFT JOIN oracle_hours AS o
  ON o.tenancy = oracle_tenancy(n.ProviderName, n.x_Connector, n.BillingAccountId, n.SubAccountId)
 AND o.hour_no = CASE WHEN n.ProviderName = 'Oracle' THEN epoch_us(n.ChargePeriodStart) // 3600000000 END
LEFT JOIN invoiced_again AS a ON a.x_SourceSha256 = n.x_SourceSha256 AND a.x_SourceRow = n.x_SourceRow
LEFT JOIN invoiced_in_part AS p ON p.x_SourceSha256 = n.x_SourceSha256 AND p.x_SourceRow = n.x_SourceRow
WHERE (o.form IS NULL OR o.form = n.x_Connector) AND a.x_SourceRow IS NULL AND (p.left_units IS NULL OR p.left_units > 0)
QUALIFY line_key IS NULL OR delivery_mode <> 'incremental'
     OR row_number() OVER (PARTITION BY ProviderName, line_key, key_ordinal
                           ORDER BY line_version DESC NULLS LAST, x_DeliveryCreatedAt DESC NULLS LAST,
                                    delivery_seq DESC NULLS LAST, delivery_first_seen DESC, x_DeliveryId DESC) = 1;
