-- findings.egress: money paid to move data out. Where object access logs show what was
-- downloaded, one row per object pulled more than once from outside: every pull after the
-- first is avoidable with a local cache or an internal NAS. The egress no log explains, one row per
-- resource, day and path (internet, cross_region, cross_az, intra_region) with its GB and price per
-- GB against the catalog's price for that provider and path: a logged bucket's internet egress less
-- the GB its repeated downloads moved that day.
-- The egress lines, their GB and path are marts.egress_lines_by_billing_month's (built per billing
-- month, so a new delivery finds its own month's; see that model for how a line is judged).
-- Price per GB is the money of the egress lines over the GB of the lines that cost something:
-- free-tier and $0 lines would dilute it.
-- Requests from private addresses (10/8, 172.16/12, 192.168/16) are internal, not egress.
CREATE OR REPLACE TABLE findings.egress AS
WITH egress_lines AS (
    SELECT * FROM marts.egress_lines_by_billing_month
),
per_resource AS (
    -- Each resource's internet egress: what downloads from outside cost it.
    SELECT provider, resource, resource_id, BillingCurrency AS currency,
           sum(EffectiveCost) FILTER (WHERE EffectiveCost > 0) AS paid_cost,
           sum(gb) FILTER (WHERE EffectiveCost > 0) AS paid_gb
    FROM egress_lines WHERE path = 'internet' GROUP BY ALL
),
catalog AS (
    -- One price per provider and path (the lowest listed), so a multi-region catalog never fans out;
    -- the catalog's short provider names as the bills write them.
    SELECT CASE provider WHEN 'GCP' THEN 'Google Cloud' WHEN 'Azure' THEN 'Microsoft' ELSE provider END AS provider,
           path, price_per_gb, currency, source
    FROM core.price_catalog WHERE unit = 'gb'
    QUALIFY row_number() OVER (PARTITION BY provider, path ORDER BY price_per_gb, region) = 1
),
outside_gets AS (
    -- Object downloads from outside (a private address is an internal read, not egress).
    SELECT resource_id AS bucket, path AS object, remote_ip, bytes, started_at, ended_at
    FROM core.storage_events
    WHERE kind = 'object_get' AND bytes > 0
      AND NOT regexp_matches(coalesce(remote_ip, ''), '^(10\.|192\.168\.|172\.(1[6-9]|2[0-9]|3[01])\.)')
),
pulls AS (
    SELECT bucket, object, count(*) AS downloads, sum(bytes) / 1e9 AS total_gb,
           max(bytes) / 1e9 AS gb_per_pull, min(started_at) AS first_pull, max(ended_at) AS last_pull,
           count(DISTINCT remote_ip) AS clients
    FROM outside_gets
    GROUP BY bucket, object
    HAVING count(*) > 1
),
bucket_prices AS (
    -- One internet price per logged bucket. Its lines can name it (ResourceName) or carry only its
    -- ARN (ResourceId), two resources above: each matched alone, a pull became two findings.
    -- Priced over all of them; a bucket billed in two currencies takes the one most GB were paid in.
    SELECT bucket, provider, currency, price_per_gb
    FROM (
        SELECT p.bucket, r.provider, r.currency, sum(r.paid_gb) AS paid_gb,
               from_units(to_units(sum(r.paid_cost)) * 10000000000 // nullif(to_units(sum(r.paid_gb)), 0)) AS price_per_gb
        FROM (SELECT DISTINCT bucket FROM pulls) AS p
        JOIN per_resource AS r ON p.bucket IN (r.resource, r.resource_id) OR r.resource_id LIKE '%:' || p.bucket
        GROUP BY p.bucket, r.provider, r.currency
    )
    QUALIFY row_number() OVER (PARTITION BY bucket ORDER BY paid_gb DESC NULLS LAST, provider, currency) = 1
),
object_findings AS (
    SELECT 'egress' AS kind, 'repeated_download' AS subkind, p.bucket || '/' || p.object AS resource, NULL AS host,
           p.first_pull AS period_start, p.last_pull AS period_end,
           price_times(p.total_gb, coalesce(r.price_per_gb, c.price_per_gb)) AS wasted_cost,
           price_times(p.total_gb - p.gb_per_pull, coalesce(r.price_per_gb, c.price_per_gb)) AS avoidable_cost,
           coalesce(r.currency, c.currency) AS currency,
           CASE WHEN r.price_per_gb IS NOT NULL THEN 'charge' ELSE 'catalog: ' || c.source END AS price_source,
           'internet' AS path,
           CAST(p.total_gb AS DECIMAL(38, 10)) AS gb,
           coalesce(r.price_per_gb, c.price_per_gb) AS price_per_gb,
           json_object('downloads', p.downloads, 'gb_per_download', round(p.gb_per_pull, 3), 'total_gb', round(p.total_gb, 3),
                       'clients', p.clients, 'price_per_gb', coalesce(r.price_per_gb, c.price_per_gb),
                       'catalog_price_per_gb', c.price_per_gb) AS evidence,
           printf('%s was downloaded %d times (%.0f GB in all) from outside the cloud; %d of those downloads '
                  || '(%.0f GB) repeat the first. Serve it from a local cache or an internal NAS.',
                  p.object, p.downloads, p.total_gb, p.downloads - 1, p.total_gb - p.gb_per_pull) AS recommendation
    FROM pulls AS p
    LEFT JOIN bucket_prices AS r USING (bucket)
    LEFT JOIN catalog AS c ON c.provider = coalesce(r.provider, 'AWS') AND c.path = 'internet'
),
logged_days AS (
    -- What the logs explain of each bucket's egress, by UTC day: the GB of every pull from outside
    -- of an object pulled more than once (object_findings holds them).
    SELECT g.bucket, utc_day(g.started_at) AS day, sum(g.bytes) / 1e9 AS gb
    FROM outside_gets AS g
    JOIN pulls AS p USING (bucket, object)
    GROUP BY ALL
),
line_buckets AS (
    -- The logged bucket each internet line bills: by its name or only its ARN (two resources above),
    -- one bucket, so what its logs explain is taken from the bucket's day once.
    SELECT e.resource, e.resource_id, min(p.bucket) AS bucket
    FROM (SELECT DISTINCT resource, resource_id FROM egress_lines WHERE path = 'internet') AS e
    JOIN (SELECT DISTINCT bucket FROM pulls) AS p
      ON p.bucket IN (e.resource, e.resource_id) OR e.resource_id LIKE '%:' || p.bucket
    GROUP BY e.resource, e.resource_id
),
daily AS (
    SELECT coalesce(b.bucket, e.resource) AS resource, e.day, e.path, e.BillingCurrency AS currency,
           min(e.ChargePeriodStart) AS period_start, max(e.ChargePeriodEnd) AS period_end,
           sum(e.EffectiveCost) AS cost, sum(e.gb) AS gb, count(*) AS lines,
           coalesce(sum(e.gb) FILTER (WHERE e.EffectiveCost = 0), 0) AS free_gb,
           from_units(to_units(sum(e.EffectiveCost) FILTER (WHERE e.EffectiveCost > 0)) * 10000000000
                      // nullif(to_units(sum(e.gb) FILTER (WHERE e.EffectiveCost > 0)), 0)) AS price_per_gb,
           any_value(c.price_per_gb) AS catalog_price_per_gb
    FROM egress_lines AS e
    LEFT JOIN line_buckets AS b
      ON e.path = 'internet' AND b.resource = e.resource AND b.resource_id IS NOT DISTINCT FROM e.resource_id
    LEFT JOIN catalog AS c ON c.provider = e.provider AND c.path = e.path
    GROUP BY coalesce(b.bucket, e.resource), e.day, e.path, e.BillingCurrency
),
unexplained AS (
    -- A day's internet egress less what the logs explain that day (priced at the day's price per
    -- GB, as the repeated downloads are): a bucket the log covers one day of keeps its other days,
    -- and the GB its logged pulls do not account for.
    SELECT d.*, coalesce(l.gb, 0) AS logged_gb,
           -- GB stay the lines' DECIMAL: a day no log covers keeps its own sum exactly.
           CASE WHEN l.gb IS NULL THEN d.gb
                ELSE greatest(CAST(0 AS DECIMAL(38, 10)), d.gb - CAST(l.gb AS DECIMAL(38, 10))) END AS gb_left,
           CASE WHEN l.gb IS NULL THEN d.cost
                ELSE greatest(CAST(0 AS DECIMAL(38, 10)), d.cost - price_times(l.gb, coalesce(d.price_per_gb, 0))) END AS cost_left
    FROM daily AS d
    LEFT JOIN logged_days AS l ON d.path = 'internet' AND l.bucket = d.resource AND l.day = d.day
),
daily_findings AS (
    SELECT 'egress' AS kind, path AS subkind, resource, NULL AS host, period_start, period_end,
           cost_left AS wasted_cost, CAST(0 AS DECIMAL(38, 10)) AS avoidable_cost, currency,
           'charge' AS price_source,
           path,
           gb_left AS gb,
           price_per_gb,
           json_object('gb', gb_left, 'cost', cost_left, 'lines', lines, 'free_gb', free_gb, 'price_per_gb', price_per_gb,
                       'catalog_price_per_gb', catalog_price_per_gb, 'gb_billed', gb, 'gb_in_repeated_downloads', logged_gb) AS evidence,
           printf('%s GB left %s on %s (%s). Find out who downloads it; keep repeated reads in the same region or on a cache.',
                  CAST(round(gb_left, 3) AS VARCHAR), resource, day, replace(path, '_', ' ')) AS recommendation
    FROM unexplained
    -- A day with only credits on a path moved nothing out, and one the logs explain whole: no finding of its own.
    WHERE gb_left > 0
)
SELECT * FROM object_findings
UNION ALL BY NAME
SELECT * FROM daily_findings;
