-- The daily report's "Files behind these figures": each file in the landing folder as its newest
-- version read, and those a reader should look at: a file that failed, that no connector
-- recognised or that was refused (what it holds is in no figure), a delivery still incomplete
-- (it counts once its parts arrive), a file whose every row or some rows were quarantined (their
-- money, as the file states it, is not in the figures), and a file that loaded with a warning (an
-- invoice whose lines do not reach its total row). Money set aside is by the currency its rows
-- state (raw.files.quarantined_by_currency); where a row states none that is a currency code, its
-- currency is not known, and it is added to no other money. Money whose currency its reader did not
-- say (a connector of an older kit, a file an older version read) is in the currency the file's
-- loaded lines bill in, where they bill in one. The totals by currency are over every file to look
-- at, not only the $limit listed. (The Python caller reads raw.files with the columns an older
-- warehouse lacks as NULL: pipelines/warehouse/connection.py raw_files_source.)
WITH newest AS (
    SELECT * FROM raw.files WHERE status <> 'manifest'
    QUALIFY row_number() OVER (PARTITION BY path ORDER BY ingested_at DESC, status = 'loaded' DESC) = 1
),
to_look_at AS (
    SELECT *,
           CASE WHEN status IN ('failed', 'unrecognized', 'refused', 'quarantined', 'incomplete') THEN status
                WHEN rows_quarantined > 0 THEN 'partly quarantined'
                WHEN detail LIKE '%; warning: %' THEN 'warning' END AS concern
    FROM newest
    WHERE status IN ('failed', 'unrecognized', 'refused', 'quarantined', 'incomplete')
       OR (status = 'loaded' AND (rows_quarantined > 0 OR detail LIKE '%; warning: %'))
),
currencies AS (
    SELECT c.x_SourceFile AS path, c.x_SourceSha256 AS sha256, min(c.BillingCurrency) AS currency,
           count(DISTINCT c.BillingCurrency) AS currencies
    FROM raw.cost_lines AS c SEMI JOIN to_look_at AS t ON t.path = c.x_SourceFile AND t.sha256 = c.x_SourceSha256
    GROUP BY ALL
),
set_aside AS (
    -- Each currency's amount, then the rest of quarantined_total, which no currency was said for.
    SELECT t.path, t.sha256, e.currency, e.amount
    FROM to_look_at AS t
    LEFT JOIN currencies AS c USING (path, sha256),
    LATERAL (SELECT unnest(coalesce(t.quarantined_by_currency, [])
                           || [{'currency': CASE WHEN c.currencies = 1 THEN c.currency END,
                                'amount': coalesce(t.quarantined_total, 0)
                                          - coalesce(list_sum(list_transform(t.quarantined_by_currency, lambda x: x.amount)), 0)}],
                           recursive := true)) AS e
    WHERE e.amount <> 0
),
by_file AS (
    SELECT path, sha256, list({'currency': currency, 'amount': amount} ORDER BY currency NULLS LAST) AS set_aside
    FROM set_aside GROUP BY ALL
),
totals AS (
    SELECT list({'currency': currency, 'amount': amount, 'files': files} ORDER BY currency NULLS LAST) AS set_aside_totals
    FROM (SELECT currency, sum(amount) AS amount, count(DISTINCT path) AS files FROM set_aside GROUP BY currency)
),
reasons AS (
    SELECT q.x_SourceFile AS path, q.x_SourceSha256 AS sha256, min(q.reason) AS first_reason
    FROM raw.quarantine AS q SEMI JOIN to_look_at AS t ON t.path = q.x_SourceFile AND t.sha256 = q.x_SourceSha256
    GROUP BY ALL
)
SELECT t.path, t.kind, t.connector, t.status, t.concern, t.rows_loaded, t.rows_quarantined,
       b.set_aside,
       -- What to know, in the run's own words: the warnings and a quarantine reason, else the detail.
       CASE WHEN t.detail LIKE '%; warning: %' OR r.first_reason IS NOT NULL THEN
                concat_ws('; ', substr(t.detail, nullif(strpos(t.detail, '; warning: '), 0) + 11),
                          'quarantined, e.g. ' || r.first_reason)
            ELSE t.detail END AS what,
       -- A newer version that failed, beside an earlier one whose lines still count.
       t.status <> 'loaded' AND EXISTS (SELECT 1 FROM raw.files AS e
                                         WHERE e.path = t.path AND e.sha256 <> t.sha256 AND e.status = 'loaded') AS earlier_version_counts,
       count(*) OVER () AS files_to_look_at,
       totals.set_aside_totals
FROM to_look_at AS t
LEFT JOIN by_file AS b USING (path, sha256)
LEFT JOIN reasons AS r USING (path, sha256)
CROSS JOIN totals
-- Billing files first, those holding money set aside first of them (amounts in several currencies
-- do not compare), then by rows quarantined.
ORDER BY t.kind = 'billing' DESC NULLS LAST, b.set_aside IS NOT NULL DESC, t.rows_quarantined DESC, t.status = 'loaded', t.path
LIMIT $limit
