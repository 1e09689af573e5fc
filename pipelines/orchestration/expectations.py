"""Great Expectations suites for the core tables, run on frames read from the warehouse.

Importing great_expectations takes 3-4 s of one core on the 2-core machine, the largest fixed cost
of a run that checks a table, and the code location must load fast: it is imported only where it
is used. A run started by `run_graph` first starts a worker process (`ExpectationsWorker`) that
imports it on the other core while the run reads its files and builds its tables; `validate` then
hands the worker each frame to judge (a DuckDB reduction of a table: a few rows) over a pipe. An
import on a thread of the run's own process was measured slower: it holds the GIL. Without a
worker, or when the worker is gone or answers with an error, `validate` runs the suite here, so a
failure raises in the run with its own traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection

# How long to wait for the worker's answer before running the suite here: its import is seconds.
WORKER_TIMEOUT_S = 120.0


@dataclass
class ExpectationOutcome:
    success: bool
    failures: list[dict]
    evaluated: int


def validate(frame, expectations: list[tuple[str, dict]], name: str) -> ExpectationOutcome:
    """Run `(expectation class name, kwargs)` pairs on a pandas frame with an ephemeral context:
    in the worker when one is running, else here."""
    worker = _worker
    if worker is not None:
        outcome = worker.ask((frame, expectations, name))
        if outcome is not None:
            return outcome
    return validate_here(frame, expectations, name)


def import_great_expectations():
    """great_expectations, imported here (lazily: see the module docstring), with its analytics off.
    A process that runs many graphs (the test suite) calls it once, and then validates here."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations

    return great_expectations


# One ephemeral context per process and one batch definition per suite name, made at the first
# validation: the frame is a batch parameter, so each later validation only hands its frame over.
# A new context and data source per validation cost 0.3-0.4 s each, three a run.
_batch_definitions: dict[str, object] = {}
_context = None


def _batch_definition(name: str):
    global _context
    if name not in _batch_definitions:
        gx = import_great_expectations()
        if _context is None:
            from great_expectations.data_context.types.base import ProgressBarsConfig

            _context = gx.get_context(mode="ephemeral")
            _context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        source = _context.data_sources.add_pandas(f"{name}_source")
        _batch_definitions[name] = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
    return _batch_definitions[name]


def validate_here(frame, expectations: list[tuple[str, dict]], name: str) -> ExpectationOutcome:
    gx = import_great_expectations()
    batch = _batch_definition(name).get_batch(batch_parameters={"dataframe": frame})
    failures = []
    for expectation_name, kwargs in expectations:
        expectation = getattr(gx.expectations, expectation_name)(**kwargs)
        result = batch.validate(expectation)
        if not result.success:
            failures.append({
                "expectation": expectation_name,
                "column": kwargs.get("column"),
                "unexpected_count": result.result.get("unexpected_count"),
                "sample": [str(v) for v in (result.result.get("partial_unexpected_list") or [])[:5]],
            })
    return ExpectationOutcome(not failures, failures, len(expectations))


class ExpectationsWorker:
    """A child process that imports great_expectations at once and then validates what it is sent.

    Requests and answers are pickled over two pipes (multiprocessing's Connection: framed, with a
    timeout on reading). The child ends when its request pipe closes: when `stop` is called, and
    when this process dies however it dies, so a killed run leaves no worker behind."""

    def __init__(self) -> None:
        requests_read, requests_write = os.pipe()
        answers_read, answers_write = os.pipe()
        env = {**os.environ, "GX_ANALYTICS_ENABLED": "false", "PYTHONWARNINGS": "ignore"}
        try:
            # stdout and stderr closed to the terminal: the import's warnings are noise there, and
            # any error is the in-process suite's to raise.
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pipelines.orchestration.expectations", str(requests_read), str(answers_write)],
                pass_fds=(requests_read, answers_write), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=env)
        except BaseException:
            for fd in (requests_read, requests_write, answers_read, answers_write):
                os.close(fd)
            raise
        os.close(requests_read)
        os.close(answers_write)
        self._requests = Connection(requests_write, readable=False)
        self._answers = Connection(answers_read, writable=False)
        self._lock = threading.Lock()
        self.alive = True

    def ask(self, request) -> ExpectationOutcome | None:
        """The worker's outcome, or None when it cannot give one (gone, timed out, or the suite raised)."""
        with self._lock:
            if not self.alive:
                return None
            try:
                self._requests.send(request)
                if self._answers.poll(WORKER_TIMEOUT_S):
                    status, value = self._answers.recv()
                    if status == "ok":
                        return value
            except (OSError, EOFError):
                pass
            self._close()  # an error, a timeout or a dead worker: the run goes on without it
            return None

    def stop(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if not self.alive:
            return
        self.alive = False
        self._requests.close()
        self._answers.close()
        # Idle, still importing (nothing was checked) or stuck: nothing it holds is needed any more.
        self.process.kill()
        self.process.wait()


_worker: ExpectationsWorker | None = None


def start_worker() -> ExpectationsWorker | None:
    """Start this process's worker, unless one runs or great_expectations is imported here already
    (a second run in one process: validating here costs nothing then)."""
    global _worker
    if _worker is not None and _worker.alive:
        return _worker
    if "great_expectations" in sys.modules:
        return None
    _worker = ExpectationsWorker()
    return _worker


def stop_worker() -> None:
    global _worker
    if _worker is not None:
        _worker.stop()
        _worker = None


def _serve(requests_fd: int, answers_fd: int) -> None:
    # Below the run in priority: where the run keeps both cores busy (a large CUR's ingest), the import
    # waits for idle moments instead of taking a core from it.
    os.nice(10)
    requests = Connection(requests_fd, writable=False)
    answers = Connection(answers_fd, readable=False)
    # The worker judges pandas frames only: great_expectations imports PySpark when it is installed
    # (the Spark engine's dependency), 0.5 s of the import's 5 s of CPU; a None module reads as absent.
    sys.modules.setdefault("pyspark", None)
    import great_expectations  # noqa: F401 - the point of the worker: imported before the first request

    while True:
        try:
            frame, expectations, name = requests.recv()
        except (EOFError, OSError):
            return
        try:
            answers.send(("ok", validate_here(frame, expectations, name)))
        except Exception as exc:  # noqa: BLE001 - the caller runs the suite itself and raises it there
            answers.send(("error", f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    # Through the module's own name, so the outcomes it pickles are the class the run unpickles.
    from pipelines.orchestration.expectations import _serve as serve

    serve(int(sys.argv[1]), int(sys.argv[2]))
