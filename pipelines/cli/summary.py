"""The terminal summary of a run, read back from the warehouse."""

from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipelines.text import for_terminal
from pipelines.cli.hints import describe_table_command, open_warehouse_command
from pipelines.report.figures import money, with_shown_shares
from pipelines.warehouse.connection import connect, fetch_all, fetch_dicts, raw_files_source, table_exists

SHOW_SKIPPED = 5  # unrecognised files listed by name; the rest are counted
TABLES = ("raw.files", "raw.quarantine", "core.cost_lines", "core.gpu_samples", "core.gpu_minutes",
          "core.workloads", "core.fx_rates", "marts.cost_attribution", "marts.daily_cost", "marts.spend_by_phase")


def summary_dict(warehouse: Path) -> dict:
    """What the published warehouse holds now (a run whose steps failed left the one before it)."""
    if not warehouse.exists():  # a first run that failed published nothing
        return {"files": [], "problems": [], "spend_by_phase": [], "conservation": [], "tables": {}}
    conn = connect(warehouse, read_only=True)
    try:
        if not table_exists(conn, "marts.spend_by_phase") or not table_exists(conn, "marts.cost_attribution"):
            return {
                "files": fetch_dicts(conn, "SELECT status, count(*) AS files, sum(rows_loaded) AS rows_loaded, "
                                           "sum(rows_quarantined) AS rows_quarantined FROM raw.files GROUP BY status ORDER BY status")
                if table_exists(conn, "raw.files") else [],
                "problems": [], "spend_by_phase": [], "conservation": [], "invalid_mappings": invalid_mapping_errors(),
                "tables": {t: fetch_all(conn, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES if table_exists(conn, t)},
            }
        return {
            "files": fetch_dicts(conn, "SELECT status, count(*) AS files, sum(rows_loaded) AS rows_loaded, "
                                       "sum(rows_quarantined) AS rows_quarantined FROM raw.files GROUP BY status ORDER BY status"),
            "problems": fetch_dicts(conn, "SELECT path, status, detail FROM raw.files "
                                          "WHERE status IN ('failed', 'quarantined', 'unrecognized', 'refused') ORDER BY path"),
            "invalid_mappings": invalid_mapping_errors(),
            "tables": {t: fetch_all(conn, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES},
            "spend_by_phase": fetch_dicts(conn, "SELECT phase, reporting_currency, cost_reporting, share_pct, gpu_hours_paid, "
                                                "gpu_hours_busy, utilization_pct, cost_per_busy_gpu_hour, cost_by_billing_currency, "
                                                "parts_without_fx_rate FROM marts.spend_by_phase WHERE period = 'all'"),
            "unidentified_gpus": unidentified_gpu_charges(conn),
            "host_names": host_names_linked(conn),
            # The phases' parts as analysts read them (marts.daily_cost: every part of every charge,
            # summed by day): a table of days, where joining every part to its line cost O(history).
            "conservation": fetch_dicts(conn, """
                SELECT c.BillingCurrency AS currency, sum(c.EffectiveCost) AS cost_lines_total,
                       (SELECT sum(d.cost_billing) FROM marts.daily_cost AS d
                        WHERE d.billing_currency = c.BillingCurrency) AS attributed_total
                FROM core.cost_lines c GROUP BY c.BillingCurrency ORDER BY currency"""),
        }
    finally:
        conn.close()


def host_names_linked(conn) -> list[dict]:
    """Per source of core.host_names (a host names file, the workloads): the resources it linked,
    how many of them are billed for GPUs, and how many of those report telemetry under that host,
    so a user sees a file took effect (and one whose instances no bill or telemetry names)."""
    if not all(table_exists(conn, t) for t in ("core.host_names", "marts.gpu_hour_prices", "marts.gpu_spans_by_day")):
        return []
    return fetch_dicts(conn, """
        WITH billed AS (SELECT DISTINCT resource_id FROM marts.gpu_hour_prices),
             seen AS (SELECT DISTINCT host FROM marts.gpu_spans_by_day)
        SELECT regexp_replace(source, '^host names file ', '') AS source, count(*) AS links,
               count(*) FILTER (WHERE resource_id IN (SELECT resource_id FROM billed)) AS billed,
               count(*) FILTER (WHERE resource_id IN (SELECT resource_id FROM billed) AND host IN (SELECT host FROM seen)) AS reporting
        FROM core.host_names GROUP BY 1 ORDER BY 1""")


def host_names_line(rows: list[dict]) -> str | None:
    """ "2 resources linked to the host their telemetry names (instances.json 1, workloads 1); …", or None."""
    if not rows:
        return None
    links = sum(r["links"] for r in rows)
    sources = ", ".join(f"{for_terminal(r['source'])} {r['links']:,}" for r in rows)
    return (f"{links:,} resource{'' if links == 1 else 's'} linked to the host their telemetry names ({sources}); "
            f"{sum(r['billed'] for r in rows):,} of them billed for GPUs, {sum(r['reporting'] for r in rows):,} reporting "
            "telemetry under that host (core.host_names)")


SHOW_UNIDENTIFIED = 5  # GPU charges without a GPU count: the most frequent names listed


def unidentified_gpu_charges(conn) -> list[dict]:
    """Usage charges that look like GPU compute (a GPU instance type, VM size, shape or a SKU that says GPU)
    but carry no GPU count: their GPU time cannot reach a phase. One row per name (the instance type where
    one is written, else the SkuId), most charges first, so a user sees what to map in instance_gpus.csv."""
    from models.gpus import GPU_INSTANCE_TOKEN, GPU_LOOKING

    # The patterns run once per distinct text, not per line: a 1M-line CUR has a few hundred (0.9 → 0.3 s).
    return fetch_dicts(conn, """
        WITH c AS (
            SELECT SkuId, ChargeDescription,
                   concat_ws(' ', SkuId, SkuPriceId, ResourceType, SkuMeter, ChargeDescription, ServiceName,
                             SkuPriceDetails, x_ExtraColumns) AS blob,
                   count(*) AS charges, sum(EffectiveCost) AS cost
            FROM core.cost_lines WHERE x_GpuCount IS NULL AND ChargeCategory = 'Usage'
            GROUP BY ALL)
        SELECT coalesce(nullif(regexp_extract(blob, ?), ''), 'SkuId ' || SkuId, ChargeDescription) AS name,
               CAST(sum(charges) AS BIGINT) AS charges, sum(cost) AS cost
        FROM c WHERE regexp_matches(blob, ?) GROUP BY 1 ORDER BY charges DESC, name""", [GPU_INSTANCE_TOKEN, GPU_LOOKING])


def unidentified_gpu_line(rows: list[dict]) -> str | None:
    """ "3 GPU charges with unidentified GPUs: p9.48xlarge (2), SkuId X (1); map them in …", or None."""
    if not rows:
        return None
    n = sum(r["charges"] for r in rows)
    names = ", ".join(f"{for_terminal(r['name'])} ({r['charges']})" for r in rows[:SHOW_UNIDENTIFIED])
    more = f" and {len(rows) - SHOW_UNIDENTIFIED} more" if len(rows) > SHOW_UNIDENTIFIED else ""
    return (f"{n} GPU charge{'' if n == 1 else 's'} with unidentified GPUs: {names}{more}; "
            "map them in models/data/instance_gpus.csv")


def invalid_mapping_errors() -> list[dict]:
    """Mapping files that failed their schema check and so read nothing this run."""
    from connectors.gpu_rental import invalid_mappings
    from connectors.registry import all_connectors

    return [{"file": m.error.source, "error": m.error.message} for m in invalid_mappings(all_connectors())]


# The loaded billing files whose delivery replaced another's slice (the ledger's raw.delivery_slices):
# `superseded` is the delivery replaced.
WINNERS = """
SELECT s.delivery_id AS superseded, g.path, g.delivery_id, g.ingested_at
FROM raw.delivery_slices AS s JOIN raw.files AS g ON g.delivery_id = s.winner
WHERE NOT s.counts AND g.kind = 'billing' AND g.status IN ('loaded', 'incomplete')
"""


# Loaded files that count in part, and the files of the deliveries that took the rest (each slice's
# winner): plain uploads counting for part of their charge time (raw.delivery_slices.counts_for),
# and files some of whose months no longer count (a download over two months beside a file of one).
PARTLY = """
SELECT s.delivery_id,
       string_agg(DISTINCT array_to_string(list_transform(s.counts_for, lambda r:
           strftime(r.since, '%Y-%m-%d %H:%M') || ' to ' || strftime(r.until, '%Y-%m-%d %H:%M')), ', '), '; ')
           FILTER (WHERE s.counts) AS counts_for,
       string_agg(DISTINCT g.path, ', ' ORDER BY g.path) FILTER (WHERE s.counts) AS shares_with,
       -- A narrower scope's export counting past a lagging whole-account (or wider scope's) export's reach (covered_by names it).
       string_agg(DISTINCT regexp_replace(s.covered_by, '^(whole account|wider scope): ', ''), ', ') FILTER (WHERE s.counts) AS counts_past,
       bool_and(s.covered_by LIKE 'whole account: %') FILTER (WHERE s.counts) AS counts_past_whole,
       string_agg(DISTINCT array_to_string(list_transform(s.counts_for, lambda r:
           'from ' || strftime(r.since, '%Y-%m-%d %H:%M') || ' to ' || strftime(r.until, '%Y-%m-%d %H:%M')), ', '), '; ')
           FILTER (WHERE s.counts) AS counts_only_for_ranges,
       max(g.ingested_at) FILTER (WHERE s.counts) AS shares_read_at,
       string_agg(DISTINCT strftime(s.billing_period, '%Y-%m'), ', ') FILTER (WHERE NOT s.counts) AS months_out,
       string_agg(DISTINCT g.path, ', ' ORDER BY g.path) FILTER (WHERE NOT s.counts) AS months_held_by,
       max(g.ingested_at) FILTER (WHERE NOT s.counts) AS held_read_at
FROM raw.delivery_slices AS s JOIN raw.files AS g ON g.delivery_id = s.winner AND g.kind = 'billing' AND g.status IN ('loaded', 'incomplete')
WHERE (s.counts AND s.counts_for IS NOT NULL) OR (NOT s.counts AND s.billing_period IS NOT NULL)
GROUP BY s.delivery_id
"""


def files_read_since(warehouse: Path, since: datetime) -> list[dict]:
    """The files this run read (ingested at or after `since`) that have something to say: failed,
    every row or some rows quarantined, or loaded with a connector's warning; each with its first
    quarantine reason. One read of the published warehouse for the run's closing lines."""
    if not warehouse.exists():  # a first run that failed published nothing: the run says so itself
        return []
    conn = connect(warehouse, read_only=True)
    try:
        if not table_exists(conn, "raw.files"):
            return []
        first_reason = ("(SELECT min(q.reason) FROM raw.quarantine AS q WHERE q.x_SourceFile = f.path "
                        "AND q.x_SourceSha256 = f.sha256)" if table_exists(conn, "raw.quarantine") else "NULL")
        # Also a plain upload that a file of this run superseded (or that this run read superseded, or
        # whose verdict this run changed: a newer version's rule on an upgraded warehouse):
        # replacing a month is the rule for plain uploads, and two parts of one month synced without
        # their manifest or layout look the same, so the run names what no longer counts.
        return fetch_dicts(conn, f"""
            SELECT f.path, f.status, f.detail, f.rows_loaded, f.rows_quarantined, f.quarantined_total, f.quarantined_by_currency,
                   {first_reason} AS first_reason,
                   CASE WHEN f.status = 'superseded' THEN
                       (SELECT string_agg(DISTINCT g.path, ', ' ORDER BY g.path) FROM ({WINNERS}) AS g
                        WHERE g.superseded = f.delivery_id) END AS superseded_by,
                   CASE WHEN f.status = 'superseded' THEN
                       (SELECT bool_and(s.line_invoice IS NOT NULL) FROM raw.delivery_slices AS s
                        WHERE s.delivery_id = f.delivery_id AND NOT s.counts) END AS invoice_sent_again,
                   CASE WHEN f.status = 'superseded' THEN
                       (SELECT string_agg(DISTINCT s.covered_by, ', ' ORDER BY s.covered_by) FROM raw.delivery_slices AS s
                        WHERE s.delivery_id = f.delivery_id AND NOT s.counts AND s.covered_by IS NOT NULL) END AS covered_by,
                   p.counts_for AS counts_only_for, p.shares_with, p.counts_past, p.counts_past_whole, p.counts_only_for_ranges, p.months_out, p.months_held_by
            FROM {raw_files_source(conn)} AS f
            LEFT JOIN ({PARTLY}) AS p ON p.delivery_id = f.delivery_id AND f.status = 'loaded'
            WHERE (f.ingested_at >= $since AND (f.status = 'failed' OR f.rows_quarantined > 0 OR f.detail LIKE '%; warning: %'))
               OR (f.kind = 'billing' AND f.status = 'superseded' AND f.delivery_id LIKE 'file:%'
                   AND EXISTS (SELECT 1 FROM ({WINNERS}) AS g
                               WHERE g.superseded = f.delivery_id AND g.delivery_id LIKE 'file:%'
                                 AND (g.ingested_at >= $since OR f.ingested_at >= $since OR f.status_changed_at >= $since)))
               -- A plain upload that counts for part of its charge time, beside one this run read (or it).
               OR (f.kind = 'billing' AND p.counts_for IS NOT NULL
                   AND (f.ingested_at >= $since OR f.status_changed_at >= $since OR p.shares_read_at >= $since))
               -- A loaded file some of whose months another file now holds, beside one this run read (or it).
               OR (f.kind = 'billing' AND p.months_out IS NOT NULL AND (f.ingested_at >= $since OR p.held_read_at >= $since))
               -- A file another export of its provider, account and month now stands in for.
               OR (f.kind = 'billing' AND f.status = 'superseded'
                   AND EXISTS (SELECT 1 FROM raw.delivery_slices AS s JOIN ({WINNERS}) AS g ON g.superseded = s.delivery_id
                               WHERE s.delivery_id = f.delivery_id AND NOT s.counts AND s.covered_by IS NOT NULL
                                 AND (g.ingested_at >= $since OR f.ingested_at >= $since OR f.status_changed_at >= $since)))
            ORDER BY f.path""", {"since": since})
    finally:
        conn.close()


# Oracle's cost reports and FOCUS reports of a tenancy are the same charges in two forms, and each
# UTC hour both hold counts through one of them (core.billing_lines, macro oracle_hour_form). The
# files this run read whose lines of some hours count through the other form, and which: the same
# rule over the lines of the files that count.
ORACLE_FORMS = """
WITH oracle AS (
    SELECT c.x_SourceFile AS path, c.x_Connector AS connector, f.ingested_at,
           oracle_tenancy(c.ProviderName, c.x_Connector, c.BillingAccountId, c.SubAccountId) AS tenancy,
           epoch_us(c.ChargePeriodStart) // 3600000000 AS hour_no, c.ChargePeriodStart
    FROM raw.cost_lines AS c
    JOIN raw.files AS f ON f.path = c.x_SourceFile AND f.sha256 = c.x_SourceSha256
    WHERE c.ProviderName = 'Oracle' AND c.x_Connector IN ('oci_cost', 'focus') AND f.status IN ('loaded', 'incomplete')
),
hours AS (
    SELECT tenancy, hour_no, oracle_hour_form(count(*) FILTER (WHERE connector = 'oci_cost'),
                                              count(*) FILTER (WHERE connector = 'focus')) AS form
    FROM oracle WHERE tenancy IS NOT NULL AND hour_no IS NOT NULL
    GROUP BY ALL HAVING count(DISTINCT connector) = 2
)
SELECT o.path, any_value(o.connector) AS connector, any_value(o.tenancy) AS tenancy,
       min(o.ChargePeriodStart) AS first_start, max(o.ChargePeriodStart) AS last_start, count(DISTINCT o.hour_no) AS hours
FROM oracle AS o JOIN hours AS h USING (tenancy, hour_no)
WHERE o.ingested_at >= $since AND h.form <> o.connector
GROUP BY o.path
ORDER BY o.path
"""


def oracle_forms_counted(warehouse: Path, since: datetime) -> list[dict]:
    """Notices for the Oracle files this run read whose lines of some days count through the
    tenancy's other form (its cost reports, its FOCUS reports)."""
    if not warehouse.exists():
        return []
    conn = connect(warehouse, read_only=True)
    try:
        if not table_exists(conn, "raw.files") or not table_exists(conn, "raw.cost_lines"):
            return []
        rows = fetch_dicts(conn, ORACLE_FORMS, {"since": since})
    finally:
        conn.close()
    notices = []
    for r in rows:
        other = "cost reports" if r["connector"] == "focus" else "FOCUS reports"
        first, last = r["first_start"].astimezone(UTC), r["last_start"].astimezone(UTC)
        span = f"{first:%Y-%m-%d %H:00}" if r["hours"] == 1 else f"{r['hours']} hours from {first:%Y-%m-%d %H:00} to {last:%Y-%m-%d %H:00}"
        notices.append({"path": r["path"], "notice": "counts in part", "reason": (
            f"its lines of {span} (UTC) count through Oracle's {other} of tenancy {r['tenancy']}, which hold as many of "
            "those hours' lines: the same charges in the other form (README: The ledger)")})
    return notices


# A GPU cloud's month-to-date lines an invoice bills again (core.billing_lines' invoiced_again:
# keep the two in step), by month-to-date file, where either file was read by this run.
INVOICED_AGAIN = """
WITH invoice_files AS (
    SELECT DISTINCT f.path, f.sha256, f.ingested_at
    FROM raw.files AS f JOIN raw.file_slices AS s ON s.path = f.path AND s.sha256 = f.sha256
    WHERE f.kind = 'billing' AND f.status = 'loaded' AND s.by_invoice
),
lines AS (
    SELECT c.x_SourceFile, c.x_SourceSha256, c.x_SourceRow, c.ProviderName, c.BillingAccountId, c.ResourceId, c.InvoiceId,
           c.SkuId, c.BilledCost, c.ChargePeriodStart, c.ChargePeriodEnd, f.ingested_at
    FROM raw.cost_lines AS c JOIN invoice_files AS f ON f.path = c.x_SourceFile AND f.sha256 = c.x_SourceSha256
    WHERE c.x_SourceSha256 IN (SELECT sha256 FROM invoice_files)
),
-- A month-to-date line and the invoiced lines billing its charge again (core.billing_lines' join:
-- provider, billing account, resource and SKU, over times that meet); what became
-- of the line is read from core.cost_lines: gone (it counts through the invoice), or a smaller
-- line (it counts the time the invoice does not bill).
pairs AS (
    SELECT m.x_SourceFile AS path, m.x_SourceSha256 AS sha, m.x_SourceRow AS line, m.BilledCost AS billed,
           m.ChargePeriodStart AS line_start, coalesce(m.ChargePeriodEnd, m.ChargePeriodStart) AS line_end, i.x_SourceFile AS invoice,
           m.ingested_at >= $since OR i.ingested_at >= $since AS read_now
    FROM lines AS m
    JOIN lines AS i
      ON i.ProviderName = m.ProviderName AND i.BillingAccountId = m.BillingAccountId AND i.ResourceId = m.ResourceId
     AND i.SkuId IS NOT DISTINCT FROM m.SkuId
    WHERE m.InvoiceId IS NULL AND i.InvoiceId IS NOT NULL AND i.BilledCost > 0 AND i.x_SourceSha256 <> m.x_SourceSha256
      AND charges_meet(i.ChargePeriodStart, i.ChargePeriodEnd, m.ChargePeriodStart, m.ChargePeriodEnd)
),
per_line AS (
    SELECT p.path, p.line, any_value(p.line_start) AS line_start, any_value(p.line_end) AS line_end,
           any_value(c.x_SourceRow) IS NULL AS whole, list(DISTINCT p.invoice) AS invoices
    FROM pairs AS p
    LEFT JOIN core.cost_lines AS c ON c.x_SourceSha256 = p.sha AND c.x_SourceRow = p.line
    GROUP BY p.path, p.line
    -- Lines this run read, or whose invoice it read: every invoice billing them is named.
    HAVING bool_or(p.read_now) AND (whole OR any_value(c.BilledCost) <> any_value(p.billed))
)
SELECT path,
       count(*) FILTER (WHERE whole) AS lines, min(line_start) FILTER (WHERE whole) AS first_start,
       max(line_end) FILTER (WHERE whole) AS last_end,
       array_to_string(list_sort(list_distinct(flatten(list(invoices) FILTER (WHERE whole)))), ', ') AS invoices,
       count(*) FILTER (WHERE NOT whole) AS part_lines, min(line_start) FILTER (WHERE NOT whole) AS part_first_start,
       max(line_end) FILTER (WHERE NOT whole) AS part_last_end,
       array_to_string(list_sort(list_distinct(flatten(list(invoices) FILTER (WHERE NOT whole)))), ', ') AS part_invoices,
       length(list_distinct(flatten(list(invoices) FILTER (WHERE NOT whole)))) AS part_invoice_files
FROM per_line
GROUP BY path
ORDER BY path
"""


def _charges(start: datetime, end: datetime) -> str:
    return f"charges from {start.astimezone(UTC):%Y-%m-%d %H:%M} to {end.astimezone(UTC):%Y-%m-%d %H:%M} (UTC)"


def invoiced_again_counted(warehouse: Path, since: datetime) -> list[dict]:
    """Notices for month-to-date files (a GPU cloud's lines without an invoice id) some of whose
    lines count through an invoice billing them again, or count only what an invoice has not
    billed of them yet, where this run read either file. (core.billing_lines applies the rule.)"""
    if not warehouse.exists():
        return []
    conn = connect(warehouse, read_only=True)
    try:
        if not all(table_exists(conn, t) for t in ("raw.files", "raw.file_slices", "raw.cost_lines", "core.cost_lines")):
            return []
        rows = fetch_dicts(conn, INVOICED_AGAIN, {"since": since})
    finally:
        conn.close()
    notices = []
    for r in rows:
        said = []
        if r["lines"]:
            said.append(f"{r['lines']:,} of its lines, {_charges(r['first_start'], r['last_end'])}, count through "
                        f"{r['invoices']}, whose invoice bills the same resources and times again")
        if r["part_lines"]:
            said.append(f"{r['part_lines']:,} of its lines, {_charges(r['part_first_start'], r['part_last_end'])}, count only the "
                        f"time {r['part_invoices']} {'does' if r['part_invoice_files'] == 1 else 'do'} not bill yet, at their own price")
        notices.append({"path": r["path"], "notice": "counts in part", "reason": (
            "; ".join(said) + " (lines without an invoice id are the month to date; README: The ledger)")})
    return notices


def _wholly_quarantined(r: dict) -> bool:
    return r["status"] != "failed" and r["rows_loaded"] == 0 and r["rows_quarantined"] > 0


def run_problems(files: list[dict]) -> list[dict]:
    """Of `files_read_since`, the files this run could not load: failed ones, and ones every row of
    which was quarantined (nothing loaded, whatever status they were given), with the reason, by path."""
    problems = []
    for r in files:
        if r["status"] == "failed":
            problems.append({"path": r["path"], "problem": "failed", "reason": r["detail"]})
        elif _wholly_quarantined(r):
            n = r["rows_quarantined"]
            reason = f"every row quarantined ({n:,} row{'' if n == 1 else 's'}, nothing loaded)"
            if r["first_reason"]:
                reason += f", e.g. {r['first_reason']}"
            problems.append({"path": r["path"], "problem": "quarantined", "reason": reason})
    # A mapping file that fails its schema check reads nothing: the user must fix it, so the run fails.
    problems += [{"path": m["file"], "problem": "invalid mapping", "reason": m["error"]} for m in invalid_mapping_errors()]
    return problems


def nothing_recognised(warehouse: Path, landing: Path) -> list[dict]:
    """A landing folder none of whose files a connector reads (a wrong folder, a new export format)
    loads nothing: the run fails, so a schedule does not report it as done, whatever the warehouse
    loaded from files no longer there. Judged on the files the folder holds now, each by its latest
    version's verdict; a stray file beside loaded ones is only skipped."""
    from pipelines.ingest.landing import landing_path, scan_landing

    scan = scan_landing(landing)
    # As stored: two names that escape alike (an ESC and a literal `\x1b`) are one path there.
    paths = sorted({landing_path(p, landing) for p in scan.files} | {landing_path(link, landing) for link, _ in scan.refused})
    if not paths or not warehouse.exists():
        return []
    conn = connect(warehouse, read_only=True)
    try:
        if not table_exists(conn, "raw.files"):
            return []
        verdicts = fetch_all(conn, """
            SELECT path, arg_max(status, ingested_at) FROM raw.files WHERE list_contains(?, path) GROUP BY path""", [paths])
    finally:
        conn.close()
    if len(verdicts) < len(paths) or any(status not in ("unrecognized", "refused") for _, status in verdicts):
        return []
    n = len(paths)
    return [{"path": str(landing), "problem": "nothing recognised", "reason": (
        f"no connector reads any of its {n:,} file{'' if n == 1 else 's'} (listed as skipped or refused above), so nothing "
        "is loaded; `finops connectors` lists the files each connector recognises, and a mapping file "
        "(README: Adding a source) reads another export's columns")}]


def run_notices(files: list[dict]) -> list[dict]:
    """Of `files_read_since`, the files this run loaded with something to say: the rows it
    quarantined (the rest loaded, and the run passes) with the first reason and the money set
    aside, and the connector's warnings (a row with fewer fields than the header was filled out
    with empty columns). Without them a loaded file's damage was only in raw.files and raw.quarantine."""
    notices = []
    for r in files:
        if r["status"] == "superseded" and r.get("covered_by") and r["covered_by"].startswith(("FOCUS: ", "own export: ")):
            form = "FOCUS export" if r["covered_by"].startswith("FOCUS: ") else "provider's own export"
            notices.append({"path": r["path"], "notice": "superseded", "reason": (
                f"its lines no longer count: the {form} ({r['superseded_by'] or r['covered_by'].split(': ', 1)[1]}) holds the "
                "same provider, billing account and month, the same charges in another form, and one form counts (the "
                "provider's own, unless it is incomplete or two days or more behind; README: The ledger)")})
            continue
        if r["status"] == "superseded" and r.get("covered_by") and r["covered_by"].startswith("whole account: "):
            notices.append({"path": r["path"], "notice": "superseded", "reason": (
                f"its lines no longer count: the whole billing account's export ({r['covered_by'].split(': ', 1)[1]}) holds "
                "its charges (an export of a narrower scope, a subscription or a member account, counts only past the whole "
                "account's export's last day; README: The ledger)")})
            continue
        if r["status"] == "superseded" and r.get("covered_by") and r["covered_by"].startswith("wider scope: "):
            notices.append({"path": r["path"], "notice": "superseded", "reason": (
                f"its lines no longer count: the export of a scope that holds this one's ({r['covered_by'].split(': ', 1)[1]}) "
                "holds its charges (a scope whose path lies under another's, or a subscription whose charges a billing or "
                "management scope's export bills, counts only past the last day of every export holding it; README: The ledger)")})
            continue
        if r["status"] == "superseded" and r.get("covered_by"):
            names = r["covered_by"].split(", ")
            exports = [n for n in names if n != "a plain upload"]
            who = ([f"the export {', '.join(exports)}"] if exports else []) + (
                [f"a plain upload ({r['superseded_by']})"] if "a plain upload" in names else [])
            by = " and ".join(who) + (" hold" if len(who) > 1 else " delivers" if exports else " holds")
            notices.append({"path": r["path"], "notice": "superseded", "reason": (
                f"its lines no longer count: {by} the same provider, billing account and month, and one export counts "
                "for each (a complete delivery first, an export before a plain upload, then the one whose charges reach "
                "the latest day, then the one with more lines; README: The ledger)")})
            continue
        if r["status"] == "superseded" and r.get("superseded_by") and r.get("invoice_sent_again"):
            notices.append({"path": r["path"], "notice": "superseded", "reason": (
                f"its lines no longer count: {r['superseded_by']} holds the same invoice again, and an invoice "
                "sent again replaces its own lines (README: The ledger)")})
            continue
        if r["status"] == "superseded" and r.get("superseded_by"):
            notices.append({"path": r["path"], "notice": "superseded", "reason": (
                f"its lines no longer count: {r['superseded_by']} replaced it (plain uploads of one provider, billing "
                "account and month whose charge dates overlap replace each other; a GPU cloud's, each invoice). If they "
                "are parts of one month, load "
                "them with the export's manifest or folder layout, or map an invoice id (a connector of your own: fill InvoiceId "
                "and set invoices_are_deliveries; README: The ledger, Adding a source)")})
            continue
        if r["status"] != "loaded" or _wholly_quarantined(r):
            continue
        if r.get("months_out"):
            notices.append({"path": r["path"], "notice": "counts in part", "reason": (
                f"its lines of {r['months_out']} no longer count: {r['months_held_by']} now hold(s) that month (one "
                "delivery counts for each provider, billing account and month; README: The ledger); its other months count")})
        if r.get("counts_only_for") and r.get("counts_past"):
            notices.append({"path": r["path"], "notice": "counts in part", "reason": (
                f"its lines count only for charges {r['counts_only_for_ranges']} (UTC); at other times {r['counts_past']} "
                + ("(the whole billing account's export) holds them. An export of a narrower scope (a subscription, a member "
                   "account) counts only past the whole account's export's last day (README: The ledger)"
                   if r.get("counts_past_whole") else
                   "(the export of a scope that holds this one's) holds them. An export of a narrower scope (a subscription "
                   "beside its billing profile's, a resource group beside its subscription's) counts only for the time no "
                   "export holding it holds (README: The ledger)"))})
        elif r.get("counts_only_for"):
            notices.append({"path": r["path"], "notice": "counts in part", "reason": (
                f"its lines count only for {r['counts_only_for']} (UTC); the rest of its charge time counts through "
                f"{r['shares_with']} (plain uploads whose charge dates overlap: each stretch counts through the one with the "
                "later dates). If they are parts of one month split by rows, load them with the export's manifest or folder "
                "layout (README: The ledger)")})
        if n := r["rows_quarantined"]:
            money = f" (their cost in the file: {text})" if (text := set_aside_text(r)) else ""
            reason = f"{n:,} row{'' if n == 1 else 's'} quarantined{money}" + (f", e.g. {r['first_reason']}" if r["first_reason"] else "")
            notices.append({"path": r["path"], "notice": "quarantined rows", "reason": reason})
        for warning in (r["detail"] or "").split("; warning: ")[1:]:
            notices.append({"path": r["path"], "notice": "warning", "reason": warning})
    return notices


def set_aside_text(r: dict) -> str:
    """Quarantined money in each currency its rows state (`100 USD; 700 CNY`), then any whose
    currency its reader did not say (a file an older version read), as a bare amount; '' for none."""
    by_currency = r.get("quarantined_by_currency") or []
    parts = [f"{e['amount'].normalize():f}" + (f" {e['currency']}" if e["currency"] else ", currency not known")
             for e in by_currency if e["amount"]]
    unsaid = (r.get("quarantined_total") or 0) - sum((e["amount"] for e in by_currency), start=0)
    return "; ".join(parts + ([f"{unsaid.normalize():f}"] if unsaid else []))


def print_notices(console: Console, notices: list[dict]) -> None:
    """One line per file the run loaded with rows set aside or a warning (the run still passes)."""
    for n in notices:
        console.print(Text.assemble((n["notice"], "yellow"), f": {for_terminal(n['path'])} — {for_terminal(n['reason'])}"),
                      highlight=False, soft_wrap=True)
    if any(n["notice"] in ("quarantined rows", "warning") for n in notices):
        console.print(Text("rows set aside: SELECT x_SourceFile, x_SourceRow, reason FROM raw.quarantine; "
                           "warnings: SELECT path, detail FROM raw.files", style="yellow"), highlight=False, soft_wrap=True)


def print_problems(console: Console, problems: list[dict]) -> None:
    """One line per file the run could not load: what happened, its path and the reason."""
    if problems:
        console.print(Text(f"{len(problems)} file(s) did not load:", style="red"))
    for p in problems:
        console.print(Text.assemble((p["problem"], "red"), f": {for_terminal(p['path'])} — {for_terminal(p['reason'])}"),
                      highlight=False, soft_wrap=True)


def print_summary(console: Console, s: dict, warehouse: Path, elapsed: float) -> None:
    files = Table("status", "files", "rows loaded", "rows quarantined", title="landing files")
    for f in s["files"]:
        files.add_row(Text(for_terminal(f["status"])), str(f["files"]), f"{f['rows_loaded'] or 0:,}", f"{f['rows_quarantined'] or 0:,}")
    console.print(files)
    for p in (p for p in s["problems"] if p["status"] == "refused"):
        console.print(Text.assemble(("refused", "yellow"), f": {for_terminal(p['path'])} — {for_terminal(p['detail'])}"),
                      highlight=False, soft_wrap=True)
    skipped = [p for p in s["problems"] if p["status"] == "unrecognized"]
    for p in skipped[:SHOW_SKIPPED]:
        console.print(Text.assemble(("skipped", "yellow"), f": {for_terminal(p['path'])} — {for_terminal(p['detail'])}"),
                      highlight=False, soft_wrap=True)
    if len(skipped) > SHOW_SKIPPED:
        console.print(f"[yellow]skipped[/]: {len(skipped) - SHOW_SKIPPED} more files no connector recognises "
                      "(SELECT path, detail FROM raw.files WHERE status = 'unrecognized')", highlight=False)

    phases = Table("phase", "cost", "share %", "GPU-h paid", "GPU-h busy", "util %", "cost / busy GPU-h", "by billing currency",
                   title=f"spend by phase, every billed month ({s['spend_by_phase'][0]['reporting_currency'] if s['spend_by_phase'] else ''})")
    for p in with_shown_shares(s["spend_by_phase"]):
        by_currency = ", ".join(f"{k} {money(v)}" for k, v in (p["cost_by_billing_currency"] or {}).items())
        phases.add_row(Text(for_terminal(p["phase"])), money(p["cost_reporting"]), f"{p['share_shown'] or 0:.1f}",
                       f"{p['gpu_hours_paid']:,.1f}", f"{p['gpu_hours_busy']:,.1f}",
                       "—" if p["utilization_shown"] is None else f"{p['utilization_shown']:.1f}",
                       # As in the report: idle GPU-hours are by definition not busy, so a price per
                       # busy hour means nothing there (the mart keeps the quotient for analysts).
                       "—" if p["phase"] in ("idle", "unattributed") else money(p["cost_per_busy_gpu_hour"]),
                       Text(for_terminal(by_currency)))
    console.print(phases)
    if unconverted := sum(p.get("parts_without_fx_rate") or 0 for p in s["spend_by_phase"]):
        # The cost column is the converted money alone: a phase billed in a currency without a rate reads 0 there.
        console.print(Text.assemble(("not converted", "yellow"), f": {unconverted:,} parts of charges have no FX rate; their "
                                    "cost is in the billing-currency column only (core.cost_lines.x_FxStatus = 'missing_rate')"),
                      highlight=False, soft_wrap=True)

    if line := unidentified_gpu_line(s.get("unidentified_gpus") or []):
        console.print(Text.assemble(("unidentified GPUs", "yellow"), f": {line}"), highlight=False, soft_wrap=True)
    if line := host_names_line(s.get("host_names") or []):
        console.print(Text(f"host names: {line}"), highlight=False, soft_wrap=True)

    balance = Table("currency", "cost lines", "attributed to phases", "conserved", title="money conservation")
    for c in s["conservation"]:
        balance.add_row(Text(for_terminal(c["currency"])), money(c["cost_lines_total"]), money(c["attributed_total"]),
                        "yes" if c["cost_lines_total"] == c["attributed_total"] else "[red]NO[/]")
    console.print(balance)
    console.print("tables: " + ", ".join(f"{t} {n:,}" for t, n in s["tables"].items()))
    console.print(Text(f"warehouse: {warehouse}  ({elapsed:.1f} s)"))
    # Printed to be pasted: this installation's Python (the system one has no duckdb), never wrapped.
    console.print(Text(f"open it:   {open_warehouse_command(warehouse)}"), highlight=False, soft_wrap=True)
    console.print(Text(f"explain:   {describe_table_command(warehouse)}"), highlight=False, soft_wrap=True)
