"""The `finops` command line: the user's contract (see README)."""

import json
import shutil
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from pipelines import progress
from pipelines.settings import DEMO_DIR, FinopsSettings

app = typer.Typer(help="gpu-finops: AI (GPU) spend from invoices and telemetry, attributed to ML phases.",
                  no_args_is_help=True, add_completion=False)
# A terminal gets its own width; a pipe or log file gets one wide enough for the phase table.
console = Console(width=None if sys.stdout.isatty() else 140)
# Dagster flags some of its own APIs it calls internally as beta; that is not the user's concern.
warnings.filterwarnings("ignore", message=".*include_sources.*")


def _open_warehouse(warehouse: Path):
    """A read-only connection to an existing warehouse, or a clear exit when there is none."""
    from pipelines.warehouse import connect

    if not warehouse.exists():
        console.print(Text.assemble(("no warehouse at ", "red"), str(warehouse), ": run `finops demo` or `finops run` first"))
        raise typer.Exit(1)
    return connect(warehouse, read_only=True)


@contextmanager
def _hold_warehouse(warehouse: Path, wait: bool):
    """The warehouse's writer lock for a whole command: the run and the reads of what it published.
    Busy: wait (saying once for whom), or with --no-wait exit 75 with one line, touching nothing."""
    from pipelines.warehouse_publish import EX_TEMPFAIL, WarehouseBusy, writer_lock

    def waiting(holder) -> None:
        console.print(Text(f"waiting for {warehouse}: another run is writing it ({holder.describe()})", style="yellow"),
                      soft_wrap=True)

    try:
        with writer_lock(warehouse, wait=wait, on_wait=waiting):
            yield
    except WarehouseBusy as busy:
        # One line on stderr, no traceback: the caller (cron, a script) retries later.
        print(f"finops: {busy.warehouse} is busy: being written by {busy.holder.describe()}; not started (--no-wait)",
              file=sys.stderr)
        raise typer.Exit(EX_TEMPFAIL) from None


def _run(landing: Path, warehouse: Path, reports: Path | None, settings: FinopsSettings, as_of=None,
         wait: bool = True, start_empty: bool = False) -> int:
    with _hold_warehouse(warehouse, wait):
        return _run_holding_lock(landing, warehouse, reports, settings, as_of, start_empty)


def _run_holding_lock(landing: Path, warehouse: Path, reports: Path | None, settings: FinopsSettings, as_of,
                      start_empty: bool) -> int:
    from pipelines.runner import run_graph
    from pipelines.summary import print_summary, summary_dict

    as_of = as_of or settings.default_run_date()
    started = time.perf_counter()
    if console.is_terminal:
        # Long loads show which file, how many rows and how fast; a pipe or log file gets none of it.
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task("loading landing files", total=None)

            def show(done: int, total: int, path: str, rows: int, mb_per_s: float) -> None:
                bar.update(task, completed=done, total=total,
                           description=f"{path}: {rows:,} rows at {mb_per_s:,.1f} MB/s")

            progress.set_reporter(show)
            try:
                outcome = run_graph(settings, warehouse, as_of=as_of, start_empty=start_empty)
            finally:
                progress.set_reporter(None)
    else:
        outcome = run_graph(settings, warehouse, as_of=as_of, start_empty=start_empty)
    elapsed = time.perf_counter() - started
    summary = summary_dict(warehouse)
    print_summary(console, summary, warehouse, elapsed)
    for name in outcome.warned_checks:
        console.print(Text.assemble(("check warned: ", "yellow"), name))
    for name in outcome.failed_checks:
        console.print(Text.assemble(("check failed: ", "red"), name))
    reports = reports or Path(settings.reports_dir or warehouse.parent / "reports")
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "run_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    written = [reports / "run_summary.json"]
    if _write_tco_chart(warehouse, reports / "tco.svg", settings.tco_params_file):
        written.append(reports / "tco.svg")
    day_report = reports / as_of.isoformat()
    if (day_report / "report.html").exists():
        written.append(day_report / "report.html")
        headline = json.loads((day_report / "report.json").read_text())["headline"]
        console.print(Text(headline["title"], style="bold"))
        for line in headline["lines"]:
            console.print(Text("  " + line))
    console.print(Text("written: " + ", ".join(str(p) for p in written)))
    if not outcome.published:
        console.print(Text(f"a step failed: {warehouse} was left as it was before the run (the next run redoes the work)",
                           style="red"), soft_wrap=True)
    if not outcome.success:
        console.print("[red]the run did not complete cleanly; open `make ui` or the logs above for details[/]")
        return 1
    return 0


def _write_tco_chart(warehouse: Path, target: Path, params_file: str | None) -> bool:
    from pipelines import tco
    from pipelines.warehouse import connect

    # The published file, read under this command's writer lock: no run writes it in place, so this
    # read never meets a lock, and it sees what this run published.
    if not warehouse.exists():
        return False
    conn = connect(warehouse, read_only=True)
    try:
        target.write_text(tco.compute(conn, params_file).chart_svg())
        return True
    except Exception as exc:  # no GPU usage measured: nothing to chart
        console.print(Text.assemble(("no purchasing chart: ", "yellow"), str(exc)))
        return False
    finally:
        conn.close()


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
    charge_rules: Annotated[Path | None, typer.Option(help="Your own charge rules YAML (SKU, sub-account, resource, service).",
                                                      exists=True, dir_okay=False)] = None,
    planned_runs: Annotated[Path | None, typer.Option(help="Calendar of planned runs (YAML) whose spend is expected.",
                                                      exists=True, dir_okay=False)] = None,
    as_of: Annotated[str | None, typer.Option(help="The run's date (YYYY-MM-DD); it scores and reports the day two days "
                                                   "before. Default: today (UTC); over a demo's landing folder, the demo's date.")] = None,
    webhook_url: Annotated[str | None, typer.Option(envvar="FINOPS_WEBHOOK_URL", show_envvar=True,
                                                    help="Slack-compatible webhook for the report's headline.")] = None,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="If another run is writing the warehouse, exit 75 at once "
                                                            "instead of waiting for it.")] = False,
) -> None:
    """Run the whole graph over any folder of exports and telemetry, and write the day's report."""
    from datetime import date as Date

    reports = (reports or warehouse.resolve().parent / "reports").resolve()
    settings = FinopsSettings(landing_dir=str(landing.resolve()), timezone=timezone,
                              reporting_currency=reporting_currency.upper(),
                              fx_rates_file=str(fx_rates.resolve()) if fx_rates else None,
                              phase_rules_file=str(phase_rules.resolve()) if phase_rules else None,
                              charge_rules_file=str(charge_rules.resolve()) if charge_rules else None,
                              planned_runs_file=str(planned_runs.resolve()) if planned_runs else None,
                              reports_dir=str(reports), webhook_url=webhook_url)
    raise typer.Exit(_run(landing, warehouse.resolve(), reports, settings, Date.fromisoformat(as_of) if as_of else None,
                          wait=not no_wait))


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Folder for the scenario's landing files, warehouse and truths.")] = DEMO_DIR,
    seed: Annotated[int, typer.Option(help="Seed of the generated scenario.")] = 7,
    control: Annotated[bool, typer.Option("--control", help="The control scenario: the same story without hidden costs.")] = False,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="If another run is writing the warehouse, exit 75 at once "
                                                            "instead of waiting for it.")] = False,
) -> None:
    """Write the bundled scenario and run the whole graph on it."""
    from datetime import date as Date

    from pipelines.demo_scenario import TELEMETRY_TZ, write_scenario

    out = out.resolve()
    warehouse = out / "warehouse.duckdb"
    # The landing folder is rewritten under the lock, so a run still reading it is not cut short.
    with _hold_warehouse(warehouse, wait=not no_wait):
        # The demo always starts clean: files of an earlier scenario version must not mix with this one.
        # Its warehouse is rebuilt from empty and replaces the old one only when done (readers keep it till then).
        shutil.rmtree(out / "landing", ignore_errors=True)
        with console.status("writing the bundled scenario…"):
            truths = write_scenario(out, seed, leaks=not control)
        console.print(f"scenario written to {out / 'landing'} ({truths['rows']['cost_lines']} charge lines, "
                      f"{truths['rows']['gpu_samples']:,} GPU samples, {truths['rows']['workloads']} workloads)")
        settings = FinopsSettings(landing_dir=str(out / "landing"), timezone=TELEMETRY_TZ, reporting_currency="USD",
                                  planned_runs_file=truths["planned_runs_file"], reports_dir=str(out / "reports"))
        # The scenario's "today": two days after its last billed day, so the report scores that day.
        code = _run(out / "landing", warehouse, out / "reports", settings, Date.fromisoformat(truths["report_date"]),
                    start_empty=True)
    raise typer.Exit(code)


@app.command()
def report(
    date_: Annotated[str | None, typer.Option("--date", help="The report's date (YYYY-MM-DD); it covers the day two days "
                                                           "before. Default: two days after the last day with charges.")] = None,
    warehouse: Annotated[Path, typer.Option(help="Warehouse to read.")] = DEMO_DIR / "warehouse.duckdb",
    out: Annotated[Path, typer.Option(help="Folder for <date>/report.html, report.md, report.json.")] = DEMO_DIR / "reports",
    planned_runs: Annotated[Path | None, typer.Option(help="Calendar of planned runs (YAML), as the run used.",
                                                      exists=True, dir_okay=False)] = None,
) -> None:
    """(Re)build any day's report from the warehouse (anomalies as last scored)."""
    from datetime import date as Date
    from datetime import timedelta

    from pipelines.report import AnomalyOptions, write_report
    from pipelines.settings import settings_from_env
    from pipelines.warehouse import fetch_all

    settings = settings_from_env()[0]
    # The demo keeps its calendar beside the warehouse; the run's own calendar wins when given.
    beside = warehouse.parent / "planned_runs.yaml"
    calendar = str(planned_runs) if planned_runs else settings.planned_runs_file or (str(beside) if beside.exists() else None)
    options = AnomalyOptions.from_settings(settings, calendar)
    conn = _open_warehouse(warehouse)
    try:
        if date_:
            day = Date.fromisoformat(date_)
        else:
            last = fetch_all(conn, "SELECT max(day) FROM marts.daily_cost")[0][0]
            if last is None:
                console.print("nothing to report: marts.daily_cost is empty")
                raise typer.Exit(1)
            day = last + timedelta(days=settings.anomaly_lag_days)
        folder, _ = write_report(conn, day, out, settings.tco_params_file, options)
    finally:
        conn.close()
    console.print(Text(f"report for {day}: {folder / 'report.html'}, report.md, report.json"))


@app.command()
def findings(
    warehouse: Annotated[Path, typer.Option(help="Warehouse to read.")] = DEMO_DIR / "warehouse.duckdb",
    limit: Annotated[int, typer.Option(help="How many findings to show.")] = 20,
    kind: Annotated[str | None, typer.Option(help="Only this kind: egress, slow_disk_idle, unused_gpu.")] = None,
) -> None:
    """The hidden costs found, ranked by the money that could have been saved."""
    from pipelines.warehouse import fetch_all, fetch_dicts

    conn = _open_warehouse(warehouse)
    try:
        rows = fetch_dicts(conn, """
            SELECT * FROM findings.hidden_costs WHERE kind = coalesce(?, kind)
            ORDER BY avoidable_cost_reporting DESC NULLS LAST, wasted_cost_reporting DESC NULLS LAST, finding_id LIMIT ?""",
            [kind, limit])
        totals = fetch_all(conn, """SELECT kind, count(*), sum(wasted_cost_reporting), sum(avoidable_cost_reporting), any_value(reporting_currency)
                                    FROM findings.hidden_costs GROUP BY kind ORDER BY 4 DESC""")
    finally:
        conn.close()
    by_kind = Table("kind", "findings", "wasted", "avoidable", title="hidden costs by kind (reporting currency)")
    for k, n, wasted, avoidable, currency in totals:
        by_kind.add_row(Text(k), str(n), Text(f"{wasted or 0:,.2f} {currency}"), Text(f"{avoidable or 0:,.2f} {currency}"))
    console.print(by_kind)
    table = Table("#", "severity", "kind", "resource", "from", "wasted", "avoidable", "what to do", title="findings, ranked",
                  show_lines=True)
    for n, r in enumerate(rows, start=1):
        # Resource names and recommendations come from data: Text() shows them as typed, never as markup.
        table.add_row(str(n), r["severity"], Text(f"{r['kind']}\n{r['subkind']}"), Text(r["resource"]),
                      r["period_start"].strftime("%Y-%m-%d %H:%M"),
                      Text(f"{r['wasted_cost']:,.2f} {r['currency']}"), Text(f"{r['avoidable_cost']:,.2f} {r['currency']}"),
                      Text(r["recommendation"]))
    console.print(table)


@app.command("tco")
def tco_command(
    warehouse: Annotated[Path, typer.Option(help="Warehouse whose measured usage to price.")] = DEMO_DIR / "warehouse.duckdb",
    params: Annotated[Path | None, typer.Option(help="Purchasing parameters YAML overriding the bundled ones.",
                                                exists=True, dir_okay=False)] = None,
    check: Annotated[bool, typer.Option("--check", help="Recompute the published claims from their inputs.")] = False,
    claims: Annotated[Path | None, typer.Option(help="Claims YAML to check instead of the bundled ones.",
                                                exists=True, dir_okay=False)] = None,
    chart: Annotated[Path | None, typer.Option(help="Write the strategies and break-even chart to this SVG file.")] = None,
) -> None:
    """Compare 3-year purchasing strategies for the GPU-hours actually used (and check published claims)."""
    if check:
        _print_claims(claims)
        if not warehouse.exists():
            return  # the claims need no warehouse
    from pipelines import tco

    conn = _open_warehouse(warehouse)
    try:
        result = tco.compute(conn, str(params) if params else None)
    except Exception as exc:  # an empty or older warehouse: say what is missing
        console.print(Text.assemble(("cannot price strategies: ", "red"), str(exc)))
        raise typer.Exit(1) from exc
    finally:
        conn.close()
    scenario_table, break_even_table, parameters = result.scenarios, result.break_even, result.params
    money = lambda v: "—" if v is None else f"{v:,.0f}"
    table = Table("strategy", "cards", "capex", "power / yr", "ops / yr", "rent / yr", "residual", f"{parameters['years']}-yr TCO",
                  "per busy GPU-h", "elasticity", title=f"purchasing strategies ({parameters['currency']}, {parameters['gpu_model']})")
    for r in scenario_table:
        table.add_row(r["scenario"], str(r["cards"]), money(r["capex"]), money(r["yearly_power"]), money(r["yearly_ops"]),
                      money(r["yearly_rent"]), money(r["residual"]), money(r["tco"]), f"{r['cost_per_busy_gpu_hour']:.2f}",
                      r["elasticity"])
    console.print(table)
    best = tco.cheapest(scenario_table)
    console.print(Text.assemble("cheapest for this usage profile: ", (best["scenario"], "bold"), f" — {best['description']}"))
    crossings = Table("strategies", "break-even utilization", "cheaper below it", title="break-even fleet utilization")
    for b in break_even_table:
        if b["break_even_utilization"] is not None:
            crossings.add_row(f"{b['strategy_a']} vs {b['strategy_b']}", f"{b['break_even_utilization']:.1%}", b["cheaper_below"])
    console.print(crossings)
    console.print(f"measured fleet utilization: {result.utilization:.1%} of the card-hours of the peak fleet")
    if chart:
        chart.parent.mkdir(parents=True, exist_ok=True)
        chart.write_text(result.chart_svg())
        console.print(Text(f"chart written to {chart}"))


def _print_claims(claims_file: Path | None) -> None:
    from models.tco_claims import check_claims

    table = Table("claim", "stated", "recomputed", "follows", "working", "what would reproduce it",
                  title="published claims, recomputed from their inputs")
    for c in check_claims(claims_file):
        verdict = {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]cannot tell[/]"}[c.follows]
        recomputed = "—" if c.recomputed is None else format(c.recomputed, ".6g")
        # Claims come from a user's YAML: shown as text, never as markup.
        table.add_row(Text(c.text), Text(f"{c.stated} {c.unit}"), recomputed, verdict, Text(c.working), Text(c.to_reproduce))
    console.print(table)


@app.command()
def connectors() -> None:
    """List the registered connectors and the files each recognises."""
    from connectors.registry import all_connectors

    table = Table("name", "kind", "recognises", title="registered connectors")
    for c in all_connectors():
        table.add_row(Text(c.name), Text(c.kind), Text(c.recognises))  # plug-in text is shown as text, not markup
    console.print(table)


def main() -> None:
    sys.exit(app())


if __name__ == "__main__":
    main()
