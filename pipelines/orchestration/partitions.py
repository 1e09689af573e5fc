"""The graph's partitions: months, for every partitioned asset.

Dagster runs one partitions definition per run, and a `finops run` must stay one run (one published
snapshot of the warehouse), so billing and telemetry share one. Months, because a billing month is
the unit a provider delivers and restates, and because Dagster records an event per partition and
asset (about 80 ms each with the SQLite instance on a 2-core machine: daily keys made a backfill of
years cost minutes of bookkeeping). Within a month the work is finer: telemetry is rebuilt per UTC
day, and only the days (and billing months) whose inputs changed (pipelines/warehouse/periods.py).
A run covers a range of months (`BackfillPolicy.single_run`), so a backfill is one run, from the
UI or from `finops run --since/--until` (whose exact days narrow the range's telemetry days).
"""

from __future__ import annotations

from datetime import date, timedelta

from dagster import AssetExecutionContext, BackfillPolicy, MonthlyPartitionsDefinition

FIRST_MONTH = date(2000, 1, 1)
# From 2000 to a year ahead (billing periods and reservations can be dated in the future).
MONTHS = MonthlyPartitionsDefinition(start_date=FIRST_MONTH.isoformat(), end_offset=12)
ONE_RUN = BackfillPolicy.single_run()

RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
# Set by `finops run` without --since/--until: of the run's range, build only what changed.
ONLY_CHANGED_TAG = "finops/only_changed"
# Set by `finops run --since/--until`: the exact days, inside the run's months.
DAYS_TAG = "finops/days"


def month_key(day: date) -> str:
    return day.replace(day=1).isoformat()


def range_tags(first: date, last: date, only_changed: bool) -> dict[str, str]:
    """A run over the months of `first`..`last`; a backfill (not `only_changed`) also names its days."""
    first, last = clamp(first, last)
    tags = {RANGE_START_TAG: month_key(first), RANGE_END_TAG: month_key(last)}
    return {**tags, ONLY_CHANGED_TAG: "true"} if only_changed else {**tags, DAYS_TAG: f"{first}..{last}"}


PARTITION_TAG = "dagster/partition"


def day_range(context: AssetExecutionContext) -> tuple[date, date]:
    """The days a run covers: its months (a range, or the one month of a run of one partition), or
    the exact days of a `finops run --since/--until`. Read from the run's tags: the step that builds
    the partitioned tables builds unpartitioned ones too, so it has no partition range of its own."""
    tags = context.run.tags
    if days := tags.get(DAYS_TAG):
        first, last = days.split("..")
        return date.fromisoformat(first), date.fromisoformat(last)
    start, end = tags.get(RANGE_START_TAG) or tags.get(PARTITION_TAG), tags.get(RANGE_END_TAG) or tags.get(PARTITION_TAG)
    if not (start and end):
        raise ValueError("a run of the partitioned tables names its months (a partition or a range of them)")
    last_month = date.fromisoformat(end)
    next_month = (last_month.replace(day=28) + timedelta(days=4)).replace(day=1)
    return date.fromisoformat(start), next_month - timedelta(days=1)


def only_changed(context: AssetExecutionContext) -> bool:
    return context.run.tags.get(ONLY_CHANGED_TAG) == "true"


def clamp(first: date, last: date) -> tuple[date, date]:
    """A range inside the partitions (days before 2000 or over a year ahead have no partition)."""
    highest = date.today() + timedelta(days=365)
    return max(first, FIRST_MONTH), min(last, highest)
