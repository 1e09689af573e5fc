"""Progress of long loads, for whoever is watching: the `finops` command plugs a rich progress
bar in when its output is a terminal; otherwise nothing is reported and logs stay quiet."""

from collections.abc import Callable

# (files done, files in all, path, rows, megabytes per second) → None
Reporter = Callable[[int, int, str, int, float], None]
_reporter: Reporter | None = None


def set_reporter(reporter: Reporter | None) -> None:
    global _reporter
    _reporter = reporter


def report(done: int, total: int, path: str, rows: int, mb_per_s: float) -> None:
    if _reporter is not None:
        _reporter(done, total, path, rows, mb_per_s)
