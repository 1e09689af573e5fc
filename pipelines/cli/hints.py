"""Commands the CLI prints for the user to run next, spelled so they run as printed: with this
installation's own Python and `finops` (absolute paths: the system Python has no duckdb, and the
virtual environment need not be activated), and quoted for a POSIX shell."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def python_executable() -> str:
    # sys.executable keeps the virtual environment's own path (not the base interpreter it links to).
    return sys.executable or "python3"


def python_command() -> str:
    return shlex.quote(python_executable())


def finops_command() -> str:
    """`finops` as this installation has it: the script beside this Python, else the module."""
    script = Path(python_executable()).parent / "finops"
    if script.is_file():
        return shlex.quote(str(script))
    return f"{python_command()} -m pipelines.cli.main"


def ui_command() -> str:
    """The Dagster UI over this code location (what `make ui` runs, from any folder)."""
    if (REPO / "Makefile").is_file():
        return f"make -C {shlex.quote(str(REPO))} ui"
    dagster = Path(python_executable()).parent / "dagster"
    return f"{shlex.quote(str(dagster))} dev -m pipelines.orchestration.definitions -h 127.0.0.1 -p 3000"


def _shell_double_quoted(text: str) -> str:
    """`text` inside double quotes for a POSIX shell: \\, ", $ and ` escaped (the Python code keeps
    its single-quoted SQL literals readable, which single-quoting the whole would not)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    return f'"{escaped}"'


def open_warehouse_command(warehouse: Path, sql: str = "FROM marts.spend_by_phase WHERE period = 'all'") -> str:
    """A shell command that opens the warehouse read-only and prints `sql`'s result."""
    code = f"import duckdb; print(duckdb.connect({str(warehouse)!r}, read_only=True).sql({sql!r}))"
    return f"{python_command()} -c {_shell_double_quoted(code)}"


def describe_table_command(warehouse: Path, table: str = "core.cost_lines") -> str:
    """A shell command that lists `table`'s columns with their descriptions (COMMENT ON)."""
    schema, name = table.split(".", 1)
    sql = (f"SELECT column_name, data_type, comment FROM duckdb_columns() "
           f"WHERE schema_name = '{schema}' AND table_name = '{name}' ORDER BY column_index")
    code = (f"import duckdb; duckdb.connect({str(warehouse)!r}, read_only=True).sql({sql!r})"
            f".show(max_width=200, max_rows=200, max_col_width=120)")
    return f"{python_command()} -c {_shell_double_quoted(code)}"
