"""The `finops` command line: the user's contract (see README)."""

import gc
import json
import shlex
import shutil
import sys
import time
import warnings
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from pipelines.ingest import progress
from pipelines.settings import DEMO_DIR, FinopsSettings, check_currency, check_timezone, finding_kinds, parse_iso_date
from pipelines.text import for_terminal
from pipelines.cli.hints import finops_command, python_command, ui_command

# Exit codes (README, "Exit codes"): 0 done; 1 the run or command failed, or a file did not load;
# 2 a bad argument, refused before any work; 66 the landing folder holds no files (sysexits EX_NOINPUT);
# 75 the warehouse is busy (sysexits EX_TEMPFAIL, `--no-wait`).
EXIT_USAGE = 2
EXIT_NO_INPUT = 66


class OneLineRefusals(TyperGroup):
    """A bad argument is refused in one line on stderr, exit 2, before any work starts: no usage block,
    no boxed panel, no traceback. Everything else behaves as Typer's standalone mode."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except TyperException as exc:  # Typer's (vendored Click's) usage errors and bad parameters
            if type(exc).__name__ != "NoArgsIsHelpError":  # `finops` alone: its help is shown already
                ctx = getattr(exc, "ctx", None)
                where = ctx.command_path if ctx is not None else "finops"
                hint = f" (see {where} --help)" if ctx is not None else ""
                typer.echo(for_terminal(f"{where}: {exc.format_message()}{hint}"), err=True)
            sys.exit(getattr(exc, "exit_code", EXIT_USAGE))
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        # Non-standalone mode returns a command's value, or the code of the typer.Exit it raised.
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineRefusals, help="gpu-finops: AI (GPU) spend from invoices and telemetry, attributed to ML phases.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False)
# A terminal gets its own width; a pipe or log file gets one wide enough for the phase table.
console = Console(width=None if sys.stdout.isatty() else 140)
# Dagster flags some of its own APIs it calls internally as beta; that is not the user's concern.
warnings.filterwarnings("ignore", message=".*include_sources.*")


def _refusing(check):
    """A Typer parser from a settings check: its ValueError becomes a one-line refusal (exit 2)."""
    def parse(value):
        if not isinstance(value, str):  # a default already of the right type
            return value
        try:
            return check(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    parse.__name__ = check.__name__
    return parse


def check_finding_kind(value: str) -> str:
    """One of the kinds findings.hidden_costs holds (read from sql/findings/hidden_costs.sql)."""
    if value.strip().lower() not in finding_kinds():
        raise ValueError(f"{value!r} is not a finding kind; one of: {', '.join(finding_kinds())}")
    return value.strip().lower()


def check_engine(value: str) -> str:
    if value.strip().lower() not in ("duckdb", "spark"):
        raise ValueError(f"{value!r} is not an engine; one of: duckdb, spark")
    return value.strip().lower()


sql_engine_name = _refusing(check_engine)
iso_date = _refusing(parse_iso_date)
time_zone = _refusing(check_timezone)
currency = _refusing(check_currency)
finding_kind = _refusing(check_finding_kind)


def _refusing_file(check):
    """A Typer callback for a file option: the file read by `check`, whose ValueError becomes a
    one-line refusal (exit 2) before any work."""
    def callback(value: Path | None) -> Path | None:
        if value is not None:
            try:
                check(value)
            except ValueError as exc:
                raise typer.BadParameter(str(exc)) from None
        return value
    return callback


def _checked_params(path: Path) -> None:
    from models.tco import checked_params_file

    checked_params_file(path)


def _checked_claims(path: Path) -> None:
    from models.tco_claims import check_claims

    check_claims(path)


# A purchasing-parameters file whose every key is known and every value in range (a misspelt key
# would silently keep the default); a claims file every claim of which can be checked (a 0 the
# check divides by would end in a traceback). Each refused naming each problem.
tco_params_file = _refusing_file(_checked_params)
tco_claims_file = _refusing_file(_checked_claims)


def host_names_files(value: list[Path] | None) -> list[Path]:
    """Host names files every row of which names a host and a resource, each resource once across
    them, else a one-line refusal (exit 2): a half-read file would leave some instances unlinked unseen."""
    from models.host_names import load_host_names

    try:
        load_host_names(value or [])
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc)) from None
    return value or []


def _open_warehouse(warehouse: Path):
    """A read-only connection to an existing warehouse, or a clear exit when there is none."""
    from pipelines.warehouse.connection import connect

    if not warehouse.exists():
        console.print(Text.assemble(("no warehouse at ", "red"), for_terminal(warehouse),
                                    f": run `{finops_command()} demo` or `{finops_command()} run` first"), soft_wrap=True)
        raise typer.Exit(1)
    import duckdb

    try:
        return connect(warehouse, read_only=True)
    except duckdb.Error as exc:
        # Not a DuckDB file, or held open for writing by another process: DuckDB's own first line says which.
        console.print(Text.assemble(("cannot open the warehouse ", "red"), for_terminal(warehouse), ": ",
                                    for_terminal(str(exc).splitlines()[0])), soft_wrap=True)
        raise typer.Exit(1) from None


@contextmanager
def _hold_warehouse(warehouse: Path, wait: bool):
    """The warehouse's writer lock for a whole command: the run and the reads of what it published.
    Busy: wait (saying once for whom), or with --no-wait exit 75 with one line, touching nothing."""
    import duckdb

    from pipelines.warehouse.publish import EX_TEMPFAIL, WarehouseBusy, WarehouseOpenForWriting, foreign_writer, writer_lock

    def waiting(holder) -> None:
        console.print(Text(f"waiting for {warehouse}: another run is writing it ({holder.describe()})", style="yellow"),
                      soft_wrap=True)

    try:
        with writer_lock(warehouse, wait=wait, on_wait=waiting):
            try:
                detail = foreign_writer(warehouse.resolve())
            except duckdb.Error as exc:  # a file that is no DuckDB warehouse: DuckDB's first line says so
                print(f"finops: cannot write {warehouse}: {str(exc).splitlines()[0]}; not started", file=sys.stderr)
                raise typer.Exit(1) from None
            if detail:
                raise WarehouseOpenForWriting(warehouse, detail)
            yield
    except WarehouseBusy as busy:
        # One line on stderr, no traceback: the caller (cron, a script) retries later.
        print(f"finops: {busy.warehouse} is busy: being written by {busy.holder.describe()}; not started (--no-wait)",
              file=sys.stderr)
        raise typer.Exit(EX_TEMPFAIL) from None
    except WarehouseOpenForWriting as held:
        print(f"finops: {held}; not started", file=sys.stderr)
        raise typer.Exit(EX_TEMPFAIL) from None


def _run(landing: Path, warehouse: Path, reports: Path | None, settings: FinopsSettings, as_of=None,
         wait: bool = True, start_empty: bool = False, sql_engine=None, days=None) -> int:
    with _hold_warehouse(warehouse, wait):
        return _run_holding_lock(landing, warehouse, reports, settings, as_of, start_empty, sql_engine, days)


def _run_holding_lock(landing: Path, warehouse: Path, reports: Path | None, settings: FinopsSettings, as_of,
                      start_empty: bool, sql_engine=None, days=None) -> int:
    from pipelines.warehouse import run_state
    from pipelines.ingest.landing import landing_files

    as_of = as_of or settings.default_run_date()
    run_started_at = datetime.now(UTC)  # files this run read are recorded at or after it
    started = time.perf_counter()
    fingerprint = run_state.fingerprint(settings, as_of)
    if not start_empty and days is None and (why := run_state.nothing_new(landing, landing_files(landing), warehouse, fingerprint)):
        # The graph would rebuild the same tables and reports: a scheduled run with nothing new costs a
        # stat per file (and imports no Dagster: 0.6 s).
        console.print(Text(f"{why}: {for_terminal(warehouse)} and its reports are as they were"), soft_wrap=True)
        return 0
    from pipelines.orchestration.runner import run_graph
    from pipelines.cli.summary import (files_read_since, print_notices, print_problems, print_summary, run_notices, run_problems,
                                       summary_dict, oracle_forms_counted, invoiced_again_counted, nothing_recognised)

    if _whole_process:
        # What is imported by now (Dagster, the asset graph) lives as long as this command: kept out
        # of the garbage collector's passes, which otherwise walk it again and again (0.4 of a small
        # run's 1.1 s of collections). Not in a process that runs more than this command (tests).
        gc.freeze()
    if (before := run_state.last_timezone(warehouse)) and before != settings.timezone:
        # A file is read once (its content is its identity): another zone changes only the files read from now on.
        console.print(Text(f"--timezone {settings.timezone}: the files this warehouse already read keep the times they were "
                           f"read with ({before}); only new files are read in {settings.timezone}. To read every file in it, "
                           "build a new warehouse over the landing folder.", style="yellow"), soft_wrap=True)
    run_state.forget(warehouse)
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
                outcome = run_graph(settings, warehouse, as_of=as_of, start_empty=start_empty, sql_engine=sql_engine, days=days)
            finally:
                progress.set_reporter(None)
    else:
        outcome = run_graph(settings, warehouse, as_of=as_of, start_empty=start_empty, sql_engine=sql_engine, days=days)
    elapsed = time.perf_counter() - started
    if outcome.success and outcome.published and days is None:
        # A backfill builds the telemetry days of its range only: the new files' other days are left
        # for the next run, which must not take the backfill for a complete run and stop as having
        # nothing new. It recorded nothing (forgotten above), so that run runs the graph.
        run_state.record(warehouse, fingerprint, settings.timezone)
    summary = summary_dict(warehouse)
    print_summary(console, summary, warehouse, elapsed)
    for label, style, names in (("check warned: ", "yellow", outcome.warned_checks), ("check failed: ", "red", outcome.failed_checks)):
        for name in names:
            found = outcome.check_findings.get(name)
            console.print(Text.assemble((label, style), for_terminal(name + (f" — {found}" if found else ""))))
    reports = reports or Path(settings.reports_dir or warehouse.parent / "reports")
    reports.mkdir(parents=True, exist_ok=True)
    from pipelines.report.figures import json_value

    (reports / "run_summary.json").write_text(json.dumps(summary, indent=2, default=json_value))
    written = [reports / "run_summary.json"]
    if _write_tco_chart(warehouse, reports / "tco.svg", settings.tco_params_file):
        written.append(reports / "tco.svg")
    day_report = reports / as_of.isoformat()
    if (day_report / "report.html").exists():
        written.append(day_report / "report.html")
        headline = json.loads((day_report / "report.json").read_text())["headline"]
        console.print(Text(for_terminal(headline["title"]), style="bold"))
        for line in headline["lines"]:
            console.print(Text("  " + for_terminal(line)))
    console.print(Text("written: " + ", ".join(for_terminal(p) for p in written)))
    files = files_read_since(warehouse, run_started_at)
    # Rows set aside and warnings on files that loaded: the run passes, and says so.
    print_notices(console, run_notices(files) + oracle_forms_counted(warehouse, run_started_at)
                  + invoiced_again_counted(warehouse, run_started_at))
    # A file that failed, or whose every row was quarantined, fails the run: listed last, one per line.
    problems = run_problems(files) + nothing_recognised(warehouse, landing)
    print_problems(console, problems)
    if not outcome.published:
        console.print(Text(f"a step failed: {for_terminal(warehouse)} was left as it was before the run (the next run redoes the work)",
                           style="red"), soft_wrap=True)
    if not outcome.success:
        # The tracebacks above are Dagster's; the last lines say which step failed and why.
        for failure in outcome.failed_steps:
            console.print(Text.assemble(("step failed", "red"), f": {for_terminal(failure)}"), highlight=False, soft_wrap=True)
        console.print(Text(f"the run did not complete cleanly; see the logs above, or the Dagster UI: {ui_command()}", style="red"),
                      soft_wrap=True)
        return 1
    return 1 if problems else 0


def _write_tco_chart(warehouse: Path, target: Path, params_file: str | None) -> bool:
    from pipelines.analysis import tco
    from pipelines.warehouse.connection import connect

    # The published file, read under this command's writer lock: no run writes it in place, so this
    # read never meets a lock, and it sees what this run published.
    if not warehouse.exists():
        return False
    conn = connect(warehouse, read_only=True)
    try:
        result = tco.compute(conn, params_file)
        if (svg := result.chart_svg()) is None:
            console.print(Text(f"no purchasing chart: {result.no_chart_reason()}", style="yellow"))
            return False
        target.write_text(svg)
        return True
    except Exception as exc:  # no GPU usage measured: nothing to chart
        console.print(Text.assemble(("no purchasing chart: ", "yellow"), for_terminal(exc)))
        return False
    finally:
        conn.close()


@app.command()
def run(
    landing: Annotated[Path, typer.Option(help="Folder of exports and telemetry (read recursively).", exists=True, file_okay=False,
                                          envvar="FINOPS_LANDING")],
    warehouse: Annotated[Path, typer.Option(help="DuckDB file to create or update.", envvar="FINOPS_WAREHOUSE")],
    reports: Annotated[Path | None, typer.Option(help="Folder for the run summary and reports. Default: reports/ beside the "
                                                      "warehouse.", envvar="FINOPS_REPORTS")] = None,
    timezone: Annotated[str, typer.Option(help="IANA time zone of telemetry written in local time.", parser=time_zone,
                                          envvar="FINOPS_TIMEZONE")] = "UTC",
    reporting_currency: Annotated[str, typer.Option(help="ISO 4217 code of the currency every amount is also reported in.",
                                                    parser=currency, envvar="FINOPS_REPORTING_CURRENCY")] = "USD",
    fx_rates: Annotated[Path | None, typer.Option(help="Your own FX rates CSV (rate_date,from_currency,to_currency,rate,source).",
                                                  exists=True, dir_okay=False, envvar="FINOPS_FX_RATES")] = None,
    phase_rules: Annotated[Path | None, typer.Option(help="Your own phase rules YAML, replacing the bundled ones.",
                                                     exists=True, dir_okay=False, envvar="FINOPS_PHASE_RULES")] = None,
    charge_rules: Annotated[Path | None, typer.Option(help="Your own charge rules YAML (SKU, sub-account, resource, service).",
                                                      exists=True, dir_okay=False, envvar="FINOPS_CHARGE_RULES")] = None,
    planned_runs: Annotated[Path | None, typer.Option(help="Calendar of planned runs (YAML) whose spend is expected.",
                                                      exists=True, dir_okay=False, envvar="FINOPS_PLANNED_RUNS")] = None,
    price_catalog: Annotated[Path | None, typer.Option(help="Your own GPU and egress prices CSV, winning over the bundled catalog.",
                                                       exists=True, dir_okay=False, envvar="FINOPS_PRICE_CATALOG")] = None,
    host_names: Annotated[list[Path] | None, typer.Option(
        help="Your instances' host names, where telemetry names a host other than the bill's resource: a CSV of "
             "host,resource_id, or the JSON of `aws ec2 describe-instances` or `kubectl get nodes -o json`. Repeat it "
             "for several files.", exists=True, dir_okay=False, envvar="FINOPS_HOST_NAMES", callback=host_names_files)] = None,
    tco_params: Annotated[Path | None, typer.Option(help="Purchasing parameters YAML overriding the bundled ones.",
                                                    exists=True, dir_okay=False, envvar="FINOPS_TCO_PARAMS",
                                                    callback=tco_params_file)] = None,
    as_of: Annotated[date | None, typer.Option(help="The run's date (YYYY-MM-DD); it scores and reports the day two days "
                                                    "before. Default: today (UTC); over a demo's landing folder, the demo's date.", parser=iso_date, metavar="YYYY-MM-DD")] = None,
    webhook_url: Annotated[str | None, typer.Option(envvar="FINOPS_WEBHOOK_URL", show_envvar=True,
                                                    help="Slack-compatible webhook for the report's headline.")] = None,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="If another run is writing the warehouse, exit 75 at once "
                                                            "instead of waiting for it.")] = False,
    engine: Annotated[str, typer.Option(help="Engine of the SQL models: duckdb (one machine) or spark (needs the spark "
                                             "extra and Java).", parser=sql_engine_name, envvar="FINOPS_ENGINE")] = "duckdb",
    spark_master: Annotated[str, typer.Option(help="Spark master with --engine spark: local[N], spark://HOST:7077, yarn, "
                                                   "k8s://URL, sc://HOST:15002 (Spark Connect).",
                                              envvar="FINOPS_SPARK_MASTER")] = "local[2]",
    since: Annotated[date | None, typer.Option(help="Backfill from this UTC day (YYYY-MM-DD): rebuild the billing months and "
                                                    "telemetry days from it to --until, changed or not.", parser=iso_date,
                                               metavar="YYYY-MM-DD")] = None,
    until: Annotated[date | None, typer.Option(help="Last UTC day of the backfill (default: the run's date).",
                                               parser=iso_date, metavar="YYYY-MM-DD")] = None,
) -> None:
    """Run the whole graph over any folder of exports and telemetry, and write the day's report.

    A run reads new files, then rebuilds only the billing months and telemetry days they changed;
    --since/--until rebuild a range of days whatever changed (a backfill).

    Exit 0: done; 1: a file failed or had every row quarantined, no file was one a connector reads, or
    the run failed; 2: a bad argument
    (nothing is run); 66: the landing folder holds no files (nothing is run)."""
    from pipelines.ingest.landing import landing_files

    landing, warehouse = landing.resolve(), warehouse.resolve()
    if not landing_files(landing):
        # Most often a share not mounted or an export not yet delivered: nothing to load, so no graph and no report.
        console.print(Text(f"no files in {for_terminal(landing)}: nothing loaded, no report written"), style="yellow")
        raise typer.Exit(EXIT_NO_INPUT)
    reports = (reports or warehouse.parent / "reports").resolve()
    settings = FinopsSettings(landing_dir=str(landing), timezone=timezone, reporting_currency=reporting_currency,
                              fx_rates_file=str(fx_rates.resolve()) if fx_rates else None,
                              phase_rules_file=str(phase_rules.resolve()) if phase_rules else None,
                              charge_rules_file=str(charge_rules.resolve()) if charge_rules else None,
                              planned_runs_file=str(planned_runs.resolve()) if planned_runs else None,
                              price_catalog_file=str(price_catalog.resolve()) if price_catalog else None,
                              tco_params_file=str(tco_params.resolve()) if tco_params else None,
                              host_names_files=[str(p.resolve()) for p in host_names or []],
                              reports_dir=str(reports), webhook_url=webhook_url)
    from pipelines.ingest.fx_reference import ecb_currencies, rated_currencies

    rated = rated_currencies(settings.fx_rates_file)
    if rated is not None and settings.reporting_currency.upper() not in rated:
        # Every reported amount would be empty (no rate), and the findings' cost thresholds meaningless.
        typer.echo(f"finops run: --reporting-currency {settings.reporting_currency.upper()}: no exchange rate reaches it. "
                   f"The ECB's reference rates cover {', '.join(sorted(rated))}; for another, give your own rates with "
                   "--fx-rates FILE (rate_date,from_currency,to_currency,rate,source)", err=True)
        raise typer.Exit(EXIT_USAGE)
    thresholds, reporting = settings.thresholds_currency.upper(), settings.reporting_currency.upper()
    if rated is not None and reporting != thresholds and reporting not in ecb_currencies():
        # The ECB crosses its own currencies only: a rate of the user's alone may not reach USD.
        console.print(Text(f"note: the findings' money thresholds are stated in {thresholds} (a high leak from 500); "
                           f"{reporting} has no ECB rate, so they convert only where --fx-rates links {thresholds} and "
                           f"{reporting} (a {thresholds} to {reporting} rate); without one they read as {reporting}",
                           style="yellow"), soft_wrap=True)
    sql_engine = None
    if engine == "spark":
        from pipelines.engines.resource import SqlEngineResource
        from pipelines.engines.spark import spark_available

        ready, why = spark_available()
        if not ready:
            typer.echo(f"finops run: --engine spark: {why}", err=True)
            raise typer.Exit(EXIT_USAGE)
        sql_engine = SqlEngineResource(engine="spark", spark_master=spark_master)
    days = None
    if since or until:
        first, last = since or until, until or as_of or settings.default_run_date()
        if last < first:
            typer.echo(f"finops run: --until {last} is before --since {first}", err=True)
            raise typer.Exit(EXIT_USAGE)
        days = (first, last)
    raise typer.Exit(_run(landing, warehouse, reports, settings, as_of, wait=not no_wait, sql_engine=sql_engine, days=days))


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

    from pipelines.demo.scenario import TELEMETRY_TZ, write_scenario

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
    date_: Annotated[date | None, typer.Option("--date", help="The report's date (YYYY-MM-DD); it covers the day two days "
                                                            "before. Default: two days after the last day with charges.",
                                               parser=iso_date, metavar="YYYY-MM-DD")] = None,
    warehouse: Annotated[Path, typer.Option(help="Warehouse to read.", envvar="FINOPS_WAREHOUSE")] = DEMO_DIR / "warehouse.duckdb",
    out: Annotated[Path | None, typer.Option(help="Folder for <date>/report.html, report.md, report.json. Default: reports/ "
                                                  "beside the warehouse.", envvar="FINOPS_REPORTS")] = None,
    planned_runs: Annotated[Path | None, typer.Option(help="Calendar of planned runs (YAML), as the run used.",
                                                      exists=True, dir_okay=False, envvar="FINOPS_PLANNED_RUNS")] = None,
) -> None:
    """(Re)build any day's report from the warehouse (anomalies as last scored)."""
    from datetime import timedelta

    from pipelines.report.daily import AnomalyOptions, write_report
    from pipelines.settings import settings_from_env
    from pipelines.warehouse.connection import fetch_all

    settings = settings_from_env()[0]
    if settings.tco_params_file:  # refused before any work, as `run` and `tco` refuse it
        try:
            _checked_params(Path(settings.tco_params_file))
        except ValueError as exc:
            console.print(Text.assemble(("FINOPS_TCO_PARAMS: ", "red"), for_terminal(exc)))
            raise typer.Exit(2) from None
    # A report goes beside the warehouse it was built from, as the run's own reports do.
    out = out or warehouse.resolve().parent / "reports"
    # The demo keeps its calendar beside the warehouse; the run's own calendar wins when given.
    beside = warehouse.parent / "planned_runs.yaml"
    calendar = str(planned_runs) if planned_runs else (str(beside) if beside.exists() else None)
    options = AnomalyOptions.from_settings(settings, calendar)
    conn = _open_warehouse(warehouse)
    try:
        if date_:
            day = date_
        else:
            last = fetch_all(conn, "SELECT max(day) FROM marts.daily_cost")[0][0]
            if last is None:
                console.print("nothing to report: marts.daily_cost is empty")
                raise typer.Exit(1)
            day = last + timedelta(days=settings.anomaly_lag_days)
        folder, _ = write_report(conn, day, out, settings.tco_params_file, options)
    finally:
        conn.close()
    console.print(Text(f"report for {day}: {for_terminal(folder / 'report.html')}, report.md, report.json"))


@app.command()
def findings(
    warehouse: Annotated[Path, typer.Option(help="Warehouse to read.", envvar="FINOPS_WAREHOUSE")] = DEMO_DIR / "warehouse.duckdb",
    limit: Annotated[int, typer.Option(help="How many findings to show.", min=1)] = 20,
    kind: Annotated[str | None, typer.Option(help=f"Only this kind: {', '.join(finding_kinds())}.", parser=finding_kind,
                                             metavar="KIND")] = None,
) -> None:
    """The leaks found, one per thing to act on and month, ranked by the money that could have been saved."""
    from pipelines.report.daily import largest_leak, money
    from pipelines.warehouse.connection import fetch_dicts

    conn = _open_warehouse(warehouse)
    try:
        rows = fetch_dicts(conn, """
            SELECT * FROM findings.hidden_costs WHERE kind = coalesce(?, kind)
            ORDER BY avoidable_cost_reporting DESC NULLS LAST, wasted_cost_reporting DESC NULLS LAST, finding_id LIMIT ?""",
            [kind, limit])
        totals = fetch_dicts(conn, """
            SELECT kind, count(*) AS n, sum(items) AS items, sum(wasted_cost_reporting) AS wasted,
                   sum(avoidable_cost_reporting) AS avoidable, any_value(reporting_currency) AS currency
            FROM findings.hidden_costs WHERE kind = coalesce(?, kind) GROUP BY kind ORDER BY avoidable DESC NULLS LAST""", [kind])
    finally:
        conn.close()
    by_kind = Table("kind", "findings", "details", "wasted", "avoidable", title="hidden costs by kind (reporting currency)")
    for t in totals:
        by_kind.add_row(Text(for_terminal(t["kind"])), str(t["n"]), str(t["items"]),
                        Text(for_terminal(money(t["wasted"], t["currency"]))), Text(for_terminal(money(t["avoidable"], t["currency"]))))
    console.print(by_kind)
    if rows:  # the largest of the kind asked for, when one was
        console.print(Text(for_terminal(largest_leak(rows[0]).replace("Largest leak", f"Largest {kind} leak" if kind else "Largest leak", 1)),
                           style="bold"))
    table = Table("#", "severity", "leak", "month", "wasted", "avoidable", "billed as", "what to do", title="findings, ranked",
                  show_lines=True)
    for r in rows:
        # Names and recommendations come from data: Text() shows them as typed, never as markup.
        table.add_row(str(r["rank"]), Text(for_terminal(r["severity"])),
                      Text(for_terminal(f"{r['title']}\n{r['kind']}/{r['subkind']}, {r['items']} detail(s)")),
                      Text(for_terminal(r["period"])),
                      Text(for_terminal(money(r["wasted_cost_reporting"], r["reporting_currency"]))),
                      Text(for_terminal(money(r["avoidable_cost_reporting"], r["reporting_currency"]))),
                      Text(for_terminal(money(r["avoidable_cost"], r["currency"]) + " avoidable")),
                      Text(for_terminal(r["recommendation"], multiline=True)))
    console.print(table)


@app.command("tco")
def tco_command(
    warehouse: Annotated[Path, typer.Option(help="Warehouse whose measured usage to price.",
                                            envvar="FINOPS_WAREHOUSE")] = DEMO_DIR / "warehouse.duckdb",
    params: Annotated[Path | None, typer.Option(help="Purchasing parameters YAML overriding the bundled ones.",
                                                exists=True, dir_okay=False, envvar="FINOPS_TCO_PARAMS",
                                                callback=tco_params_file)] = None,
    check: Annotated[bool, typer.Option("--check", help="Recompute the published claims from their inputs.")] = False,
    claims: Annotated[Path | None, typer.Option(help="Claims YAML to check instead of the bundled ones.",
                                                exists=True, dir_okay=False, callback=tco_claims_file)] = None,
    chart: Annotated[Path | None, typer.Option(help="Write the strategies and break-even chart to this SVG file.")] = None,
) -> None:
    """Compare purchasing strategies over the parameters' years (3 by default) for the GPU-hours actually used (and check published claims)."""
    if check:
        _print_claims(claims)
        if not warehouse.exists():
            return  # the claims need no warehouse
    from models.tco import one_off_counting
    from pipelines.analysis import tco

    conn = _open_warehouse(warehouse)
    try:
        result = tco.compute(conn, str(params) if params else None)
    except Exception as exc:  # an empty or older warehouse: say what is missing
        console.print(Text.assemble(("cannot price strategies: ", "red"), for_terminal(exc)))
        raise typer.Exit(1) from exc
    finally:
        conn.close()
    scenario_table, break_even_table, parameters = result.scenarios, result.break_even, result.params
    money = lambda v: "—" if v is None else f"{v:,.0f}"
    for model in [*result.gpu_models, tco.FLEET]:
        rows = result.model_rows(model)
        title = (f"purchasing strategies, fleet total ({parameters['currency']})" if model == tco.FLEET
                 else f"purchasing strategies ({parameters['currency']}, {model})")
        table = Table("strategy", "cards", "capex", "power / yr", "ops / yr", "rent / yr", "residual", f"{parameters['years']}-yr TCO",
                      "per busy GPU-h", "elasticity", title=Text(for_terminal(title)))
        for r in rows:
            table.add_row(Text(for_terminal(r["scenario"])), str(r["cards"]), money(r["capex"]), money(r["yearly_power"]),
                          money(r["yearly_ops"]), money(r["yearly_rent"]), money(r["residual"]),
                          money(r["tco"]) if r["tco"] is not None else Text(for_terminal(r["description"])),
                          "—" if r["cost_per_busy_gpu_hour"] is None else f"{r['cost_per_busy_gpu_hour']:.2f}",
                          Text(for_terminal(r["elasticity"])))
        console.print(table)
    best = tco.cheapest(scenario_table)
    if best:
        console.print(Text.assemble("cheapest for this usage profile: ", (for_terminal(best["scenario"]), "bold"),
                                    f" — {for_terminal(best['description'])}"))
    elif unpriced := tco.unpriced_models(scenario_table):
        console.print(Text(for_terminal("no strategy is priced for the whole fleet: no price for " + ", ".join(unpriced)
                                        + " (models.<gpu_model> in the TCO parameters)"), style="yellow"))
    else:
        console.print(Text("no strategy is priced: the only GPUs measured are of unknown model", style="yellow"))
    for key in result.unmatched_model_keys:
        console.print(Text(for_terminal(f"models.{key} in your parameters names no measured GPU model (measured: "
                                        + ", ".join(result.gpu_models) + ")"), style="yellow"))
    for note in tco.whole_terms_notes(scenario_table):
        console.print(Text(for_terminal(note)))
    if left_out := tco.unknown_left_out(scenario_table):
        console.print(Text(for_terminal(left_out), style="yellow"))
    crossings = Table("GPU model", "strategies", "break-even utilization", "cheaper below it", title="break-even fleet utilization")
    for b in break_even_table:
        if b["break_even_utilization"] is not None:
            crossings.add_row(Text(for_terminal(b["gpu_model"])), Text(for_terminal(f"{b['strategy_a']} vs {b['strategy_b']}")),
                              f"{b['break_even_utilization']:.1%}", Text(for_terminal(b["cheaper_below"])))
    console.print(crossings)
    runs = (parameters.get("annualize") or {}).get("one_off_runs_per_year", 1)
    if result.main_model != tco.UNKNOWN:
        console.print(Text(for_terminal(f"measured utilization of {result.main_model}: {result.utilization:.1%} of the card-hours "
                                        f"of its peak fleet (a year of recurring load, {one_off_counting(runs)})")))
    if converted := parameters.get("converted"):
        console.print(Text(for_terminal(f"the bundled amounts ({converted['keys']}) converted from {converted['from_currency']} "
                                        f"at {converted['rate']} ({converted['rate_date']})")))
    if chart and (svg := result.chart_svg()) is None:
        console.print(Text(f"no chart: {result.no_chart_reason()}", style="yellow"))
    elif chart:
        chart.parent.mkdir(parents=True, exist_ok=True)
        chart.write_text(svg)
        console.print(Text(f"chart written to {chart}"))


def _print_claims(claims_file: Path | None) -> None:
    from models.tco_claims import check_claims

    table = Table("claim", "stated", "recomputed", "follows", "working", "what would reproduce it",
                  title="published claims, recomputed from their inputs")
    for c in check_claims(claims_file):
        verdict = {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]cannot tell[/]"}[c.follows]
        recomputed = "—" if c.recomputed is None else format(c.recomputed, ".6g")
        # Claims come from a user's YAML: shown as text, never as markup.
        table.add_row(Text(for_terminal(c.text, multiline=True)), Text(for_terminal(f"{c.stated} {c.unit}")), recomputed, verdict,
                      Text(for_terminal(c.working, multiline=True)), Text(for_terminal(c.to_reproduce, multiline=True)))
    console.print(table)


@app.command()
def connectors() -> None:
    """List the registered connectors and the files each recognises."""
    from connectors.registry import all_connectors

    table = Table("name", "kind", "recognises", title="registered connectors")
    for c in all_connectors():
        # Plug-in text is shown as text, not markup, and without control characters.
        table.add_row(Text(for_terminal(c.name)), Text(for_terminal(c.kind)), Text(for_terminal(c.recognises, multiline=True)))
    console.print(table)


def _template_check(name: str):
    def check(value: str) -> str:
        from pipelines.cli import connector_template

        return getattr(connector_template, name)(value)
    check.__name__ = name
    return check


connector_name = _refusing(_template_check("check_connector_name"))
template_kind = _refusing(_template_check("check_template_kind"))


@app.command("new-connector")
def new_connector(
    name: Annotated[str, typer.Argument(help="The connector's name (lowercase letters, digits, _).", parser=connector_name,
                                        metavar="NAME")],
    kind: Annotated[str, typer.Option(help="Kind of records it reads (templates: billing).", parser=template_kind)] = "billing",
    out: Annotated[Path | None, typer.Option(help="Folder to write the package into, new or empty. Default: "
                                                  "./finops-connector-NAME.")] = None,
) -> None:
    """Write a connector package that works as written: pyproject with the entry point, a connector
    built on connectors.kit, a fixture and a test running the connector contract (README, "Adding a source")."""
    from pipelines.cli.connector_template import write_package

    out = out or Path(f"finops-connector-{name.replace('_', '-')}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise typer.BadParameter(f"{out} exists and is not an empty folder; nothing written", param_hint="'--out'")
    written = write_package(name, kind, out)
    # This installation's Python: a bare `pip`/`pytest` may be another environment's.
    target = shlex.quote(str(out))
    console.print(Text(f"wrote {len(written)} files to {for_terminal(out)}; next: {python_command()} -m pip install -e {for_terminal(target)} "
                       f"&& {python_command()} -m pytest {for_terminal(target)}"), soft_wrap=True)


_whole_process = False  # this command is the process (`finops …`), not a call inside a longer one


def main() -> None:
    global _whole_process
    _whole_process = True
    try:
        app()
    finally:
        # Skip the interpreter's last garbage collection over every object of the imported modules
        # (Dagster, Great Expectations, pandas): 1.0-1.5 s of every `finops run` on the 2-core machine,
        # freeing memory the process is about to give back whole. atexit handlers still run.
        gc.freeze()


if __name__ == "__main__":
    main()
