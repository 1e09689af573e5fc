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
--     the invoice (invoiced_again); one the invoice bills part of counts the time it does not (invoiced_in_part).
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
-- restated line by line by the invoice. An invoiced usage line (a positive cost) of another file
-- bills the same charge again where it has the same provider, billing account, resource and SKU (a
-- node's monthly fee and its on-demand hours are two charges), over the time both cover; the
-- currency and the billing month do not matter, the time does (a week's invoice from November 29
-- bills December's month to date up to December 6). Whichever file came first and wherever either
-- lies:
--   * a month-to-date line within one such invoiced line counts through the invoice (invoiced_again);
--   * one they bill part of (one line per instance for the month so far, beside the first week's
--     invoice) counts the part of its time they do not cover, at its own price: its amounts and
--     quantities by the share of its time left, and where they cover its start its charge starts
--     where that cover ends. Covered all through, it no longer counts (invoiced_in_part).
-- Other resources' and later days' lines of the month to date still count, and credit notes (no
-- positive cost) restate nothing. (Each month is built apart: an invoice is an input of every month
-- its times reach, pipelines/warehouse/periods.py.)
-- (pipelines/cli/summary.py names the files, with the same rule: keep the two in step.)
invoice_matches AS (
    SELECT m.x_SourceSha256, m.x_SourceRow, m.BilledCost AS line_billed, m.ChargePeriodStart AS line_start,
           m.ChargePeriodEnd AS line_end, i.ChargePeriodStart AS invoiced_start, i.ChargePeriodEnd AS invoiced_end
    FROM counted AS m
    JOIN counted AS i
      ON i.ProviderName = m.ProviderName AND i.BillingAccountId = m.BillingAccountId AND i.ResourceId = m.ResourceId
     AND i.SkuId IS NOT DISTINCT FROM m.SkuId
    WHERE m.by_invoice AND m.InvoiceId IS NULL AND i.by_invoice AND i.InvoiceId IS NOT NULL AND i.BilledCost > 0
      AND i.x_SourceSha256 <> m.x_SourceSha256
      AND charges_meet(i.ChargePeriodStart, i.ChargePeriodEnd, m.ChargePeriodStart, m.ChargePeriodEnd)
),
invoiced_again AS (
    SELECT DISTINCT x_SourceSha256, x_SourceRow
    FROM invoice_matches
    WHERE invoiced_start <= line_start AND coalesce(line_end, line_start) <= coalesce(invoiced_end, invoiced_start)
),
-- The invoiced time inside each positive month-to-date line of a length, as runs of time that do
-- not overlap (an invoice and its re-issue bill the same days once).
invoiced_spans AS (
    SELECT x_SourceSha256, x_SourceRow, line_start, datediff('second', line_start, line_end) AS line_seconds,
           greatest(line_start, invoiced_start) AS s, least(line_end, invoiced_end) AS e
    FROM invoice_matches
    WHERE line_billed > 0 AND line_end > line_start AND invoiced_end > invoiced_start
      AND invoiced_start < line_end AND line_start < invoiced_end
),
invoiced_runs AS (
    SELECT x_SourceSha256, x_SourceRow, any_value(line_start) AS line_start, any_value(line_seconds) AS line_seconds,
           min(s) AS s, max(e) AS e
    FROM (SELECT *, sum(CASE WHEN s <= reached THEN 0 ELSE 1 END) OVER (PARTITION BY x_SourceSha256, x_SourceRow ORDER BY s, e) AS run
          FROM (SELECT *, max(e) OVER (PARTITION BY x_SourceSha256, x_SourceRow ORDER BY s, e
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reached
                FROM invoiced_spans))
    GROUP BY x_SourceSha256, x_SourceRow, run
),
invoiced_in_part AS (
    SELECT x_SourceSha256, x_SourceRow, any_value(line_seconds) AS line_seconds,
           any_value(line_seconds) - sum(datediff('second', s, e)) AS left_seconds,
           coalesce(max(e) FILTER (WHERE s = line_start), any_value(line_start)) AS left_start
    FROM invoiced_runs
    GROUP BY x_SourceSha256, x_SourceRow
)
SELECT n.* EXCLUDE (by_invoice, delivery_mode, delivery_seq, delivery_first_seen, line_key, line_version, key_ordinal)
           REPLACE (
               share_of(n.BilledCost, p.left_seconds, p.line_seconds) AS BilledCost,
               share_of(n.EffectiveCost, p.left_seconds, p.line_seconds) AS EffectiveCost,
               share_of(n.ListCost, p.left_seconds, p.line_seconds) AS ListCost,
               share_of(n.ContractedCost, p.left_seconds, p.line_seconds) AS ContractedCost,
               share_of(n.PricingCurrencyEffectiveCost, p.left_seconds, p.line_seconds) AS PricingCurrencyEffectiveCost,
               share_of(n.x_SourceCost, p.left_seconds, p.line_seconds) AS x_SourceCost,
               CAST(share_of(n.ConsumedQuantity, p.left_seconds, p.line_seconds) AS DECIMAL(28, 10)) AS ConsumedQuantity,
               CAST(share_of(n.PricingQuantity, p.left_seconds, p.line_seconds) AS DECIMAL(28, 10)) AS PricingQuantity,
               coalesce(p.left_start, n.ChargePeriodStart) AS ChargePeriodStart)
FROM numbered AS n
LEFT JOIN oracle_hours AS o
  ON o.tenancy = oracle_tenancy(n.ProviderName, n.x_Connector, n.BillingAccountId, n.SubAccountId)
 AND o.hour_no = CASE WHEN n.ProviderName = 'Oracle' THEN epoch_us(n.ChargePeriodStart) // 3600000000 END
LEFT JOIN invoiced_again AS a ON a.x_SourceSha256 = n.x_SourceSha256 AND a.x_SourceRow = n.x_SourceRow
LEFT JOIN invoiced_in_part AS p ON p.x_SourceSha256 = n.x_SourceSha256 AND p.x_SourceRow = n.x_SourceRow
WHERE (o.form IS NULL OR o.form = n.x_Connector) AND a.x_SourceRow IS NULL AND (p.left_seconds IS NULL OR p.left_seconds > 0)
QUALIFY line_key IS NULL OR delivery_mode <> 'incremental'
     OR row_number() OVER (PARTITION BY ProviderName, line_key, key_ordinal
                           ORDER BY line_version DESC NULLS LAST, x_DeliveryCreatedAt DESC NULLS LAST,
                                    delivery_seq DESC NULLS LAST, delivery_first_seen DESC, x_DeliveryId DESC) = 1;
