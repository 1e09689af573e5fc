"""The `finops` command line: the user's contract (see README)."""

import json
import shutil
import warnings
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pipelines.settings import DEMO_DIR, FinopsSettings

app = typer.Typer(help="gpu-finops: AI (GPU) spend from invoices and telemetry, attributed to ML phases.",
                  no_args_is_help=True, add_completion=False)
# A terminal gets its own width; a pipe or log file gets one wide enough for the phase table.
console = Console(width=None if sys.stdout.isatty() else 140)
# Dagster flags some of its own APIs it calls internally as beta; that is not the user's concern.
warnings.filterwarnings("ignore", message=".*include_sources.*")


def _run(landing: Path, warehouse: Path, reports: Path | None, settings: FinopsSettings) -> int:
    from pipelines.runner import run_graph
    from pipelines.summary import print_summary, summary_dict

    started = time.perf_counter()
    with console.status("running the asset graph (ingest → core → marts, with checks)…"):
        outcome = run_graph(settings, warehouse)
    elapsed = time.perf_counter() - started
    summary = summary_dict(warehouse)
    print_summary(console, summary, warehouse, elapsed)
    for name in outcome.warned_checks:
        console.print(f"[yellow]check warned:[/] {name}")
    for name in outcome.failed_checks:
        console.print(f"[red]check failed:[/] {name}")
    if reports:
        reports.mkdir(parents=True, exist_ok=True)
        (reports / "run_summary.json").write_text(json.dumps(summary, indent=2, default=str))
        console.print(f"run summary written to {reports / 'run_summary.json'}")
    if not outcome.success:
        console.print("[red]the run did not complete cleanly; open `make ui` or the logs above for details[/]")
        return 1
    return 0


@app.command()
def run(
    landing: Annotated[Path, typer.Option(help="Folder of exports and telemetry (read recursively).", exists=True, file_okay=False)],
    warehouse: Annotated[Path, typer.Option(help="DuckDB file to create or update.")],
    reports: Annotated[Path | None, typer.Option(help="Folder for the run summary.")] = None,
    timezone: Annotated[str, typer.Option(help="Time zone of telemetry written in local time.")] = "UTC",
    reporting_currency: Annotated[str, typer.Option(help="Currency every amount is also reported in.")] = "USD",
    fx_rates: Annotated[Path | None, typer.Option(help="Your own FX rates CSV (rate_date,from_currency,to_currency,rate,source).",
                                                  exists=True, dir_okay=False)] = None,
    phase_rules: Annotated[Path | None, typer.Option(help="Your own phase rules YAML, replacing the bundled ones.",
                                                     exists=True, dir_okay=False)] = None,
) -> None:
    """Run the whole graph over any folder of exports and telemetry."""
    settings = FinopsSettings(landing_dir=str(landing.resolve()), timezone=timezone,
                              reporting_currency=reporting_currency.upper(),
                              fx_rates_file=str(fx_rates.resolve()) if fx_rates else None,
                              phase_rules_file=str(phase_rules.resolve()) if phase_rules else None)
    raise typer.Exit(_run(landing, warehouse.resolve(), reports, settings))


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Folder for the scenario's landing files, warehouse and truths.")] = DEMO_DIR,
    seed: Annotated[int, typer.Option(help="Seed of the generated scenario.")] = 7,
) -> None:
    """Write the bundled scenario and run the whole graph on it."""
    from pipelines.demo_scenario import TELEMETRY_TZ, write_scenario

    out = out.resolve()
    # The demo always starts clean: files of an earlier scenario version must not mix with this one.
    shutil.rmtree(out / "landing", ignore_errors=True)
    for stale in (out / "warehouse.duckdb", out / "warehouse.duckdb.wal"):
        stale.unlink(missing_ok=True)
    with console.status("writing the bundled scenario…"):
        truths = write_scenario(out, seed)
    console.print(f"scenario written to {out / 'landing'} ({truths['rows']['cost_lines']} charge lines, "
                  f"{truths['rows']['gpu_samples']:,} GPU samples, {truths['rows']['workloads']} workloads)")
    settings = FinopsSettings(landing_dir=str(out / "landing"), timezone=TELEMETRY_TZ, reporting_currency="USD")
    raise typer.Exit(_run(out / "landing", out / "warehouse.duckdb", out / "reports", settings))


@app.command()
def connectors() -> None:
    """List the registered connectors and the files each recognises."""
    from connectors.registry import all_connectors

    table = Table("name", "kind", "recognises", title="registered connectors")
    for c in all_connectors():
        table.add_row(c.name, c.kind, c.recognises)
    console.print(table)


def main() -> None:
    sys.exit(app())


if __name__ == "__main__":
    main()
