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
any more (its rows must go).

The fingerprints come from folder names and the small registry tables, never from the rows: a
plan costs O(files), whatever the history.
"""

from __future__ import annotations

import calendar
import hashlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, timedelta

import duckdb

from pipelines.lake.layout import lake_of_connection, table_root
from pipelines.warehouse.connection import run_sql_text, sql_text, table_exists

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
    reach: int = 0  # a period's rows also read this many periods either side (days only)

    def days(self, period: str) -> tuple[date, date] | None:
        """The first and last UTC day of a period (None for rows without a date)."""
        if period == UNKNOWN:
            return None
        if self.folder == "day":
            day = date.fromisoformat(period)
            return day, day
        year, month = (int(p) for p in period.split("-"))
        return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


PERIOD_MODELS: dict[str, PeriodModel] = {
    "core.cost_lines": PeriodModel("core.cost_lines", "billing", "billing_period",
                                   f"coalesce(strftime(BillingPeriodStart, '%Y-%m'), '{UNKNOWN}')", "billing_months"),
    "core.gpu_samples": PeriodModel("core.gpu_samples", "telemetry", "day",
                                    f"coalesce(strftime(ts, '%Y-%m-%d'), '{UNKNOWN}')", "sample_days"),
    "core.gpu_minutes": PeriodModel("core.gpu_minutes", "telemetry", "day",
                                    f"coalesce(strftime(minute, '%Y-%m-%d'), '{UNKNOWN}')", "minute_days", reach=1),
}

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
    SELECT delivery_id, string_agg(concat_ws(',', line_provider, line_account, line_period, counts, rank, winner), ';'
                                   ORDER BY line_provider, line_account, line_period, rank) AS verdict
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


def _folders(conn: duckdb.DuckDBPyConnection, model: PeriodModel) -> dict[str, set[str]]:
    """sha256 → the periods its lake folders hold (folder names only; no file is opened)."""
    root = table_root(lake_of_connection(conn), model.lake_kind)
    found: dict[str, set[str]] = defaultdict(set)
    prefix = f"{model.folder}="
    for folder in root.glob(f"**/{prefix}*/file=*") if root.exists() else ():
        period = next((p.name[len(prefix):] for p in folder.parents if p.name.startswith(prefix)), None)
        if period is not None:
            found[folder.name[len("file="):]].add(period)
    return found


def input_fingerprints(conn: duckdb.DuckDBPyConnection, table: str, salt: str) -> dict[str, str]:
    """Each period with input rows → its fingerprint."""
    model = PERIOD_MODELS[table]
    folders = _folders(conn, model)
    rows = conn.execute(BILLING_STATE if model.lake_kind == "billing" else TELEMETRY_STATE).fetchall()
    periods_of_content: dict[str, set[str]] = defaultdict(set)
    for content, sha, _ in rows:
        periods_of_content[content] |= folders.get(sha, set())
    states: dict[str, list[str]] = defaultdict(list)
    for content, _, state in rows:
        for period in periods_of_content[content]:
            states[period].append(state)
    if model.reach:
        states = _with_neighbours(states, model.reach)
    return {period: hashlib.sha256("\n".join([salt, *sorted(s)]).encode()).hexdigest()[:32] for period, s in states.items()}


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
    the dirty ones when `only_changed` (a backfill rebuilds its whole range)."""
    model = PERIOD_MODELS[table]
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
    return PeriodPlan(table, chosen, {p: inputs[p] for p in chosen if p in inputs}, dirty)


def record_built(conn: duckdb.DuckDBPyConnection, built: PeriodPlan, everything: bool = False) -> None:
    """After a build: the fingerprints its periods were built from (`everything`: a full build, so
    every period's current input is now built)."""
    conn.execute(BUILDS_DDL)
    if everything:
        conn.execute("DELETE FROM core.period_builds WHERE model = ?", [built.table])
    else:
        conn.execute("DELETE FROM core.period_builds WHERE model = ? AND list_contains(?, period)", [built.table, built.periods])
    rows = [(built.table, p, fp) for p, fp in built.fingerprints.items()] + ([(built.table, WHOLE, "")] if everything else [])
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
    period builds): it is built whole."""
    if not table_exists(conn, table) or not table_exists(conn, "core.period_builds"):
        return True
    return conn.execute("SELECT count(*) FROM core.period_builds WHERE model = ?", [table]).fetchall()[0][0] == 0


def build_periods(conn: duckdb.DuckDBPyConnection, table: str, params: dict[str, object], periods: list[str]) -> bool:
    """Rebuild `periods` of `table` in place on DuckDB: the model's own SQL with its period list,
    into a temporary table, then those periods' rows deleted and the new ones inserted. Returns
    False, changing nothing, when the new rows' columns differ from the table's (new code: build it
    whole instead)."""
    model = PERIOD_MODELS[table]
    target = f"CREATE OR REPLACE TABLE {table} AS"
    text = sql_text(table)
    if text.count(target) != 1:
        raise ValueError(f"sql/{table.replace('.', '/')}.sql must create {table} once with `{target}`")
    run_sql_text(conn, text.replace(target, "CREATE OR REPLACE TEMP TABLE period_rows AS"), {**params, model.param: periods})
    schema, name = table.split(".")
    columns = ("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = coalesce(?, current_database()) "
               "AND schema_name = ? AND table_name = ? ORDER BY column_index")
    same = conn.execute(columns, [None, schema, name]).fetchall() == conn.execute(columns, ["temp", "main", "period_rows"]).fetchall()
    if same:
        conn.execute(f"DELETE FROM {table} WHERE list_contains(?, {model.row_period_sql})", [periods])
        conn.execute(f"INSERT INTO {table} SELECT * FROM period_rows")
    conn.execute("DROP TABLE period_rows")
    return same
