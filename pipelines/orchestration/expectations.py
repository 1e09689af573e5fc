"""Great Expectations suites for the core tables, run on frames read from the warehouse.

great_expectations is imported inside the function: it takes seconds to import, and the code
location must load fast.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class ExpectationOutcome:
    success: bool
    failures: list[dict]
    evaluated: int


def validate(frame, expectations: list[tuple[str, dict]], name: str) -> ExpectationOutcome:
    """Run `(expectation class name, kwargs)` pairs on a pandas frame with an ephemeral context."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx  # lazily: see module docstring
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = context.data_sources.add_pandas(f"{name}_source")
    batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all").get_batch(
        batch_parameters={"dataframe": frame}
    )
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
