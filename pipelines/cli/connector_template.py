"""`finops new-connector`: a connector package that works as written, to start a new source from.

The billing template reads a GPU cloud's invoice CSV (instance, GPU model, GPU count, hours,
amount in USD, start, end) through the connector kit (connectors.kit), registers itself through the
`gpu_finops.connectors` entry point, and ships a fixture and a test that runs the contract suite.
"""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATE_KINDS = ("billing",)
NAME = re.compile(r"[a-z][a-z0-9_]{1,39}")


def check_connector_name(value: str) -> str:
    """A connector name: lowercase letters, digits and underscores, starting with a letter, 2–40 long,
    and not a built-in connector's name."""
    if not NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a connector name: lowercase letters, digits and _, starting with a letter, 2-40 long")
    from connectors.registry import builtin_connectors

    taken = next((c for c in builtin_connectors() if c.name == value), None)
    if taken is not None:
        # A mapping's connector has its file as `source`; a built-in has none.
        whose = f"the mapping {taken.source}'s" if getattr(taken, "source", None) else "a built-in connector's"
        raise ValueError(f"{value!r} is {whose} name; choose another")
    return value


def check_template_kind(value: str) -> str:
    if value not in TEMPLATE_KINDS:
        raise ValueError(f"no template for kind {value!r} yet; one of: {', '.join(TEMPLATE_KINDS)}")
    return value


FIXTURE_ROWS = 4
FIXTURE_TOTAL = "11404.97"
FIXTURE = """\
instance_id,gpu_model,gpu_count,hours,amount_usd,start,end
i-h100-01,H100 80GB,8,24,478.08,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z
i-h100-02,H100 80GB,8,720,10886.40,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z
i-a100-03,A100 40GB,4,12.5,39.50,2026-09-03T06:00:00Z,2026-09-03T18:30:00Z
i-l40s-04,L40S,1,1,0.99,2026-09-04T10:00:00Z,2026-09-04T11:00:00Z
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "gpu-finops connector: {title} invoices"
requires-python = ">=3.11"
dependencies = ["gpu-finops"]  # the connector kit, connectors.kit (API 1.x)

[project.entry-points."gpu_finops.connectors"]
{name} = "{package}.connector:{cls}"

[tool.setuptools]
packages = ["{package}"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

CONNECTOR = '''\
"""{title}: a GPU cloud's invoice CSV, one line per instance and period.

Columns: instance_id, gpu_model, gpu_count, hours, amount_usd, start, end. Amounts are USD;
times carry an offset or are read in the run's --timezone. Written against connectors.kit API 1.x.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import (
    SOURCE_ROW,
    Connector,
    ReadContext,
    failed,
    first_reason,
    gpu_model_expr,
    header_fields,
    parse_money,
    parse_unit,
    parse_utc,
    split_rejected,
    stream_csv_as_strings,
    to_canonical,
)

PROVIDER = "{title}"
# The zone whose calendar month is an invoice's billing period, where the provider closes its months
# in its own (an invoice from 2026-10-01T00:00+09:00 is October's in "Asia/Tokyo", September's in
# UTC); None: the run's --timezone.
BILLING_TIMEZONE: str | None = None
COLUMNS = ("instance_id", "gpu_model", "gpu_count", "hours", "amount_usd", "start", "end")


class {cls}(Connector):
    name = "{name}"
    kind = "billing"
    recognises = "{title} invoice CSV with columns " + ", ".join(COLUMNS)
    # False: a newer file of a month replaces the month's lines (a re-exported month). When each file
    # is an invoice and the lines carry its id in InvoiceId, set True: the month's invoices add up and
    # one sent again replaces only its own lines (README, "Adding a source").
    invoices_are_deliveries = False

    def detect(self, path: Path, head: bytes) -> bool:
        return set(COLUMNS) <= set(header_fields(head))

    def missing_columns(self, head: bytes) -> list[str]:
        names = set(header_fields(head))
        return [c for c in COLUMNS if c not in names]

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        # Every value arrives as text, each row numbered in SOURCE_ROW (to_canonical makes it x_SourceRow).
        for frame in stream_csv_as_strings(path, ctx.source_file, ctx=ctx, connector=self.name):
            amount = parse_money("amount_usd")  # exact: never through a float
            gpus = pl.col("gpu_count").str.strip_chars().cast(pl.Int32, strict=False)
            hours = parse_unit("hours", "h")  # "12.5", "12.5h" or "750 min" alike
            start, end = parse_utc("start", ctx.timezone), parse_utc("end", ctx.timezone)
            reason = first_reason([
                (amount.is_null(), pl.format("amount_usd '{{}}' is not an amount", pl.col("amount_usd").fill_null(""))),
                (pl.col("instance_id").is_null(), "instance_id is empty"),
                (gpus.is_null() | (gpus < 1), pl.format("gpu_count '{{}}' is not a whole number ≥ 1", pl.col("gpu_count").fill_null(""))),
                (hours.is_null() | failed("hours", hours) | (hours < 0), pl.format("hours '{{}}' is not a duration", pl.col("hours").fill_null(""))),
                (start.is_null(), pl.format("start '{{}}' is not a timestamp", pl.col("start").fill_null(""))),
                (end.is_null(), pl.format("end '{{}}' is not a timestamp", pl.col("end").fill_null(""))),
                (end < start, "end is before start"),
            ])
            # Rows with a reason go to the quarantine; `amount` declares the money the file states,
            # so the run can check loaded + quarantined = stated, to the last decimal, and `currency`
            # the currency it is in (a column, where the file has one), so it is never added to another's.
            accepted = split_rejected(frame, reason, ctx, self.name, list(COLUMNS), amount=amount, currency=pl.lit("USD"))
            if not accepted.height:
                continue
            # The billing period: the charge's calendar month in the billing zone (else --timezone).
            month = start.dt.convert_time_zone(BILLING_TIMEZONE or ctx.timezone).dt.truncate("1mo")
            card_hours = hours * gpus.cast(pl.Decimal(28, 10))
            out = accepted.select(
                amount.alias("BilledCost"), amount.alias("EffectiveCost"), amount.alias("ListCost"),
                amount.alias("x_SourceCost"),  # the amount as the file states it: what reconciles
                pl.lit("USD").alias("BillingCurrency"),
                pl.lit("Usage").alias("ChargeCategory"), pl.lit("Usage-Based").alias("ChargeFrequency"),
                start.alias("ChargePeriodStart"), end.alias("ChargePeriodEnd"),
                month.dt.convert_time_zone("UTC").alias("BillingPeriodStart"),
                month.dt.offset_by("1mo").dt.convert_time_zone("UTC").alias("BillingPeriodEnd"),
                card_hours.alias("ConsumedQuantity"), pl.lit("GPU-Hours").alias("ConsumedUnit"),
                card_hours.alias("PricingQuantity"), pl.lit("GPU-Hours").alias("PricingUnit"),
                pl.lit(PROVIDER).alias("ProviderName"), pl.lit(PROVIDER).alias("PublisherName"),
                pl.lit(PROVIDER).alias("InvoiceIssuerName"),
                pl.lit("Compute").alias("ServiceCategory"), pl.lit("GPU Instances").alias("ServiceName"),
                pl.col("instance_id").str.strip_chars().alias("ResourceId"),
                pl.lit("GPU instance").alias("ResourceType"),
                pl.format("{{}}x {{}}", gpus, pl.col("gpu_model")).alias("ChargeDescription"),
                gpu_model_expr(pl.col("gpu_model")).alias("x_GpuModel"), gpus.alias("x_GpuCount"),
                pl.col(SOURCE_ROW),
            )
            yield to_canonical(out, self.kind, self.name, ctx)
'''

TEST = '''\
"""The connector passes the gpu-finops connector contract on its fixture, and reads it to the cent."""

from decimal import Decimal
from datetime import UTC, datetime
from pathlib import Path

from connectors.kit import ReadContext
from connectors.kit_contract import contract_tests

from {package}.connector import {cls}

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "{fixture}"

# One test per contract check: detection, every row accounted for, money reconciles, required
# columns filled, re-reads identical, truncation and corruption raise only ConnectorError.
test_contract = contract_tests({cls}, FIXTURE, rows={rows}, expected_total="{total}")


def test_fixture_loads_every_line_to_the_cent():
    ctx = ReadContext(source_file=FIXTURE.name, ingested_at=datetime.now(UTC))
    batches = list({cls}().read(FIXTURE, ctx))
    assert sum(b.num_rows for b in batches) == {rows} and not ctx.quarantined
    assert sum(v for b in batches for v in b.column("BilledCost").to_pylist()) == Decimal("{total}")
    assert [m for b in batches for m in b.column("x_GpuModel").to_pylist()][0] == "H100-80GB"
'''

README = """\
# {dist}

A gpu-finops connector for {title} invoices (CSV: instance_id, gpu_model, gpu_count, hours,
amount_usd, start, end), written with `finops new-connector`.

    pip install -e .                 # registers `{name}` through the gpu_finops.connectors entry point
    finops connectors                # lists it
    pytest                           # the connector contract on fixtures/{fixture}
    finops run --landing fixtures --warehouse /tmp/{name}.duckdb
"""


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_") if part) + "Connector"


def write_package(name: str, kind: str, out: Path) -> list[Path]:
    """Write the package for connector `name` of `kind` into `out` (new or empty); the files written."""
    check_template_kind(kind)
    package = f"finops_{name}"
    values = dict(name=name, package=package, cls=class_name(name), dist=f"finops-connector-{name.replace('_', '-')}",
                  title=name.replace("_", " ").title(), fixture=f"{name}-invoice-2026-09.csv", rows=FIXTURE_ROWS,
                  total=FIXTURE_TOTAL)
    files = {
        "pyproject.toml": PYPROJECT.format(**values),
        "README.md": README.format(**values),
        f"{package}/__init__.py": f'"""gpu-finops connector {name}."""\n',
        f"{package}/connector.py": CONNECTOR.format(**values),
        f"fixtures/{values['fixture']}": FIXTURE,
        f"tests/test_{name}.py": TEST.format(**values),
    }
    written = []
    for relative, text in files.items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
