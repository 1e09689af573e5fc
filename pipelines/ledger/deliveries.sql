-- The ledger's delivery rules, recomputed after each ingest over every file version's facts (the
-- registry, the manifests and raw.file_slices: never the lines themselves, so their cost grows with
-- the number of files, not of rows), so the outcome never depends on which run loaded which file. Builds raw.deliveries and raw.delivery_slices and sets
-- raw.files.delivery_id / status / delivery_note for billing files. core.billing_lines reads them.

-- Billing file versions in play: read into raw.cost_lines, or the same content as one that was.
CREATE OR REPLACE TEMP TABLE ledger_files AS
SELECT path, sha256, coalesce(content_sha256, sha256) AS content, connector, status, ingested_at, file_mtime,
       layout_delivery_id, layout_export, layout_period, layout_seq
FROM raw.files
WHERE kind = 'billing' AND status IN ('loaded', 'incomplete', 'superseded', 'duplicate');

-- Every manifest version ever read describes a real delivery; the parts it lists, as object keys.
CREATE OR REPLACE TEMP TABLE ledger_manifest_parts AS
SELECT delivery_id, created_at, file_mtime, unnest(parts) AS part FROM raw.manifests;

-- A file is a part its manifest lists when the key and the landing path agree on their tail (the
-- landing folder may be the bucket or any prefix of it), or on their last three segments (a bucket
-- prefix synced into a folder of another name: s3://bucket/cur/ into landing/aws/ keeps the billing
-- period, the assembly or run id and the file name) where no other key shares them. Several manifests listing one key (an export
-- that overwrites its files): the newest manifest's delivery.
CREATE OR REPLACE TEMP TABLE ledger_file_parts AS
-- Joined on the paths' last two segments (or, where either has one, the file name), which each way
-- of agreeing implies equal: a hash join, not every file against every part (an Azure export names
-- every run's parts alike, part_0_0001.csv: 104,160 files took over five minutes).
WITH files AS (SELECT *, nullif(regexp_extract(path, '[^/]+/[^/]+$'), '') AS tail2, regexp_extract(path, '[^/]*$') AS name,
                      nullif(regexp_extract(path, '[^/]+/[^/]+/[^/]+$'), '') AS tail3
               FROM ledger_files),
     parts AS (SELECT *, nullif(regexp_extract(part, '[^/]+/[^/]+$'), '') AS tail2, regexp_extract(part, '[^/]*$') AS name,
                      nullif(regexp_extract(part, '[^/]+/[^/]+/[^/]+$'), '') AS tail3
               FROM ledger_manifest_parts),
     matched AS (
         SELECT f.path, f.sha256, mp.delivery_id, mp.part, mp.created_at, mp.file_mtime, f.tail3 = mp.tail3 AS same_tail3
         FROM files AS f JOIN parts AS mp ON mp.tail2 = f.tail2
         UNION ALL
         SELECT f.path, f.sha256, mp.delivery_id, mp.part, mp.created_at, mp.file_mtime, false
         FROM files AS f JOIN parts AS mp ON mp.name = f.name AND (mp.tail2 IS NULL OR f.tail2 IS NULL))
-- A manifest's parts match on their last three segments only where no other key shares them: two
-- accounts' exports of one name in overwrite mode (…/data/BILLING_PERIOD=2023-11/cur2-00001.csv.gz
-- under two prefixes) do, and a file synced from either is neither's part by its tail alone; such a
-- manifest is matched as before, or not at all.
SELECT path, sha256, delivery_id, part
FROM matched
WHERE part = path OR ends_with(part, '/' || path) OR ends_with(path, '/' || part)
   OR (coalesce(same_tail3, false) AND delivery_id NOT IN (
          SELECT p.delivery_id FROM ledger_manifest_parts AS p
          WHERE regexp_extract(p.part, '[^/]+/[^/]+/[^/]+$') IN (
              SELECT regexp_extract(part, '[^/]+/[^/]+/[^/]+$') AS tail3 FROM ledger_manifest_parts
              GROUP BY tail3 HAVING tail3 <> '' AND count(DISTINCT part) > 1)))
QUALIFY dense_rank() OVER (PARTITION BY path, sha256
                           ORDER BY coalesce(created_at, file_mtime) DESC NULLS LAST, delivery_id DESC) = 1;

-- The delivery of each file: the manifest's that lists it, else its folder layout's or file name's,
-- else the delivery of another file with the same content (a renamed copy of a delivered part
-- stays in that delivery), else GCP's rows (incremental), else the file is a delivery of its own.
CREATE OR REPLACE TEMP TABLE ledger_assigned AS
WITH placed AS (
    SELECT f.*, coalesce((SELECT any_value(p.delivery_id) FROM ledger_file_parts AS p
                          WHERE p.path = f.path AND p.sha256 = f.sha256), f.layout_delivery_id) AS known
    FROM ledger_files AS f
),
twins AS (SELECT content, min(known) AS twin FROM placed WHERE known IS NOT NULL GROUP BY content)
SELECT p.* EXCLUDE (known),
       coalesce(p.known, t.twin,
                CASE WHEN p.connector = 'gcp_billing' THEN 'gcp:' ELSE 'file:' END || left(p.content, 16)) AS delivery_id
FROM placed AS p LEFT JOIN twins AS t USING (content);

-- What the manifests say about each delivery. The date-range-level CUR manifest (and the Data
-- Exports period manifest) names the newest delivery only while it is the version at its path.
CREATE OR REPLACE TEMP TABLE ledger_manifest_info AS
SELECT m.delivery_id, any_value(m.provider) AS provider, any_value(m.export_name) AS export_name,
       any_value(m.scope) AS scope, any_value(m.billing_period) AS billing_period, any_value(m.mode) AS mode,
       coalesce(max(m.created_at), max(m.file_mtime)) AS created_at, max(len(m.parts)) AS parts_expected,
       bool_or(m.latest_pointer AND f.status = 'manifest') AS latest_pointer, list(DISTINCT m.path ORDER BY m.path) AS manifests
FROM raw.manifests AS m JOIN raw.files AS f USING (path, sha256)
GROUP BY m.delivery_id;

-- One reader per content in play: the file version whose rows are in raw.cost_lines, as
-- core.billing_lines' `readers` picks it (keep the two in step). A version overwritten at its own
-- path still serves its rows while a duplicate elsewhere holds its content.
CREATE OR REPLACE TEMP TABLE ledger_readers AS
    SELECT path, sha256, coalesce(content_sha256, sha256) AS content
    FROM raw.files
    WHERE kind = 'billing'
      AND (status IN ('loaded', 'incomplete', 'superseded') OR (status = 'replaced' AND rows_loaded > 0))
      AND coalesce(content_sha256, sha256) IN (
          SELECT coalesce(content_sha256, sha256) FROM raw.files
          WHERE kind = 'billing' AND status IN ('loaded', 'incomplete', 'superseded', 'duplicate'))
    QUALIFY row_number() OVER (PARTITION BY coalesce(content_sha256, sha256)
                               ORDER BY status = 'replaced', ingested_at, path, sha256) = 1;

CREATE OR REPLACE TEMP TABLE ledger_delivery_contents AS
SELECT delivery_id, content, any_value(layout_export) AS layout_export, any_value(layout_period) AS layout_period,
       max(layout_seq) AS seq, min(ingested_at) AS first_seen_at, max(file_mtime) AS last_modified,
       any_value(connector) AS connector
FROM ledger_assigned GROUP BY delivery_id, content;

-- Per delivery: its identity and the facts that rank it.
CREATE OR REPLACE TEMP TABLE ledger_delivery_facts AS
WITH contents AS (
    SELECT delivery_id, any_value(layout_export) AS layout_export, any_value(layout_period) AS layout_period,
           max(seq) AS seq, min(first_seen_at) AS first_seen_at, max(last_modified) AS last_modified,
           any_value(connector) AS connector
    FROM ledger_delivery_contents GROUP BY delivery_id
),
files AS (SELECT delivery_id, count(*) AS files FROM ledger_assigned GROUP BY delivery_id),
seen AS (SELECT delivery_id, count(DISTINCT part) AS parts_seen FROM ledger_file_parts GROUP BY delivery_id),
line_facts AS (
    SELECT dc.delivery_id, sum(fs.lines) AS lines, bool_or(fs.final) AS final, max(fs.max_charge_end) AS max_charge_end,
           max(fs.export_time) AS export_time, any_value(fs.line_provider) AS provider
    FROM ledger_delivery_contents AS dc
    JOIN ledger_readers AS r USING (content)
    JOIN raw.file_slices AS fs ON fs.path = r.path AND fs.sha256 = r.sha256
    GROUP BY dc.delivery_id
),
ids AS (SELECT delivery_id FROM contents UNION SELECT delivery_id FROM ledger_manifest_info)
SELECT i.delivery_id,
       coalesce(l.provider, m.provider) AS provider,
       coalesce(m.export_name, c.layout_export, '') AS export_name,
       m.scope,
       coalesce(m.billing_period, c.layout_period) AS billing_period,
       CASE WHEN c.connector IN ('gcp_billing', 'oci_cost') THEN 'incremental' ELSE coalesce(m.mode, 'replace') END AS mode,
       CASE WHEN m.delivery_id IS NOT NULL THEN 'manifest' WHEN i.delivery_id LIKE 'file:%' THEN 'file'
            WHEN i.delivery_id LIKE 'gcp:%' THEN 'rows' ELSE 'layout' END AS source,
       coalesce(m.created_at, l.export_time) AS created_at,
       c.seq,
       CAST(m.parts_expected AS INTEGER) AS parts_expected,
       CAST(CASE WHEN m.delivery_id IS NOT NULL THEN coalesce(s.parts_seen, 0) ELSE coalesce(f.files, 0) END AS INTEGER) AS parts_seen,
       coalesce(s.parts_seen, 0) >= coalesce(m.parts_expected, 0) AS complete,
       coalesce(m.latest_pointer, false) AS latest_pointer,
       coalesce(f.files, 0) AS files, coalesce(l.lines, 0) AS lines, l.final, l.max_charge_end, c.first_seen_at,
       c.last_modified, m.manifests, c.connector
FROM ids AS i
LEFT JOIN contents AS c USING (delivery_id)
LEFT JOIN ledger_manifest_info AS m USING (delivery_id)
LEFT JOIN files AS f USING (delivery_id)
LEFT JOIN seen AS s USING (delivery_id)
LEFT JOIN line_facts AS l USING (delivery_id);

-- Slices: a delivery's lines by the provider, billing account and billing period they state (and
-- invoice, where the connector's invoices are deliveries: a GPU cloud's weekly invoices add up, a
-- re-sent invoice replaces its own lines). Within one key (provider, export, scope, period, invoice)
-- of a `replace` export one delivery counts, ranked by:
-- complete first (a newer delivery still missing parts does not yet replace a complete one), the
-- provider's creation time, the delivery the provider's latest manifest names, final (invoice ids)
-- over open, the latest line dates, and — last resort, for plain uploads only — the latest loaded,
-- then (loaded in the same run) the file modified later, never the content's hash. A delivery's
-- slices in one key rank as one (its facts over them): a delivery never replaces itself.
-- Plain uploads replace only the charge time they cover: a month to date restated covers the days
-- before it, so files of disjoint days (a GPU cloud's daily files, the month's halves) are parts
-- that add up, and of two that share days each counts for the time no better-ranked one covers
-- (raw.delivery_slices.counts_for; core.billing_lines keeps the lines whose charge period lies there).
-- Then one export counts for each provider, scope, period and invoice (two CUR definitions of one
-- payer, a console download beside the synced export: the same charges, never to be added):
-- complete, an export's delivery before a plain upload, final, the latest day a charge starts on
-- (a month-long tax line says nothing of how far an export has come), then the most lines (the
-- finer export: hourly over daily, whichever refreshed last), then the newest; so the choice
-- stays put from one refresh to the next. Last, of a provider's own export and its FOCUS export of
-- the same account and period, one family counts (family_choice below).
-- Incremental deliveries and lines without a billing period count in their key (lines dedupe later).
-- Two plain uploads' charge dates overlap; unknown dates (an export's delivery, a file read before
-- they were recorded) overlap everything.
CREATE OR REPLACE TEMP MACRO ledger_overlaps(a_start, a_end, b_start, b_end) AS
    coalesce(a_start < b_end AND b_start < a_end, true);
-- A billing account as scopes are compared: Azure states a billing account's scope, and FocusCost
-- its lines' account, as the account's path ('/providers/Microsoft.Billing/billingAccounts/N' for N).
CREATE OR REPLACE TEMP MACRO ledger_account_id(account) AS
    coalesce(nullif(regexp_extract(account, '(?i)^/providers/microsoft\.billing/billingaccounts/([^/]+)$', 1), ''), account);
-- A line's subscription as scopes name it: Azure's own exports state its id, FocusCost its path.
CREATE OR REPLACE TEMP MACRO ledger_subscription(sub_account) AS
    lower(coalesce(nullif(regexp_extract(sub_account, '(?i)^/subscriptions/([^/]+)', 1), ''), sub_account));
-- The subscription a scope lies in (a subscription's, a resource group's); NULL for a billing or
-- management scope (a billing profile, an invoice section, an EA department or enrollment account).
CREATE OR REPLACE TEMP MACRO ledger_scope_subscription(scope) AS
    nullif(lower(regexp_extract(scope, '(?i)^/subscriptions/([^/]+)', 1)), '');
-- Whether the scope `narrower` lies under the scope `holder` (a resource group in its subscription,
-- an invoice section in its billing profile): the holder's export holds its charges.
CREATE OR REPLACE TEMP MACRO ledger_scope_within(holder, narrower) AS
    lower(holder) <> lower(narrower) AND starts_with(lower(narrower), lower(holder) || '/');

DELETE FROM raw.delivery_slices;
INSERT INTO raw.delivery_slices BY NAME
WITH slices AS (
    SELECT dc.delivery_id, fs.line_provider, fs.line_account, fs.line_period, fs.line_invoice,
           coalesce(fs.by_invoice, false) AS by_invoice, sum(fs.lines) AS lines,
           bool_or(fs.final) AS final, max(fs.max_charge_end) AS max_charge_end,
           -- NULL (a file read before the ledger recorded them) when any file lacks them.
           CASE WHEN count(fs.min_charge_start) = count(*) THEN min(fs.min_charge_start) END AS min_charge_start,
           CASE WHEN count(fs.max_charge_start) = count(*) THEN max(fs.max_charge_start) END AS max_charge_start,
           -- The earliest end of its lines starting last, over its files (NULL: read before it was recorded).
           arg_min(fs.last_start_end, {'start': -epoch_us(fs.max_charge_start), 'end': fs.last_start_end})
               FILTER (WHERE fs.last_start_end IS NOT NULL) AS last_start_end,
           -- Azure's actual and amortized datasets are two exports of one scope (merged in core.cost_lines).
           any_value(fs.dataset) AS dataset,
           -- The sub-accounts its lines bill (Oracle's FOCUS reports: the tenancy, below).
           list_distinct(flatten(list(list_transform(fs.sub_account_reach, lambda r: r.id)))) AS sub_accounts
    FROM ledger_delivery_contents AS dc
    JOIN ledger_readers AS r USING (content)
    JOIN raw.file_slices AS fs ON fs.path = r.path AND fs.sha256 = r.sha256
    GROUP BY ALL
),
-- When each slice's lines bill each subscription, over its files (raw.file_slices.sub_account_reach):
-- its first charge start, its last, and the earliest end of its lines starting last.
slice_subscriptions AS (
    SELECT delivery_id, line_provider, line_account, line_period, line_invoice, by_invoice,
           ledger_subscription(sub.id) AS subscription, min(sub.first_start) AS first_start, max(sub.last_start) AS last_start,
           arg_min(sub.last_start_end, {'start': -epoch_us(sub.last_start), 'end': sub.last_start_end})
               FILTER (WHERE sub.last_start_end IS NOT NULL) AS last_start_end
    FROM (SELECT dc.delivery_id, fs.line_provider, fs.line_account, fs.line_period, fs.line_invoice,
                 coalesce(fs.by_invoice, false) AS by_invoice, unnest(fs.sub_account_reach) AS sub
          FROM ledger_delivery_contents AS dc
          JOIN ledger_readers AS r USING (content)
          JOIN raw.file_slices AS fs ON fs.path = r.path AND fs.sha256 = r.sha256)
    GROUP BY ALL
),
-- The scope the manifests of an export state (when they agree): a delivery of that export seen only
-- through its folders (its manifest overwritten before the sync, or not synced yet) takes it, so
-- it competes with the export's other deliveries and never adds to them. The lines' own billing
-- account can differ from a manifest's scope (Azure's '/providers/Microsoft.Billing/billingAccounts/N'
-- for N; a Data Export created in a member account).
export_scopes AS (
    SELECT export_name, any_value(scope) AS scope FROM ledger_manifest_info
    WHERE scope IS NOT NULL GROUP BY export_name HAVING count(DISTINCT scope) = 1
),
keyed AS (
    SELECT s.*, d.mode, d.source, d.complete, d.created_at, d.latest_pointer, d.first_seen_at, d.last_modified,
           -- FOCUS files, or the provider's own export format (one family: Azure's actual and amortized datasets).
           CASE WHEN d.connector = 'focus' THEN 'focus' ELSE 'native' END AS family,
           s.line_provider AS provider, d.export_name AS delivery_export,
           CASE WHEN d.source = 'file' THEN coalesce(s.dataset, '') ELSE d.export_name || coalesce('#' || s.dataset, '') END AS export_name,
           coalesce(d.scope, CASE WHEN d.source = 'layout' THEN (SELECT e.scope FROM export_scopes AS e
                                                               WHERE e.export_name = d.export_name) END,
                    -- Oracle's FOCUS reports are a tenancy's (its bucket's), and tenancies share a
                    -- subscription, the billing account they state: a day file of one tenancy is no
                    -- restatement of another's.
                    CASE WHEN d.connector = 'focus' AND s.line_provider = 'Oracle' AND len(s.sub_accounts) = 1
                         THEN s.line_account || ' tenancy ' || s.sub_accounts[1] END,
                    s.line_account) AS scope,
           coalesce(d.billing_period, CAST(s.line_period AS DATE)) AS billing_period,
           mode = 'incremental' OR coalesce(d.billing_period, CAST(s.line_period AS DATE)) IS NULL AS always_counts
    FROM slices AS s JOIN ledger_delivery_facts AS d USING (delivery_id)
),
-- Each delivery's facts over its slices in a key, so they rank as one.
key_facts AS (
    SELECT *,
           dense_rank() OVER (ORDER BY provider, export_name, scope, billing_period, line_invoice) AS key_id,
           bool_or(final) OVER delivery_in_key AS key_final,
           max(max_charge_end) OVER delivery_in_key AS key_charge_end
    FROM keyed
    WINDOW delivery_in_key AS (PARTITION BY delivery_id, provider, export_name, scope, billing_period, line_invoice)
),
ranked AS (
    SELECT *, CASE WHEN always_counts THEN 1 ELSE dense_rank() OVER (
                  PARTITION BY key_id, always_counts
                  ORDER BY complete DESC, created_at DESC NULLS LAST, latest_pointer DESC, key_final DESC,
                           -- An invoice sent again is its newer version, whatever days its lines reach.
                           CASE WHEN line_invoice IS NULL THEN key_charge_end END DESC NULLS LAST,
                           first_seen_at DESC, last_modified DESC NULLS LAST,
                           delivery_id DESC) END AS rank,
              bool_or(source = 'file') OVER (PARTITION BY key_id) AS has_uploads,
              -- The scope as the lines state it: an Azure billing-account export's scope is the account's path.
              ledger_account_id(scope) AS account_scope
    FROM key_facts
),
-- Keys with plain uploads: each stretch of charge time counts through the best-ranked slice whose
-- charge dates cover it (an export's delivery, or unknown dates, cover all time), so an upload
-- counts for the stretches no better-ranked one covers: beside a download of days 8-14, one of
-- days 1-8 counts for days 1-7. One span per key and rank, [s, e): from the first charge start to
-- past the last charge start and the last end. An invoice covers all time: one version of it counts.
spans AS (
    SELECT key_id, rank,
           coalesce(CASE WHEN source = 'file' AND line_invoice IS NULL AND count(min_charge_start) = count(*)
                         THEN min(min_charge_start) END, '-infinity'::TIMESTAMPTZ) AS s,
           coalesce(CASE WHEN source = 'file' AND line_invoice IS NULL AND count(max_charge_start) = count(*)
                         THEN greatest(max(max_charge_end), max(max_charge_start) + INTERVAL 1 MICROSECOND) END,
                    'infinity'::TIMESTAMPTZ) AS e
    FROM ranked WHERE has_uploads AND NOT always_counts GROUP BY key_id, rank, source, line_invoice
),
-- The key's charge time cut at every span's ends; each stretch goes to the best rank covering it.
cuts AS (SELECT key_id, s AS cut FROM spans UNION SELECT key_id, e FROM spans),
stretches AS (
    SELECT key_id, cut AS s, lead(cut) OVER (PARTITION BY key_id ORDER BY cut) AS e FROM cuts QUALIFY e IS NOT NULL
),
owners AS (
    SELECT t.key_id, t.s, t.e, min(p.rank) AS rank
    FROM stretches AS t JOIN spans AS p ON p.key_id = t.key_id AND p.s <= t.s AND t.e <= p.e
    GROUP BY t.key_id, t.s, t.e
),
-- A rank's adjacent stretches joined into ranges.
islands AS (
    SELECT *, sum(CASE WHEN s = prev_e THEN 0 ELSE 1 END) OVER (PARTITION BY key_id, rank ORDER BY s) AS island
    FROM (SELECT *, lag(e) OVER (PARTITION BY key_id, rank ORDER BY s) AS prev_e FROM owners)
),
owned AS (
    SELECT key_id, rank, list({'since': s, 'until': e} ORDER BY s) AS ranges
    FROM (SELECT key_id, rank, min(s) AS s, max(e) AS e FROM islands GROUP BY key_id, rank, island)
    GROUP BY key_id, rank
),
key_counted AS (
    SELECT r.*, r.always_counts OR (CASE WHEN r.has_uploads THEN o.ranges IS NOT NULL ELSE r.rank = 1 END) AS counts_in_key,
           -- The charge time an upload counts for, where it is not all of its own (NULL: every line counts).
           CASE WHEN o.ranges <> [{'since': p.s, 'until': p.e}] THEN o.ranges END AS counts_for,
           CASE WHEN r.source = 'file' THEN p.s END AS s, CASE WHEN r.source = 'file' THEN p.e END AS e
    FROM ranked AS r
    LEFT JOIN spans AS p ON p.key_id = r.key_id AND p.rank = r.rank AND r.has_uploads AND NOT r.always_counts
    LEFT JOIN owned AS o ON o.key_id = r.key_id AND o.rank = r.rank AND r.has_uploads AND NOT r.always_counts
),
-- What replaced each slice that does not count in its key, or the part of an upload that does not:
-- the best-ranked counting one it overlaps.
replaced AS (
    SELECT r.*, (SELECT arg_min(o.delivery_id, o.rank) FROM key_counted AS o
                 WHERE o.key_id = r.key_id AND o.counts_in_key AND o.rank < r.rank
                   AND ledger_overlaps(o.s, o.e, r.s, r.e)) AS replaced_by
    FROM key_counted AS r
),
-- Which export counts where several of one family state the same provider, scope and period: each
-- key's counting slices taken together, ranked, and the verdict applied to every slice of that key.
key_summary AS (
    SELECT key_id, any_value(provider) AS provider, any_value(dataset) AS dataset, any_value(family) AS family,
           any_value(account_scope) AS account_scope,
           any_value(billing_period) AS billing_period, any_value(line_invoice) AS line_invoice,
           any_value(export_name) AS export_name, bool_and(complete) AS complete, bool_and(source = 'file') AS uploads,
           bool_or(final) AS final, max(max_charge_start) AS last_start, sum(lines) AS lines, max(created_at) AS created_at,
           arg_min(delivery_id, rank) AS best_delivery,
           arg_min(CASE WHEN source = 'file' THEN 'a plain upload' ELSE delivery_export END, rank) AS best_export
    FROM key_counted WHERE counts_in_key AND NOT always_counts GROUP BY key_id
),
export_choice AS (
    SELECT key_id,
           row_number() OVER w AS export_rank,
           first_value(best_delivery) OVER w AS chosen_delivery,
           first_value(best_export) OVER w AS chosen_export
    FROM key_summary
    WINDOW w AS (PARTITION BY provider, family, coalesce(dataset, ''), account_scope, billing_period, line_invoice
                 ORDER BY complete DESC, uploads, final DESC, CAST(last_start AS DATE) DESC NULLS LAST, lines DESC,
                          created_at DESC NULLS LAST, export_name DESC, best_delivery DESC)
),
-- What counts so far: each key's verdict, then each export choice's.
exported AS (
    SELECT r.*, r.always_counts OR (r.counts_in_key AND coalesce(c.export_rank, 1) = 1) AS counts_as_export,
           c.export_rank, c.chosen_delivery, c.chosen_export
    FROM replaced AS r LEFT JOIN export_choice AS c ON c.key_id = r.key_id AND NOT r.always_counts
),
-- A provider's own export and its FOCUS export of one billing account and period (Azure's actual
-- and amortized exports beside its FOCUS export; a GCP standard export beside the FOCUS one) are
-- the same charges in two forms: one family counts. The provider's own, unless it is incomplete
-- or two days or more behind the FOCUS one (its export switched off for FOCUS mid-month); so the
-- choice holds from one day's deliveries to the next.
-- Per dataset first (Azure's actual and amortized exports are one family, and each must reach as
-- far: a stale actual export beside a current amortized one would lose the billed cost), then the
-- family: as far as its least advanced dataset, from its earliest charge.
family_datasets AS (
    SELECT provider, account_scope, billing_period, line_invoice, family, coalesce(dataset, '') AS dataset,
           bool_and(complete) AS complete, min(min_charge_start) AS first_start, max(max_charge_start) AS last_start,
           arg_min(delivery_id, rank) AS best_delivery,
           arg_min(CASE WHEN source = 'file' THEN 'a plain upload' ELSE delivery_export END, rank) AS best_export
    FROM exported WHERE counts_as_export AND billing_period IS NOT NULL
    GROUP BY provider, account_scope, billing_period, line_invoice, family, coalesce(dataset, '')
),
family_summary AS (
    SELECT provider, account_scope, billing_period, line_invoice, family, bool_and(complete) AS complete,
           min(first_start) AS first_start, min(last_start) AS last_start,
           arg_min(best_delivery, dataset) AS best_delivery, arg_min(best_export, dataset) AS best_export
    FROM family_datasets
    GROUP BY provider, account_scope, billing_period, line_invoice, family
),
-- Current: its charges reach within a day of the other family's last and begin within a day of its first.
family_choice AS (
    SELECT *, row_number() OVER w AS family_rank,
           first_value(best_delivery) OVER w AS family_delivery, first_value(best_export) OVER w AS family_export
    FROM (SELECT *, coalesce(CAST(last_start AS DATE) >= CAST(max(last_start) OVER month AS DATE) - 1
                             AND CAST(first_start AS DATE) <= CAST(min(first_start) OVER month AS DATE) + 1, false) AS current
          FROM family_summary
          WINDOW month AS (PARTITION BY provider, account_scope, billing_period, line_invoice))
    WINDOW w AS (PARTITION BY provider, account_scope, billing_period, line_invoice
                 ORDER BY complete DESC, current DESC, family = 'native' DESC, last_start DESC NULLS LAST)
),
in_family AS (
    SELECT r.*, r.counts_as_export AND coalesce(f.family_rank, 1) = 1 AS counts_in_family,
           -- The billing account the lines state, as scopes are compared (Azure's FocusCost states its path).
           ledger_account_id(r.line_account) AS line_account_id,
           f.family_rank, f.family_delivery, f.family_export
    FROM exported AS r
    LEFT JOIN family_choice AS f
      ON f.provider IS NOT DISTINCT FROM r.provider AND f.account_scope IS NOT DISTINCT FROM r.account_scope
     AND f.billing_period = r.billing_period AND f.line_invoice IS NOT DISTINCT FROM r.line_invoice AND f.family = r.family
),
-- An export of the whole billing account (its scope is the account its lines bill: a payer's CUR,
-- an Azure billing-account export) holds every narrower export's charges of that account (a Data
-- Export created in a member account, an Azure subscription's export), and an export of a wider
-- scope holds those of the scopes it contains (a billing profile's export holds its invoice
-- sections' and its subscriptions'): a narrower export counts only for the charges that
-- start past the reach of every complete export holding it, so while those lag (a day's sync
-- behind, or switched off mid-month) its last days count once, and no day twice.
-- A holder's reach: the earliest end of its lines starting last (an hourly export through
-- 05:00 reaches 06:00 beside the day's daily lines, a daily one the next midnight; a month-long fee
-- or tax line says nothing of how far it has come), at most the day after its last charge start. A narrower line starting before the reach (a daily line beside
-- an hourly whole export through 05:00) counts through the holder alone once that reaches past it.
-- The holder covers the narrower one in its own family and dataset, and across forms: a
-- FOCUS export covers the provider's own (Azure's actual and amortized datasets both), and the
-- own form counting for the scope (a payer's CUR; Azure's actual and amortized exports, which
-- count together) covers a FOCUS one.
holders AS (
    SELECT provider, family, coalesce(dataset, '') AS dataset, line_account_id, billing_period, line_invoice,
           scope AS holder_scope, account_scope = line_account_id AS whole,
           coalesce(least(coalesce(arg_min(last_start_end, {'start': -epoch_us(max_charge_start), 'end': last_start_end})
                                       FILTER (WHERE last_start_end IS NOT NULL), max(max_charge_end)),
                          CAST(CAST(max(max_charge_start) AS DATE) + 1 AS TIMESTAMPTZ)),
                    'infinity'::TIMESTAMPTZ) AS reach,
           arg_min(delivery_id, rank) AS holder_delivery, arg_min(delivery_export, rank) AS holder_export
    FROM in_family
    WHERE counts_in_family AND complete AND source <> 'file'
    GROUP BY provider, family, coalesce(dataset, ''), line_account_id, billing_period, line_invoice, scope, account_scope
),
-- An export of a billing or management scope (a billing profile's, an invoice section's, an EA
-- department's, a management group's) holds a subscription's charges from its first line of that
-- subscription to how far its lines of it reach: a subscription moved to another scope mid-month,
-- or new in it, is held only for the days its lines bill it.
holder_subscriptions AS (
    SELECT h.provider, h.family, coalesce(h.dataset, '') AS dataset, h.line_account_id, h.billing_period, h.line_invoice,
           h.scope AS holder_scope, ss.subscription, min(ss.first_start) AS first_start,
           least(arg_min(ss.last_start_end, {'start': -epoch_us(ss.last_start), 'end': ss.last_start_end})
                     FILTER (WHERE ss.last_start_end IS NOT NULL),
                 CAST(CAST(max(ss.last_start) AS DATE) + 1 AS TIMESTAMPTZ)) AS reach,
           arg_min(h.delivery_id, h.rank) AS holder_delivery, arg_min(h.delivery_export, h.rank) AS holder_export
    FROM in_family AS h
    JOIN slice_subscriptions AS ss
      ON ss.delivery_id = h.delivery_id AND ss.line_provider IS NOT DISTINCT FROM h.line_provider
     AND ss.line_account IS NOT DISTINCT FROM h.line_account AND ss.line_period IS NOT DISTINCT FROM h.line_period
     AND ss.line_invoice IS NOT DISTINCT FROM h.line_invoice AND ss.by_invoice = h.by_invoice
    WHERE h.counts_in_family AND h.complete AND h.source <> 'file' AND h.account_scope IS DISTINCT FROM h.line_account_id
      AND ledger_scope_subscription(h.scope) IS NULL
    GROUP BY ALL
),
-- The exports of a narrower scope than their lines' account, with the subscription their scope lies in.
narrower AS (
    SELECT *, ledger_scope_subscription(scope) AS scope_subscription FROM in_family
    WHERE source <> 'file' AND account_scope IS DISTINCT FROM line_account_id
),
-- Each narrower slice's holders, one row a holding scope, with the charge time it holds [s, e): as
-- far as its least advanced dataset (a FOCUS export beside an own export in datasets, Azure's
-- actual and amortized, meets one per dataset; the own form is as far as the less advanced of the
-- two). The whole account's export and a scope whose path holds its own hold it up to their reach;
-- a billing or management scope, a subscription's (or a resource group's) from its first line of
-- that subscription to their reach.
held AS (
    SELECT delivery_id, line_provider, line_account, line_period, line_invoice, by_invoice, holder_scope, bool_or(whole) AS whole, max(first_start) AS s, min(reach) AS e,
           arg_min(holder_delivery, reach) AS holder_delivery, arg_min(holder_export, reach) AS holder_export
    FROM (
        SELECT r.delivery_id, r.line_provider, r.line_account, r.line_period, r.line_invoice, r.by_invoice, w.holder_scope,
               w.whole, '-infinity'::TIMESTAMPTZ AS first_start, w.reach, w.holder_delivery, w.holder_export
        FROM narrower AS r
        JOIN holders AS w
          ON w.holder_delivery <> r.delivery_id
         AND w.provider IS NOT DISTINCT FROM r.provider AND w.line_account_id = r.line_account_id
         AND w.billing_period = r.billing_period AND w.line_invoice IS NOT DISTINCT FROM r.line_invoice
         AND ((w.family = r.family AND w.dataset = coalesce(r.dataset, '')) OR w.family = 'focus' OR r.family = 'focus')
         AND (w.whole OR ledger_scope_within(w.holder_scope, r.scope))
        UNION ALL
        SELECT r.delivery_id, r.line_provider, r.line_account, r.line_period, r.line_invoice, r.by_invoice, w.holder_scope,
               false AS whole, coalesce(w.first_start, '-infinity'::TIMESTAMPTZ) AS first_start,
               coalesce(w.reach, 'infinity'::TIMESTAMPTZ) AS reach, w.holder_delivery, w.holder_export
        FROM narrower AS r
        JOIN holder_subscriptions AS w
          ON w.subscription = r.scope_subscription
         AND w.holder_delivery <> r.delivery_id
         AND w.provider IS NOT DISTINCT FROM r.provider AND w.line_account_id = r.line_account_id
         AND w.billing_period = r.billing_period AND w.line_invoice IS NOT DISTINCT FROM r.line_invoice
         AND ((w.family = r.family AND w.dataset = coalesce(r.dataset, '')) OR w.family = 'focus' OR r.family = 'focus')
    )
    GROUP BY ALL
),
-- The held time merged into runs (holders overlapping or touching), and the holder reaching
-- furthest, named in covered_by.
held_spans AS (
    SELECT delivery_id, line_provider, line_account, line_period, line_invoice, by_invoice, list({'since': s, 'until': e} ORDER BY s) AS spans,
           arg_max(holder_delivery, {'e': e, 'whole': whole, 'delivery': holder_delivery}) AS whole_delivery,
           arg_max(holder_export, {'e': e, 'whole': whole, 'delivery': holder_delivery}) AS whole_export,
           arg_max(whole, {'e': e, 'whole': whole, 'delivery': holder_delivery}) AS held_by_whole
    FROM (SELECT delivery_id, line_provider, line_account, line_period, line_invoice, by_invoice, run, min(s) AS s, max(e) AS e,
                 arg_max(whole, {'e': e, 'whole': whole, 'delivery': holder_delivery}) AS whole,
                 arg_max(holder_delivery, {'e': e, 'whole': whole, 'delivery': holder_delivery}) AS holder_delivery,
                 arg_max(holder_export, {'e': e, 'whole': whole, 'delivery': holder_delivery}) AS holder_export
          FROM (SELECT *, sum(CASE WHEN s <= prev_e THEN 0 ELSE 1 END)
                              OVER (PARTITION BY delivery_id, line_provider, line_account, line_period, line_invoice, by_invoice ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS run
                FROM (SELECT *, max(e) OVER (PARTITION BY delivery_id, line_provider, line_account, line_period, line_invoice, by_invoice ORDER BY s, e
                                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
                      FROM held))
          GROUP BY ALL)
    GROUP BY ALL
),
-- A narrower slice counts for its charge time no holder holds: before the first held run (a
-- subscription new to its billing profile from the 10th), between runs, and past the last, where
-- its charges start (a holder lagging a day behind). NULL dates: the holders hold all of it.
narrowed AS (
    SELECT r.*, h.whole_delivery, h.whole_export, h.held_by_whole,
           -- Each gap clipped to the slice's own charge time (the first charge start to past the last).
           list_filter(list_transform(list_filter(
               [{'since': r.min_charge_start, 'until': h.spans[1].since}]
               || list_transform(range(1, len(h.spans)), lambda i: {'since': h.spans[i].until, 'until': h.spans[i + 1].since})
               || [{'since': h.spans[len(h.spans)].until,
                    'until': CASE WHEN r.max_charge_start >= h.spans[len(h.spans)].until
                                  THEN greatest(r.max_charge_end, r.max_charge_start + INTERVAL 1 MICROSECOND) END}],
               lambda g: g.since IS NOT NULL AND g.until IS NOT NULL
                         AND r.min_charge_start IS NOT NULL AND r.max_charge_start IS NOT NULL),
               lambda g: {'since': greatest(g.since, r.min_charge_start),
                          'until': least(g.until, greatest(r.max_charge_end, r.max_charge_start + INTERVAL 1 MICROSECOND))}),
               lambda g: g.since < g.until) AS unheld
    FROM in_family AS r
    LEFT JOIN held_spans AS h
      ON h.delivery_id = r.delivery_id AND h.line_provider IS NOT DISTINCT FROM r.line_provider
     AND h.line_account IS NOT DISTINCT FROM r.line_account AND h.line_period IS NOT DISTINCT FROM r.line_period
     AND h.line_invoice IS NOT DISTINCT FROM r.line_invoice AND h.by_invoice IS NOT DISTINCT FROM r.by_invoice
)
SELECT r.delivery_id, r.line_provider, r.line_account, r.line_period, r.provider, r.export_name, r.scope, r.billing_period,
       r.mode, r.lines, r.rank,
       r.counts_in_family AND (r.whole_delivery IS NULL OR coalesce(len(r.unheld) > 0, false)) AS counts,
       coalesce(r.replaced_by, CASE WHEN r.export_rank > 1 THEN r.chosen_delivery END,
                CASE WHEN r.counts_as_export AND r.family_rank > 1 THEN r.family_delivery END,
                CASE WHEN r.counts_in_family THEN r.whole_delivery END) AS winner,
       CASE WHEN r.counts_in_key AND r.export_rank > 1 THEN r.chosen_export
            WHEN r.counts_as_export AND r.family_rank > 1
            THEN CASE WHEN r.family = 'focus' THEN 'own export: ' ELSE 'FOCUS: ' END || r.family_export
            WHEN r.counts_in_family THEN CASE WHEN r.held_by_whole THEN 'whole account: ' ELSE 'wider scope: ' END || r.whole_export
       END AS covered_by,
       r.line_invoice, r.by_invoice,
       -- Beside a lagging whole-account (or wider scope's) export: the charge time no holder holds.
       CASE WHEN r.counts_in_family AND r.whole_delivery IS NOT NULL AND len(r.unheld) > 0 THEN r.unheld
            ELSE r.counts_for END AS counts_for
FROM narrowed AS r;

DELETE FROM raw.deliveries;
INSERT INTO raw.deliveries BY NAME
SELECT d.delivery_id, d.provider, d.export_name, d.scope,
       coalesce(d.billing_period, (SELECT min(s.billing_period) FROM raw.delivery_slices AS s WHERE s.delivery_id = d.delivery_id)) AS billing_period,
       d.mode, d.source, d.created_at, d.seq, d.parts_expected, d.parts_seen, d.complete,
       -- A delivery with no lines (a header-only file) has no slice for anything to replace: it stands.
       coalesce(w.counts, d.lines = 0) AS counts,
       CASE WHEN NOT d.complete THEN 'incomplete' WHEN coalesce(w.counts, d.lines = 0) THEN 'current' ELSE 'superseded' END AS status,
       w.winners AS superseded_by, d.files, d.lines, d.final, d.max_charge_end, d.first_seen_at, d.manifests
FROM ledger_delivery_facts AS d
LEFT JOIN (SELECT delivery_id, bool_or(counts) AS counts,
                  string_agg(DISTINCT winner, ', ' ORDER BY winner) FILTER (WHERE NOT counts) AS winners
           FROM raw.delivery_slices GROUP BY delivery_id) AS w USING (delivery_id);

-- Each billing file takes its delivery's verdict: `loaded` (its lines count), `incomplete` (its
-- delivery still misses parts), `superseded` (a newer delivery of the same export replaced it);
-- a `duplicate` stays one (its content counts through the file first read with it).
-- status_changed_at: when a verdict changed (a file newly superseded, by a file of this run or by
-- a rule of a newer version), so the run that changed it can say why.
UPDATE raw.files AS f
SET delivery_id = a.delivery_id,
    status = CASE WHEN f.status = 'duplicate' THEN 'duplicate' WHEN d.status = 'current' THEN 'loaded' ELSE d.status END,
    status_changed_at = CASE WHEN f.status IS DISTINCT FROM CASE WHEN f.status = 'duplicate' THEN 'duplicate'
                                                                 WHEN d.status = 'current' THEN 'loaded' ELSE d.status END
                             THEN now() ELSE f.status_changed_at END,
    delivery_note = CASE
        WHEN d.status = 'incomplete' THEN format('delivery {} has {} of {} parts{}', d.delivery_id, d.parts_seen,
                                                 d.parts_expected, CASE WHEN d.counts THEN '; its lines count meanwhile'
                                                                        ELSE '; another delivery of its provider, account and month counts until it completes' END)
        WHEN d.status = 'superseded' THEN format('delivery {} superseded by {}', d.delivery_id, d.superseded_by)
        WHEN d.superseded_by IS NOT NULL THEN format('delivery {}; some of its months superseded by {}', d.delivery_id, d.superseded_by)
        WHEN p.past_whole IS NOT NULL THEN format('delivery {}; its lines count only for charges {} (UTC); at other times through {}',
                                                  d.delivery_id, p.ranges, p.past_whole)
        WHEN p.shares_with IS NOT NULL THEN format('delivery {}; the charge time it shares with {} counts there', d.delivery_id, p.shares_with)
        ELSE format('delivery {}', d.delivery_id) END
FROM ledger_assigned AS a JOIN raw.deliveries AS d USING (delivery_id)
-- A plain upload counting for part of its charge time, and the uploads counting for the rest.
LEFT JOIN (SELECT delivery_id,
                  string_agg(DISTINCT winner, ', ' ORDER BY winner) FILTER (WHERE covered_by IS NULL) AS shares_with,
                  -- A narrower scope's export counting past the whole account's or a wider scope's (covered_by names it).
                  string_agg(DISTINCT CASE WHEN covered_by LIKE 'whole account: %' THEN 'the whole billing account''s export '
                                           ELSE 'the export of a scope holding it, ' END || regexp_replace(covered_by, '^[^:]*: ', ''), ', ')
                      FILTER (WHERE covered_by LIKE 'whole account: %' OR covered_by LIKE 'wider scope: %') AS past_whole,
                  string_agg(DISTINCT array_to_string(list_transform(counts_for, lambda r:
                      'from ' || strftime(r.since, '%Y-%m-%d %H:%M') || ' to ' || strftime(r.until, '%Y-%m-%d %H:%M')), ', '), '; ') AS ranges
           FROM raw.delivery_slices WHERE counts AND counts_for IS NOT NULL GROUP BY delivery_id) AS p USING (delivery_id)
WHERE f.path = a.path AND f.sha256 = a.sha256;
