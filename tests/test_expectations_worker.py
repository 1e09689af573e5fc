"""The Great Expectations worker: a run's suites judged in a child process that imported
great_expectations on the other core, with the same outcomes as in the run's own process, and a
run that goes on (and fails) as before when the worker is gone or the suite raises."""

import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from pipelines.orchestration import expectations
from pipelines.orchestration.checks import ALLOWED_VALUE_EXPECTATIONS, REQUIRED_EXPECTATIONS

BETWEEN = [("ExpectColumnValuesToBeBetween", {"column": "max_util_pct", "min_value": 0, "max_value": 100})]


@pytest.fixture
def worker(monkeypatch):
    # The worker imports great_expectations at nice 10, below everything else: on a machine running
    # other work besides the suite its first answer took over the run's 120 s (a run then validates
    # in its own process, as designed); these tests are about the worker's answer, so they wait.
    monkeypatch.setattr(expectations, "WORKER_TIMEOUT_S", 900.0)
    started = expectations.ExpectationsWorker()
    expectations._worker = started
    yield started
    expectations.stop_worker()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.split()[1] == "Z" for line in status if line.startswith("State:"))  # a zombie has exited
    except FileNotFoundError:
        return True


def test_the_worker_judges_as_the_run_would(worker):
    frame = pd.DataFrame({"host": ["a", "b"], "max_util_pct": [99.5, 130.0]})
    outcome = expectations.validate(frame, BETWEEN, "gpu_samples")
    assert worker.alive  # answered by the worker, not the fallback
    assert outcome == expectations.validate_here(frame, BETWEEN, "gpu_samples")
    assert not outcome.success and outcome.evaluated == 1
    assert outcome.failures == [{"expectation": "ExpectColumnValuesToBeBetween", "column": "max_util_pct",
                                 "unexpected_count": 1, "sample": ["130.0"]}]
    allowed = pd.DataFrame({"ChargeCategory": ["Usage", "Bogus"], "PricingCategory": ["Standard"] * 2,
                            "ChargeFrequency": ["Usage-Based"] * 2, "ServiceCategory": ["Compute"] * 2})
    assert expectations.validate(allowed, ALLOWED_VALUE_EXPECTATIONS, "allowed").failures[0]["column"] == "ChargeCategory"
    patterns = pd.DataFrame({c: [1] for _, kw in REQUIRED_EXPECTATIONS for c in [kw["column"]]})
    assert expectations.validate(patterns, REQUIRED_EXPECTATIONS, "required").success


def test_a_dead_worker_leaves_the_suite_to_the_run(worker):
    worker.process.kill()
    worker.process.wait()
    frame = pd.DataFrame({"host": ["a"], "max_util_pct": [101.0]})
    outcome = expectations.validate(frame, BETWEEN, "gpu_samples")
    assert not outcome.success and outcome.failures[0]["unexpected_count"] == 1
    assert not worker.alive


def test_a_suite_that_raises_raises_in_the_run(worker):
    frame = pd.DataFrame({"host": ["a"], "max_util_pct": [50.0]})
    with pytest.raises(AttributeError):  # no such expectation: GE's own error, raised here with its traceback
        expectations.validate(frame, [("ExpectNoSuchThing", {"column": "host"})], "broken")
    assert not worker.alive


def test_stopping_ends_the_worker(worker):
    pid = worker.process.pid
    expectations.stop_worker()
    assert _gone(pid) and expectations._worker is None


def test_a_killed_run_leaves_no_worker_behind(tmp_path):
    # The run's process dies with kill -9: the worker reads the end of its request pipe and exits.
    script = textwrap.dedent("""
        import os, signal, sys
        from pipelines.orchestration.expectations import ExpectationsWorker
        worker = ExpectationsWorker()
        print(worker.process.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == -signal.SIGKILL
    pid = int(run.stdout.split()[0])
    deadline = time.monotonic() + 120  # it notices once its import is done
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _gone(pid), f"worker {pid} outlived the run"


def test_start_worker_is_a_no_op_once_great_expectations_is_imported_here():
    import great_expectations  # noqa: F401

    assert expectations.start_worker() is None and expectations._worker is None


def test_the_models_step_lets_the_worker_go_after_the_last_table_great_expectations_judges():
    from pipelines.orchestration.assets import last_table_judged_by_expectations
    from pipelines.orchestration.checks import CHECKS
    from pipelines.warehouse.models import sql_model_order

    every_check = {c.key for c in CHECKS}
    assert {c.table for c in CHECKS if c.expectations} == {"core.cost_lines", "core.gpu_samples"}
    assert last_table_judged_by_expectations(sql_model_order(), every_check) == "core.gpu_samples"
    only_billing = {c.key for c in CHECKS if c.table == "core.cost_lines"}
    assert last_table_judged_by_expectations(sql_model_order(), only_billing) == "core.cost_lines"
    assert last_table_judged_by_expectations(["marts.daily_cost"], every_check) is None
