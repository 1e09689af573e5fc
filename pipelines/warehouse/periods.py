"""Which periods of the history-sized core tables need building: a run costs what is new.

`core.cost_lines` is built per billing month (the lake's `billing_period=` folders: the UTC month of
a line's billing period, or of its charge where the source states none), `core.gpu_samples` and
`core.gpu_minutes` per UTC day (the lake's `day=` folders). Each period has an input fingerprint:
the registry's state of every file version with rows in that period (path, status, delivery and
the ledger's verdict on its delivery), salted with what else decides the rows (settings, the
user's files, the code). A day of `core.gpu_minutes` also reads the edges of the days beside it
(a span crosses midnight), so its fingerprint covers theirs: new samples on a day rebuild that
day's minutes and its two neighbours'. A period is dirty when its fingerprint differs from the
one recorded when it was last built (`core.period_builds`), or when it was built and has no input
any more (its rows must go). A month of `core.cost_lines` also covers the labels (one category and
subcategory per ServiceName, decided over every month's counts in
`core.service_names_by_billing_month`) of the names it holds: a delivery that changes a label
rebuilds every month holding that name, in the run's range or not. A billing month also covers the
invoices (a GPU cloud's, where invoices are deliveries) whose charge times reach into it: a week's
invoice from November 29 restates December's month to date (core.billing_lines' invoice_matches).

The fingerprints come from folder names and the small registry tables, never from the rows: a
plan costs O(files), whatever the history.

`marts.cost_attribution` is built per billing month too (MONTHLY_MARTS), though not partitioned in
Dagster: its months are `core.cost_lines`' months, and a month's fingerprint is the one
`core.cost_lines` recorded for it, `core.workloads`' version and `core.gpu_minutes`' fingerprints
of the days its GPU charges cover (what its joins read). A new delivery re-attributes its own
month; new telemetry the months whose GPU charges cover its days. `marts.daily_cost_by_billing_month`
and `marts.daily_series_by_billing_month` follow the attribution's months;
`marts.egress_lines_by_billing_month` follows `core.cost_lines`' months, and the daily series read
their egress GB from it (a month's lines that change it change the attribution's fingerprint too).

`marts.gpu_spans_by_day`, `marts.gpu_busy_by_workload_hour` and `marts.gpu_busy_by_host_hour` are
built per UTC day of `core.gpu_minutes` (DAILY_MARTS): a day's fingerprint is the one
`core.gpu_minutes` recorded for it (and, for the busy GPU-minutes by workload, a digest of the
workloads running that day), so a new day of telemetry rebuilds the days whose minutes it rebuilt,
and a new workload file the days its workloads run on. `marts.gpu_minutes_in_storage_writes` is
built the same way, its days' fingerprints also covering the storage writes on them (a new storage
file rebuilds the days its writes cover).
"""

from __future__ import annotations

import calendar
import hashlib
import os
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from pipelines.lake.layout import lake_of_connection, table_root
from pipelines.warehouse import lake_tables
from pipelines.warehouse.connection import memory_share, run_sql_text, sql_text, table_exists

UNKNOWN = "unknown"  # the lake's folder for rows without a date
WHOLE = "*"  # core.period_builds' row for a model last built whole (with or without periods)


@dataclass(frozen=True)
class PeriodModel:
    table: str
    lake_kind: str  # the raw table whose lake folders name the periods
    folder: str  # the Hive partition column holding the period
    # The period of a built row, in SQL: spelled as the lake's folder name, so the two always agree.
    # (A code constant, never data: it is written into the DELETE that clears a period.)
    row_period_sql: str
    param: str  # the model's SQL parameter: the list of periods to build (['*']: all)
    # The built row's timestamp its period is the UTC day or month of (`row_period_sql`'s column):
    # clearing periods also bounds it, a range DuckDB prunes the table's row groups by.
    time_column: str
    reach: int = 0  # a period's rows also read this many periods either side (days only)
    # A mart built per period of the core table it reads (DERIVED_MARTS): its periods are the ones
    # that table recorded as built, not the lake's folders.
    derived_from: str | None = None
    # Its rows read core.workloads and core.gpu_minutes for the GPU charges of a month (marts.cost_attribution).
    reads_gpu_usage: bool = False
    # A daily mart whose rows also read these tables' rows on their day (core.workloads,
    # core.storage_events): a day's fingerprint covers their digest for that day (DAY_DIGESTS).
    reads_by_day: tuple[str, ...] = ()
    # Kept in the lake, a build folder per period, read through a view (pipelines/warehouse/lake_tables.py),
    # instead of in the warehouse file every run copies.
    in_lake: bool = False
    # Its rows carry each ServiceName's one category and subcategory, decided over every month
    # (core.service_names_by_billing_month): a month's fingerprint covers the labels of the names
    # it holds, so another month's lines that change a label rebuild it.
    service_labels: bool = False
    # A run builds every dirty period, in its range or not: a monthly mart records itself as built
    # from its inputs as they are now, and core.cost_lines' months turn dirty by their labels only
    # once the run has counted its new lines, after it chose its range.
    every_dirty_period: bool = False

    def days(self, period: str) -> tuple[date, date] | None:
        """The first and last UTC day of a period (None for rows without a date)."""
        if period == UNKNOWN:
            return None
        if self.folder == "day":
            day = date.fromisoformat(period)
            return day, day
        year, month = (int(p) for p in period.split("-"))
        return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])

    def bounds(self, periods: list[str]) -> tuple[date, date] | None:
        """The first day of the earliest period and the day after the last day of the latest:
        every row of `periods` lies in [start, end). None where a period has no date."""
        days = [self.days(p) for p in periods]
        if not days or any(d is None for d in days):
            return None
        return min(d[0] for d in days), max(d[1] for d in days) + timedelta(days=1)

    def follows(self, before: str, period: str) -> bool:
        """`period` is the one right after `before` (no period between them)."""
        days = self.days(before), self.days(period)
        return None not in days and days[1][0] == days[0][1] + timedelta(days=1)

    def contiguous(self, periods: list[str]) -> bool:
        """The sorted `periods` leave no period out between their first and last: their rows are
        exactly the rows in `bounds`."""
        return all(self.follows(a, b) for a, b in zip(periods, periods[1:]))


PERIOD_MODELS: dict[str, PeriodModel] = {
    "core.service_names_by_billing_month": PeriodModel(
        "core.service_names_by_billing_month", "billing", "billing_period",
        f"coalesce(strftime(billing_period_start, '%Y-%m'), '{UNKNOWN}')", "billing_months", "billing_period_start",
        every_dirty_period=True),
    "core.cost_lines": PeriodModel("core.cost_lines", "billing", "billing_period",
                                   f"coalesce(strftime(BillingPeriodStart, '%Y-%m'), '{UNKNOWN}')", "billing_months",
                                   "BillingPeriodStart", in_lake=True, service_labels=True,
                                   every_dirty_period=True),
    "core.gpu_samples": PeriodModel("core.gpu_samples", "telemetry", "day",
                                    f"coalesce(strftime(ts, '%Y-%m-%d'), '{UNKNOWN}')", "sample_days", "ts"),
    "core.gpu_minutes": PeriodModel("core.gpu_minutes", "telemetry", "day",
                                    f"coalesce(strftime(minute, '%Y-%m-%d'), '{UNKNOWN}')", "minute_days", "minute", reach=1),
}

# Marts built per billing month of their charges (see the module's docstring). Not in
# PERIOD_MODELS: they are no Dagster partitions and need no day range of a run, because a run
# builds every month of theirs whose inputs changed, wherever the run's days lie.
def _monthly_mart(table: str, derived_from: str, reads_gpu_usage: bool = False, in_lake: bool = False) -> PeriodModel:
    """A mart of `derived_from`'s billing months, its rows' month in its column billing_period_start."""
    return PeriodModel(table, "billing", "billing_period", f"coalesce(strftime(billing_period_start, '%Y-%m'), '{UNKNOWN}')",
                       "billing_months", "billing_period_start", derived_from=derived_from, reads_gpu_usage=reads_gpu_usage,
                       in_lake=in_lake, every_dirty_period=True)


# The marts of a row per line or charge grow with the history, like core.cost_lines: in the lake.
# Those of a row per day stay in the warehouse file (a few thousand rows a month).
MONTHLY_MARTS: dict[str, PeriodModel] = {m.table: m for m in (
    _monthly_mart("marts.cost_attribution", "core.cost_lines", reads_gpu_usage=True, in_lake=True),
    _monthly_mart("marts.daily_cost_by_billing_month", "marts.cost_attribution"),
    _monthly_mart("marts.daily_series_by_billing_month", "marts.cost_attribution"),
    _monthly_mart("marts.egress_lines_by_billing_month", "core.cost_lines", in_lake=True),
)}


def _daily_mart(table: str, param: str, reads_by_day: tuple[str, ...] = ()) -> PeriodModel:
    """A mart of core.gpu_minutes' UTC days, its rows' day in its column `day`: a day's rows are
    built from that day's minutes alone, so its fingerprint is the one core.gpu_minutes recorded
    for it (and the digest of what `reads_by_day` holds on that day: the workloads or the storage
    writes overlapping it), and new telemetry rebuilds the days whose minutes were rebuilt."""
    return PeriodModel(table, "telemetry", "day", f"coalesce(strftime(day, '%Y-%m-%d'), '{UNKNOWN}')", param, "day",
                       derived_from="core.gpu_minutes", reads_by_day=reads_by_day, every_dirty_period=True)


# Marts built per UTC day of core.gpu_minutes: the findings and marts over GPU-minutes read these
# small tables (a few rows per GPU or phase and day) instead of every minute of the history.
DAILY_MARTS: dict[str, PeriodModel] = {m.table: m for m in (
    _daily_mart("marts.gpu_spans_by_day", "span_days"),
    _daily_mart("marts.gpu_busy_by_workload_hour", "busy_days", reads_by_day=("core.workloads",)),
    _daily_mart("marts.gpu_busy_by_host_hour", "host_hour_days"),
    _daily_mart("marts.gpu_minutes_in_storage_writes", "storage_write_days", reads_by_day=("core.storage_events",)),
)}
# The marts built per period of the table they read (the module's docstring).
DERIVED_MARTS: dict[str, PeriodModel] = {**MONTHLY_MARTS, **DAILY_MARTS}
ANY_PERIOD_MODEL: dict[str, PeriodModel] = {**PERIOD_MODELS, **DERIVED_MARTS}

# The input rows one statement of a period build reads at most (its periods' raw rows, from the
# lake's Parquet footers), unless a single period holds more. The GPU-minute rollup's window over
# each GPU's series does not spill to disk as a grouping does: 100M samples in one statement ran
# out of memory at 4 GB, a few million per statement stay within a run's budget. The overhead of a
# statement is a few tenths of a second, so batches this size cost little on small histories.
# FINOPS_PERIOD_BATCH_ROWS overrides it (a machine with more memory may take bigger batches).
BATCH_ROWS = 4_000_000

BUILDS_DDL = """
CREATE TABLE IF NOT EXISTS core.period_builds (
    model VARCHAR NOT NULL,
    period VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    built_at TIMESTAMPTZ NOT NULL
)
"""

# The registry's state of each file version that can put rows in a period, keyed by content (a
# duplicate's delivery decides which delivery its content counts through). Billing: the file's
# status and delivery, the delivery's completeness and the ledger's verdict on each of its slices.
BILLING_STATE = """
WITH slices AS (
    SELECT delivery_id, string_agg(concat_ws(',', line_provider, line_account, line_period, line_invoice, counts, rank, winner, CAST(counts_for AS VARCHAR)), ';'
                                   ORDER BY line_provider, line_account, line_period, line_invoice, rank) AS verdict
    FROM raw.delivery_slices GROUP BY delivery_id
)
SELECT coalesce(f.content_sha256, f.sha256) AS content, f.sha256,
       concat_ws('|', f.path, f.sha256, f.status, f.delivery_id, d.complete, d.created_at, s.verdict) AS state
FROM raw.files AS f
LEFT JOIN raw.deliveries AS d USING (delivery_id)
LEFT JOIN slices AS s USING (delivery_id)
WHERE f.kind = 'billing'
"""

TELEMETRY_STATE = """
SELECT f.sha256 AS content, f.sha256, concat_ws('|', f.path, f.sha256, f.status) AS state
FROM raw.files AS f
WHERE f.kind = 'telemetry'
"""


def _period_folders(conn: duckdb.DuckDBPyConnection, model: PeriodModel) -> list[tuple[str, str, Path]]:
    """(sha256, period, folder) of every file version's folder in the model's lake (names only)."""
    root = table_root(lake_of_connection(conn), model.lake_kind)
    found = []
    prefix = f"{model.folder}="
    for folder in root.glob(f"**/{prefix}*/file=*") if root.exists() else ():
        period = next((p.name[len(prefix):] for p in folder.parents if p.name.startswith(prefix)), None)
        if period is not None:
            found.append((folder.name[len("file="):], period, folder))
    return found


def _folders(conn: duckdb.DuckDBPyConnection, model: PeriodModel) -> dict[str, set[str]]:
    """sha256 → the periods its lake folders hold (folder names only; no file is opened)."""
    found: dict[str, set[str]] = defaultdict(set)
    for sha, period, _ in _period_folders(conn, model):
        found[sha].add(period)
    return found


def period_rows(conn: duckdb.DuckDBPyConnection, table: str, wanted: list[str]) -> dict[str, int]:
    """The raw rows in the lake under each of `wanted` periods (every version's folder, registered
    or not: an upper bound), from the Parquet footers of those periods' files only."""
    model = ANY_PERIOD_MODEL[table]
    rows: dict[str, int] = dict.fromkeys(wanted, 0)
    for _, period, folder in _period_folders(conn, model):
        if period in rows:
            rows[period] += sum(pq.read_metadata(f).num_rows for f in folder.glob("*.parquet"))
    return rows


def batch_rows() -> int:
    """FINOPS_PERIOD_BATCH_ROWS, else BATCH_ROWS."""
    text = os.environ.get("FINOPS_PERIOD_BATCH_ROWS", "").strip()
    if not text:
        return BATCH_ROWS
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"FINOPS_PERIOD_BATCH_ROWS must be a whole number of rows above 0, not {text!r}")
    return int(text)


def batches(conn: duckdb.DuckDBPyConnection, table: str, chosen: list[str], max_rows: int | None = None) -> list[list[str]]:
    """`chosen` (sorted) cut into runs of periods reading at most `max_rows` input rows each (a
    period over it alone), and without gaps: a run is then a time range, which the models and the
    clearing of old rows test without formatting each row's period (rows without a date go alone).
    (A day of GPU-minutes also reads the last and first minutes of the days beside it: not counted.)"""
    model = ANY_PERIOD_MODEL[table]
    max_rows = batch_rows() if max_rows is None else max_rows
    rows = period_rows(conn, table, chosen)
    out: list[list[str]] = []
    current, current_rows = [], 0
    for period in chosen:
        size = rows.get(period, 0)
        if current and (current_rows + size > max_rows or not model.follows(current[-1], period)):
            out.append(current)
            current, current_rows = [], 0
        current.append(period)
        current_rows += size
    return out + ([current] if current else [])


def input_fingerprints(conn: duckdb.DuckDBPyConnection, table: str, salt: str) -> dict[str, str]:
    """Each period with input rows → its fingerprint."""
    model = ANY_PERIOD_MODEL[table]
    if model.derived_from:
        return _mart_fingerprints(conn, model, salt)
    folders = _folders(conn, model)
    rows = conn.execute(BILLING_STATE if model.lake_kind == "billing" else TELEMETRY_STATE).fetchall()
    periods_of_content: dict[str, set[str]] = defaultdict(set)
    states_of_content: dict[str, list[str]] = defaultdict(list)
    for content, sha, state in rows:
        periods_of_content[content] |= folders.get(sha, set())
        states_of_content[content].append(state)
    states: dict[str, list[str]] = defaultdict(list)
    for content, content_states in states_of_content.items():
        for period in periods_of_content[content]:
            states[period] += content_states
    if model.lake_kind == "billing":
        _add_invoiced_reach(conn, model, states, states_of_content)
    if model.reach:
        states = _with_neighbours(states, model.reach)
    if model.service_labels:
        for period, labels in service_labels_by_period(conn).items():
            if period in states:
                states[period].append(f"labels:{labels}")
    return {period: hashlib.sha256("\n".join([salt, *sorted(s)]).encode()).hexdigest()[:32] for period, s in states.items()}


# The charge times of each invoice a file version holds, where a GPU cloud's invoices are deliveries
# (raw.file_slices, written when the file was read): an invoiced line restates the month-to-date
# lines of the same charge over the time both cover, whatever billing month either states
# (core.billing_lines' invoice_matches), so the invoice is an input of every month its times reach.
INVOICED_REACH = """
SELECT coalesce(f.content_sha256, f.sha256) AS content, s.min_charge_start, coalesce(s.max_charge_end, s.min_charge_start)
FROM raw.file_slices AS s
JOIN raw.files AS f ON f.path = s.path AND f.sha256 = s.sha256
WHERE f.kind = 'billing' AND s.by_invoice AND s.line_invoice IS NOT NULL AND s.min_charge_start IS NOT NULL
"""


def _add_invoiced_reach(conn: duckdb.DuckDBPyConnection, model: PeriodModel, states: dict[str, list[str]],
                        states_of_content: dict[str, list[str]]) -> None:
    """Each billing month with inputs of its own also covers the states of the invoices whose charge
    times reach into it (a week's invoice from November 29 bills December's month to date up to
    December 6): a new, voided or re-issued invoice rebuilds the months whose lines it restates.
    Months without inputs of their own have no lines to restate. O(invoice slices × months)."""
    reaches = conn.execute(INVOICED_REACH).fetchall()
    if not reaches:
        return
    months = {}
    for period in states:
        if (days := model.days(period)) is not None:  # the month's [first instant, first instant after), UTC
            months[period] = tuple(datetime.combine(day, time(), timezone.utc) for day in (days[0], days[1] + timedelta(days=1)))
    for content, start, end in reaches:
        start, end = start.astimezone(timezone.utc), end.astimezone(timezone.utc)
        for period, (first, after) in months.items():
            # Half-open times; a line of no length at an instant lies in the month holding it.
            if start < after and (end > first or (end == start and start >= first)):
                states[period] += [f"invoiced:{state}" for state in states_of_content.get(content, [content])]


# Per billing month, the labels (category, subcategory) of every ServiceName its lines carry.
SERVICE_LABELS = f"""
SELECT coalesce(strftime(n.billing_period_start, '%Y-%m'), '{UNKNOWN}') AS period,
       string_agg(n.ServiceName || '=' || l.ServiceCategory || '/' || coalesce(l.ServiceSubcategory, ''), ';'
                  ORDER BY n.ServiceName) AS labels
FROM (SELECT DISTINCT billing_period_start, ServiceName FROM core.service_names_by_billing_month) AS n
JOIN service_name_labels(core.service_names_by_billing_month) AS l USING (ServiceName)
GROUP BY ALL
"""


def service_labels_by_period(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Each billing month → the labels of the ServiceNames it holds, as core.cost_lines writes them
    (none before core.service_names_by_billing_month is first built). A small table: O(months × names)."""
    if not table_exists(conn, "core.service_names_by_billing_month"):
        return {}
    return dict(conn.execute(SERVICE_LABELS).fetchall())


def _with_neighbours(states: dict[str, list[str]], reach: int) -> dict[str, list[str]]:
    """Each day's states with those of the days within `reach` of it, each marked with its day (the
    same file moving from the day before to the day after is a change); a day without input of its
    own but beside one has a period too. Rows without a date stay on their own."""
    widened: dict[str, list[str]] = defaultdict(list)
    for period, own in states.items():
        if period == UNKNOWN:
            widened[period].extend(own)
            continue
        day = date.fromisoformat(period)
        for shift in range(-reach, reach + 1):
            widened[(day + timedelta(days=shift)).isoformat()].extend(f"{period}:{state}" for state in own)
    return widened


# The UTC days each billing month's GPU charges cover: the days of core.gpu_minutes that
# marts.cost_attribution's joins can read for that month (a scan of four columns of core.cost_lines).
GPU_CHARGE_DAYS = f"""
SELECT coalesce(strftime(BillingPeriodStart, '%Y-%m'), '{UNKNOWN}') AS period,
       min(ChargePeriodStart)::DATE AS first_day, max(coalesce(ChargePeriodEnd, ChargePeriodStart))::DATE AS last_day
FROM core.cost_lines
WHERE x_GpuCount > 0
GROUP BY ALL
"""


# Per UTC day, a digest of the workloads overlapping it (every column a daily mart's join reads):
# a new workload file changes the days its workloads run on, not the history. A scan of core.workloads,
# a small table (a row per job), never of the minutes.
WORKLOADS_BY_DAY = """
SELECT strftime(d.day, '%Y-%m-%d') AS period,
       md5(string_agg(concat_ws('|', w.workload_id, w.host, w.started_at, coalesce(CAST(w.ended_at AS VARCHAR), '-'), w.phase,
                                w.gpu_count, w.gpu_cards, coalesce(w.name, '-'), coalesce(w.namespace, '-')), ';'
                      ORDER BY w.workload_id, w.host, w.started_at)) AS digest
FROM (SELECT unnest(CAST(? AS DATE[])) AS day) AS d
JOIN core.workloads AS w
  ON w.started_at < d.day + 1 AND coalesce(w.ended_at, 'infinity'::TIMESTAMPTZ) > d.day
GROUP BY ALL
"""


# Per UTC day, a digest of the storage writes overlapping it (checkpoint events and disk-write
# intervals, every column marts.gpu_minutes_in_storage_writes reads of them): a new storage file
# changes the days its writes cover. A scan of core.storage_events, never of the minutes.
STORAGE_WRITES_BY_DAY = """
SELECT strftime(d.day, '%Y-%m-%d') AS period,
       md5(string_agg(concat_ws('|', e.kind, e.host, coalesce(CAST(e.bytes AS VARCHAR), '-'), e.started_at,
                                coalesce(CAST(e.ended_at AS VARCHAR), '-')), ';'
                      ORDER BY e.host, e.started_at, e.ended_at, e.kind, e.bytes)) AS digest
FROM (SELECT unnest(CAST(? AS DATE[])) AS day) AS d
JOIN core.storage_events AS e
  ON e.kind IN ('checkpoint', 'disk_write') AND e.started_at < d.day + 1 AND e.ended_at > d.day
GROUP BY ALL
"""

# What a daily mart's `reads_by_day` names → the query giving its digest per day.
DAY_DIGESTS = {"core.workloads": WORKLOADS_BY_DAY, "core.storage_events": STORAGE_WRITES_BY_DAY}


def digests_by_day(conn: duckdb.DuckDBPyConnection, table: str, days: list[str]) -> dict[str, str]:
    """Each of `days` (YYYY-MM-DD) with rows of `table` on it → their digest (DAY_DIGESTS)."""
    dated = [d for d in days if d != UNKNOWN]
    if not dated or not table_exists(conn, table):
        return {}
    return dict(conn.execute(DAY_DIGESTS[table], [dated]).fetchall())


def _mart_fingerprints(conn: duckdb.DuckDBPyConnection, model: PeriodModel, salt: str) -> dict[str, str]:
    """Each period (a month, or a day of a daily mart) of the table a derived mart reads → the
    digest of what its rows are built from: that period as the table recorded it; where a monthly
    mart reads GPU usage, for a month with GPU charges, core.workloads' version and the GPU-minutes
    of the days those charges cover; where a daily mart reads other tables by day (`reads_by_day`),
    their rows on that day."""
    months = built_fingerprints(conn, model.derived_from)
    if not months:
        return {}
    minutes = built_fingerprints(conn, "core.gpu_minutes") if model.reads_gpu_usage else {}
    workloads = whole_fingerprint(conn, "core.workloads") if model.reads_gpu_usage else None
    spans = {period: (first, last) for period, first, last in conn.execute(GPU_CHARGE_DAYS).fetchall()} \
        if model.reads_gpu_usage else {}
    by_day = {table: digests_by_day(conn, table, list(months)) for table in model.reads_by_day}
    out = {}
    for month, upstream in months.items():
        parts = [salt, model.table, f"{model.derived_from}={upstream}"]
        parts += [f"{table}:{month}={digests.get(month, '')}" for table, digests in by_day.items()]
        if month in spans:
            first, last = spans[month]
            parts.append(f"core.workloads={workloads}")
            parts += sorted(f"core.gpu_minutes:{day}={fp}" for day, fp in minutes.items()
                            if day != UNKNOWN and first <= date.fromisoformat(day) <= last)
        out[month] = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
    return out


def whole_fingerprint(conn: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """The inputs' digest a model built whole recorded (pipelines/warehouse/builds.py)."""
    if not table_exists(conn, "core.period_builds"):
        return None
    found = conn.execute("SELECT fingerprint FROM core.period_builds WHERE model = ? AND period = ?", [table, WHOLE]).fetchall()
    return found[0][0] if found else None


def built_fingerprints(conn: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    if not table_exists(conn, "core.period_builds"):
        return {}
    return dict(conn.execute("SELECT period, fingerprint FROM core.period_builds WHERE model = ? AND period <> ?",
                             [table, WHOLE]).fetchall())


@dataclass(frozen=True)
class PeriodPlan:
    table: str
    periods: list[str]  # to build (or clear): sorted
    fingerprints: dict[str, str]  # their input fingerprints; a period missing here has no input any more
    dirty: list[str]  # every dirty period, in range or not


def plan(conn: duckdb.DuckDBPyConnection, table: str, salt: str, day_range: tuple[date, date] | None = None,
         only_changed: bool = True) -> PeriodPlan:
    """The periods of `table` to build: those overlapping `day_range` (None: any), and of those only
    the dirty ones when `only_changed` (a backfill rebuilds its whole range). A model with
    `every_dirty_period` (the monthly marts, core.cost_lines and its counts) builds every dirty
    period besides, in the range or not."""
    model = ANY_PERIOD_MODEL[table]
    inputs, built = input_fingerprints(conn, table, salt), built_fingerprints(conn, table)
    dirty = sorted(p for p in set(inputs) | set(built) if inputs.get(p) != built.get(p))

    def in_range(period: str) -> bool:
        if day_range is None:
            return True
        days = model.days(period)
        if days is None:  # rows without a date belong to no day: built whenever they change
            return only_changed
        return days[0] <= day_range[1] and days[1] >= day_range[0]

    candidates = dirty if only_changed else sorted(set(inputs) | set(built))
    chosen = [p for p in candidates if in_range(p)]
    if model.every_dirty_period:
        chosen = sorted(set(chosen) | set(dirty))
    return PeriodPlan(table, chosen, {p: inputs[p] for p in chosen if p in inputs}, dirty)


def record_built(conn: duckdb.DuckDBPyConnection, built: PeriodPlan, everything: bool = False,
                 whole: str | None = None) -> None:
    """After a build: the fingerprints its periods were built from (`everything`: a full build, so
    every period's current input is now built). `whole`: a monthly mart's digest of all its
    inputs (pipelines/warehouse/builds.py), which the models reading it compare."""
    conn.execute(BUILDS_DDL)
    if everything:
        conn.execute("DELETE FROM core.period_builds WHERE model = ?", [built.table])
    else:
        conn.execute("DELETE FROM core.period_builds WHERE model = ? AND (list_contains(?, period) OR (? AND period = ?))",
                     [built.table, built.periods, whole is not None, WHOLE])
    rows = [(built.table, p, fp) for p, fp in built.fingerprints.items()]
    rows += [(built.table, WHOLE, whole or "")] if everything or whole is not None else []
    if rows:
        conn.executemany("INSERT INTO core.period_builds VALUES (?, ?, ?, now())", rows)


def dirty_day_range(conn: duckdb.DuckDBPyConnection, salt: str, today: date) -> tuple[date, date] | None:
    """The UTC days a run must cover to build every dirty period of every model (None: nothing
    dirty). Rows without a date add `today`, so the run has a range that includes them."""
    days: list[date] = []
    for table, model in PERIOD_MODELS.items():
        for period in plan(conn, table, salt).dirty:
            days.extend(model.days(period) or (today, today))
    return (min(days), max(days)) if days else None


def everything_of(conn: duckdb.DuckDBPyConnection, table: str, salt: str) -> PeriodPlan:
    """A full build: every period with input (the table was missing or its columns changed)."""
    inputs = input_fingerprints(conn, table, salt)
    return PeriodPlan(table, sorted(inputs), inputs, sorted(inputs))


def needs_full_build(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    """The table is missing, or no period of it was ever recorded as built (a warehouse from before
    period builds; a monthly mart recorded whole, or built by another engine): it is built whole."""
    if not table_exists(conn, table) or not table_exists(conn, "core.period_builds"):
        return True
    if ANY_PERIOD_MODEL[table].in_lake and not lake_tables.is_in_lake(conn, table):
        return True  # a table in the warehouse file (built before the lake, or by Spark)
    recorded = "SELECT count(*) FROM core.period_builds WHERE model = ?" + (" AND period <> ?" if table in DERIVED_MARTS else "")
    return conn.execute(recorded, [table, WHOLE] if table in DERIVED_MARTS else [table]).fetchall()[0][0] == 0


def _model_text(table: str, replacement: str) -> str:
    """The model's SQL with its one `CREATE OR REPLACE TABLE <table> AS` replaced."""
    target = f"CREATE OR REPLACE TABLE {table} AS"
    text = sql_text(table)
    if text.count(target) != 1:
        raise ValueError(f"sql/{table.replace('.', '/')}.sql must create {table} once with `{target}`")
    return text.replace(target, replacement)


def build_fresh(conn: duckdb.DuckDBPyConnection, table: str, params: dict[str, object],
                periods: list[list[str]]) -> None:
    """Build `table` anew on DuckDB from the batches of periods `periods` (every period with input),
    one statement per batch: the first creates the table, the others append. A whole history in
    one statement would hold it all at once (pipelines/warehouse/periods.py, BATCH_ROWS)."""
    model = ANY_PERIOD_MODEL[table]
    if model.in_lake:
        lake_tables.register(conn, table, {lake_tables.SCHEMA_PERIOD: _write_columns(conn, model, params),
                                           **_write_in_lake(conn, model, params, periods)}, everything=True)
        return
    if not periods:  # no input at all: the empty table, with its columns
        run_sql_text(conn, sql_text(table), params)
        return
    run_sql_text(conn, sql_text(table), {**params, model.param: periods[0]})
    insert = _model_text(table, f"INSERT INTO {table}")
    for batch in periods[1:]:
        run_sql_text(conn, insert, {**params, model.param: batch})


def _clear(conn: duckdb.DuckDBPyConnection, model: PeriodModel, periods: list[str]) -> None:
    """Delete the rows of `periods`: their time range, which the scan prunes row groups by, and,
    where the periods leave gaps (or have no date), each row's period."""
    bounds = model.bounds(periods)
    conditions, args = [], []
    if bounds:
        conditions.append(f"{model.time_column} >= ?::DATE AND {model.time_column} < ?::DATE")
        args += bounds
    if not (bounds and model.contiguous(periods)):
        conditions.append(f"list_contains(?, {model.row_period_sql})")
        args.append(periods)
    conn.execute(f"DELETE FROM {model.table} WHERE {' AND '.join(conditions)}", args)


def build_periods(conn: duckdb.DuckDBPyConnection, table: str, params: dict[str, object], periods: list[list[str]]) -> bool:
    """Rebuild the batches of periods `periods` of `table` in place on DuckDB: per batch, the model's
    own SQL with its period list into a temporary table, then those periods' rows deleted and the
    new ones inserted. Returns False, changing nothing, when the new rows' columns differ from the
    table's (new code: build it anew instead)."""
    model = ANY_PERIOD_MODEL[table]
    if model.in_lake:
        return _rebuild_in_lake(conn, model, params, periods)
    text = _model_text(table, "CREATE OR REPLACE TEMP TABLE period_rows AS")
    schema, name = table.split(".")
    columns = ("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = coalesce(?, current_database()) "
               "AND schema_name = ? AND table_name = ? ORDER BY column_index")
    for number, batch in enumerate(periods):
        run_sql_text(conn, text, {**params, model.param: batch})
        if number == 0 and (conn.execute(columns, [None, schema, name]).fetchall()
                            != conn.execute(columns, ["temp", "main", "period_rows"]).fetchall()):
            conn.execute("DROP TABLE period_rows")
            return False
        _clear(conn, model, batch)
        conn.execute(f"INSERT INTO {table} SELECT * FROM period_rows")
        conn.execute("DROP TABLE period_rows")
    return True


# --- tables kept in the lake (PeriodModel.in_lake) -------------------------------------------------

# A lake table's build streams its rows out to Parquet; what it holds meanwhile (core.cost_lines'
# conformed lines) DuckDB can spill. At the full limit it filled it anyway, and that was a 1M-line
# run's peak: 1,168 MiB for the build at 1 GB, 817 MiB at 60 %, in the same 5.1-5.4 s (a 1M-line
# month, the 2-core development machine); at 50 % it began to spill (6.6 s).
LAKE_WRITE_MEMORY_SHARE = 0.6


def _copy_text(table: str, folder: Path) -> str:
    """The model's SQL with its result written to one Parquet file in `folder` instead of a table."""
    target = f"CREATE OR REPLACE TABLE {table} AS"
    statements = [s.query.strip() for s in duckdb.extract_statements(_model_text(table, target))]
    for number, statement in enumerate(statements):
        if target in statement:
            statements[number] = statement.replace(target, "COPY (").rstrip().rstrip(";") + f"\n) {lake_tables.copy_to(folder)}"
    return ";\n".join(s.rstrip(";") for s in statements) + ";"


def _write_columns(conn: duckdb.DuckDBPyConnection, model: PeriodModel, params: dict[str, object]) -> Path:
    """The model's zero-row file (no period asked for): the view's columns, whatever the builds hold.
    Refuses a column Parquet cannot hold exactly (DuckDB writes HUGEINT as DOUBLE): the model must
    cast it, or money and weights would come back rounded."""
    run_sql_text(conn, _model_text(model.table, "CREATE OR REPLACE TEMP TABLE lake_columns AS"), {**params, model.param: []})
    inexact = conn.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'temp' "
                           "AND table_name = 'lake_columns' AND data_type IN ('HUGEINT', 'UHUGEINT')").fetchall()
    if inexact:
        conn.execute("DROP TABLE lake_columns")
        raise TypeError(f"{model.table} is kept in the lake, whose Parquet cannot hold {inexact} exactly: cast them in its SQL")
    folder = lake_tables.new_folder(lake_of_connection(conn), model.table, model.folder, lake_tables.SCHEMA_PERIOD)
    conn.execute(f"COPY lake_columns {lake_tables.copy_to(folder)}").fetchall()
    conn.execute("DROP TABLE lake_columns")
    return folder


def _write_in_lake(conn: duckdb.DuckDBPyConnection, model: PeriodModel, params: dict[str, object],
                   batches: list[list[str]]) -> dict[str, Path | None]:
    """Build the periods of `batches`, a new folder each, one statement per batch; returns each
    period's folder (None for a period that has no rows now). A batch of one period is written
    straight from the model's query; a batch of several goes through a temporary table, written
    out period by period (DuckDB's partitioned COPY took 20× as long on a 1M-line month)."""
    lake = lake_of_connection(conn)
    written: dict[str, Path | None] = {}
    with memory_share(conn, LAKE_WRITE_MEMORY_SHARE):
        for batch in batches:
            written.update(_write_batch(conn, model, params, batch, lake))
    return written


def _write_batch(conn: duckdb.DuckDBPyConnection, model: PeriodModel, params: dict[str, object],
                 batch: list[str], lake: Path) -> dict[str, Path | None]:
    """One batch of `_write_in_lake`: each of its periods' new folder (None: no rows now)."""
    if len(batch) == 1:
        folder = lake_tables.new_folder(lake, model.table, model.folder, batch[0])
        run_sql_text(conn, _copy_text(model.table, folder), {**params, model.param: batch})
        return {batch[0]: folder}
    run_sql_text(conn, _model_text(model.table, "CREATE OR REPLACE TEMP TABLE period_rows AS"), {**params, model.param: batch})
    found = [r[0] for r in conn.execute(f"SELECT DISTINCT {model.row_period_sql} FROM period_rows").fetchall()]
    if stray := sorted(set(found) - set(batch)):  # registering them would replace those periods' builds
        conn.execute("DROP TABLE period_rows")
        raise RuntimeError(f"{model.table}: building periods {batch} gave rows of other periods {stray}")
    written: dict[str, Path | None] = dict.fromkeys(batch)
    for period in found:
        folder = lake_tables.new_folder(lake, model.table, model.folder, period)
        conn.execute(f"COPY (SELECT * FROM period_rows WHERE {model.row_period_sql} = ?) {lake_tables.copy_to(folder)}",
                     [period]).fetchall()
        written[period] = folder
    conn.execute("DROP TABLE period_rows")
    return written


def _rebuild_in_lake(conn: duckdb.DuckDBPyConnection, model: PeriodModel, params: dict[str, object],
                     batches: list[list[str]]) -> bool:
    """build_periods for a lake table: new folders for the periods, then the view points at them.
    False, changing nothing the view reads, when the new rows' columns differ from the view's."""
    written = _write_in_lake(conn, model, params, batches)
    schema, name = model.table.split(".")
    current = conn.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
                           "AND schema_name = ? AND table_name = ? ORDER BY column_index", [schema, name]).fetchall()
    for folder in (f for f in written.values() if f is not None):
        new = conn.execute("SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet(?, hive_partitioning = false))",
                           [str(folder / lake_tables.DATA_FILE)]).fetchall()
        if new != current:
            return False  # new code: the caller builds it anew (the folders written are removed as unread)
    lake_tables.register(conn, model.table, written)
    return True
