"""Rules every telemetry, workload and storage connector applies the same way, so joins work."""

from datetime import UTC, datetime, timedelta

import polars as pl

# A sample stamped more than this far ahead of the load is a clock or parsing error, not data.
FUTURE_TOLERANCE = timedelta(days=1)
# DCGM writes these instead of a value for fields a GPU does not support (DCGM_INT32_BLANK,
# DCGM_INT64_BLANK ≈ 9.2e18 and DCGM_FP64_BLANK = 2^47): they are missing values, never numbers.
DCGM_INT32_BLANK = 2147483632
DCGM_FP64_BLANK = 140737488355328.0


def normalise_host(expr: pl.Expr) -> pl.Expr:
    """`GPU-A100-01.cluster.local ` → `gpu-a100-01`; IP addresses are kept whole."""
    text = expr.str.strip_chars().str.to_lowercase()
    is_ip = text.str.contains(r"^\d{1,3}(\.\d{1,3}){3}$")
    return pl.when(is_ip).then(text).otherwise(text.str.replace(r"\..*$", ""))


def normalise_host_value(host: str) -> str:
    """The same rule for a single Python string (file stems, folder names), whose unprintable
    characters (an ESC in a file name) are dropped: a host name must not drive a terminal."""
    host = "".join(ch for ch in host if ch.isprintable())
    frame = pl.DataFrame({"h": [host]}).select(normalise_host(pl.col("h")))
    return frame.item()


def without_dcgm_blanks(expr: pl.Expr) -> pl.Expr:
    return pl.when((expr >= DCGM_FP64_BLANK) | expr.is_between(DCGM_INT32_BLANK, DCGM_INT32_BLANK + 15)).then(None).otherwise(expr)


def sample_checks(ts: pl.Expr, util: pl.Expr | None, ingested_at: datetime) -> list[tuple[pl.Expr, pl.Expr | str]]:
    """Reasons to quarantine a GPU sample: no time, a time in the future, impossible utilization."""
    horizon = (ingested_at.astimezone(UTC) + FUTURE_TOLERANCE).replace(tzinfo=None)
    checks: list[tuple[pl.Expr, pl.Expr | str]] = [
        (ts.is_null(), "no valid timestamp"),
        (ts.dt.replace_time_zone(None) > pl.lit(horizon), pl.format("timestamp {} is in the future", ts.dt.to_string("%Y-%m-%dT%H:%M:%SZ"))),
    ]
    if util is not None:
        checks.append(((util < 0) | (util > 100), pl.format("utilization out of 0–100: {}", util)))
    return checks


# A log's clock stepping back this far or further is the autumn clock change (an hour less the
# sampling interval), not jitter between GPUs.
FALL_BACK_STEP = timedelta(minutes=30)


class LocalClock:
    """A log's local wall-clock times → UTC, in file order across its frames.

    At the autumn clock change a local log repeats an hour (02:00–02:59 twice in Europe/Berlin).
    Read alone, each repeated time is ambiguous; read in order, the second pass comes after the clock
    stepped back. So a time at or before the time the clock last stepped back from is the later of
    its two readings, and every other the earlier. Without this both passes fold onto the first
    hour: its samples count twice and the real hour after has none. A time that does not exist (the
    spring gap) is null and quarantined as no valid time. One clock per file: it keeps the last time
    read and the last step back across the file's frames (two values, not rows)."""

    def __init__(self, timezone: str):
        self.timezone = timezone
        self.last_time: datetime | None = None
        self.stepped_back_from: datetime | None = None

    def to_utc(self, frame: pl.DataFrame, local: str) -> pl.Series:
        """The frame's column `local` (naive wall-clock datetimes, file order) in UTC; advances the clock."""
        naive = frame.get_column(local)
        if self.timezone == "UTC":
            return naive.dt.replace_time_zone("UTC")
        previous = naive.shift(1).fill_null(strategy="forward")
        if self.last_time is not None:
            previous = previous.fill_null(self.last_time)
        steps = frame.select(pl.when(naive <= previous - FALL_BACK_STEP).then(previous).alias("from")).to_series()
        stepped_from = steps.fill_null(strategy="forward")
        if self.stepped_back_from is not None:
            stepped_from = stepped_from.fill_null(self.stepped_back_from)
        later = (naive <= stepped_from).fill_null(False)
        utc = frame.select(naive.dt.replace_time_zone(
            self.timezone, ambiguous=pl.when(pl.lit(later)).then(pl.lit("latest")).otherwise(pl.lit("earliest")),
            non_existent="null").dt.convert_time_zone("UTC")).to_series()
        if (seen := naive.drop_nulls()).len():
            self.last_time = seen[-1]
        if (stepped := steps.drop_nulls()).len():
            self.stepped_back_from = stepped[-1]
        return utc
