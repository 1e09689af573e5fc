"""Canonical Arrow schemas: the one definition of each kind of record.

Connectors emit record batches in these schemas; the warehouse creates its raw tables from them
(`duckdb_columns`), so a column added here reaches both without a second edit.
"""

from __future__ import annotations

import pyarrow as pa

from models.focus import FOCUS_COLUMNS, JSON, MONEY, PRICE, QUANTITY, TEXT, TIMESTAMP

MONEY_TYPE = pa.decimal128(38, 10)  # ±10^12 and beyond with 10 decimals: sums stay exact in DECIMAL(38, 10)
PRICE_TYPE = pa.decimal128(28, 12)
QUANTITY_TYPE = pa.decimal128(28, 10)
UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")

_KIND_TYPES = {
    MONEY: MONEY_TYPE,
    PRICE: PRICE_TYPE,
    QUANTITY: QUANTITY_TYPE,
    TEXT: pa.string(),
    JSON: pa.string(),
    TIMESTAMP: UTC_TIMESTAMP,
}

# Lineage carried by every loaded row: which connector read it, from which file and row, and when.
LINEAGE_FIELDS = (
    pa.field("x_Connector", pa.string(), nullable=False),
    pa.field("x_SourceFile", pa.string(), nullable=False),
    pa.field("x_SourceSha256", pa.string(), nullable=False),
    pa.field("x_SourceRow", pa.int64(), nullable=False),
    pa.field("x_IngestedAt", UTC_TIMESTAMP, nullable=False),
)

COST_LINE = pa.schema(
    [pa.field(c.name, _KIND_TYPES[c.kind]) for c in FOCUS_COLUMNS]
    + [
        pa.field("x_GpuModel", pa.string()),
        pa.field("x_GpuCount", pa.int32()),
        # The line's amount as the source file states it (its own cost column), for reconciliation.
        pa.field("x_SourceCost", MONEY_TYPE),
        # The provider's own id of the line (AWS identity/LineItemId), where it has one: the same
        # line in a later or final export restates it, whatever account or file name it came with.
        pa.field("x_SourceLineId", pa.string()),
        # Azure: which dataset the file is ('actual' | 'amortized') and the key that names one
        # charge alike in both, so the two merge into one row per charge (sql/macros.sql).
        pa.field("x_AzureDataset", pa.string()),
        pa.field("x_AzureChargeKey", pa.string()),
        # Columns of the source file that FOCUS does not define (provider `x_` columns included),
        # kept as one JSON object so nothing a provider sent is lost.
        pa.field("x_ExtraColumns", pa.string()),
        *LINEAGE_FIELDS,
    ]
)

GPU_SAMPLE = pa.schema(
    [
        pa.field("ts", UTC_TIMESTAMP, nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("gpu_uuid", pa.string()),
        pa.field("gpu_index", pa.int32()),
        pa.field("gpu_model", pa.string()),
        # MIG: a GPU instance is its own accounting unit.
        pa.field("mig_instance", pa.string()),
        pa.field("mig_profile", pa.string()),
        # Who used it, where the source knows (Kubernetes labels from dcgm-exporter, trace pods).
        pa.field("pod", pa.string()),
        pa.field("namespace", pa.string()),
        pa.field("container", pa.string()),
        # Busy signal in percent, and which metric it came from (never average different kinds).
        pa.field("util_pct", pa.float64()),
        pa.field("util_kind", pa.string()),
        pa.field("sm_active", pa.float64()),  # ratio 0–1, as DCGM reports it
        pa.field("mem_used_mib", pa.float64()),
        pa.field("mem_total_mib", pa.float64()),
        pa.field("power_w", pa.float64()),
        pa.field("energy_mj", pa.float64()),  # cumulative counter since boot
        pa.field("temperature_c", pa.float64()),
        pa.field("source", pa.string(), nullable=False),
        *LINEAGE_FIELDS,
    ]
)

WORKLOAD = pa.schema(
    [
        pa.field("workload_id", pa.string(), nullable=False),
        pa.field("name", pa.string()),
        # The phase the source states explicitly (a phase column or label); rules fill the rest.
        pa.field("phase", pa.string()),
        pa.field("host", pa.string()),
        pa.field("resource_id", pa.string()),
        pa.field("gpu_count", pa.int32(), nullable=False),
        # The cards those GPUs are, where the source names MIG profiles: a MIG instance as its
        # profile's share of the card (models.gpus.mig_card_share). NULL where it names none (whole
        # GPUs, or slices it cannot size): readers count gpu_count cards.
        pa.field("gpu_cards", pa.float64()),
        pa.field("started_at", UTC_TIMESTAMP, nullable=False),
        pa.field("ended_at", UTC_TIMESTAMP),
        pa.field("account", pa.string()),
        pa.field("partition", pa.string()),
        pa.field("namespace", pa.string()),
        pa.field("labels", pa.string()),  # JSON object
        pa.field("state", pa.string()),
        pa.field("source", pa.string()),
        *LINEAGE_FIELDS,
    ]
)

STORAGE_EVENT = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        # checkpoint | disk_write | object_get | object_put | object_other
        pa.field("kind", pa.string(), nullable=False),
        pa.field("host", pa.string()),
        pa.field("resource_id", pa.string()),  # bucket, volume or device
        pa.field("workload_id", pa.string()),
        pa.field("bytes", pa.int64()),
        pa.field("started_at", UTC_TIMESTAMP, nullable=False),
        pa.field("ended_at", UTC_TIMESTAMP),
        pa.field("storage_class", pa.string()),
        pa.field("path", pa.string()),  # file path, object key or disk device
        pa.field("io_seconds", pa.float64()),  # disk busy time within the interval
        pa.field("remote_ip", pa.string()),
        pa.field("requester", pa.string()),
        pa.field("details", pa.string()),  # JSON: source-specific fields
        *LINEAGE_FIELDS,
    ]
)

# A row a connector could not accept, with the reason, so totals reconcile and nothing vanishes.
QUARANTINE = pa.schema(
    [
        *LINEAGE_FIELDS,
        pa.field("reason", pa.string(), nullable=False),
        pa.field("raw_record", pa.string()),
    ]
)

# Kind of record → canonical schema and the raw table it lands in.
SCHEMAS = {
    "billing": COST_LINE,
    "telemetry": GPU_SAMPLE,
    "workload": WORKLOAD,
    "storage": STORAGE_EVENT,
}
RAW_TABLES = {
    "billing": "raw.cost_lines",
    "telemetry": "raw.gpu_samples",
    "workload": "raw.workloads",
    "storage": "raw.storage_events",
}


def duckdb_type(arrow_type: pa.DataType) -> str:
    """The DuckDB column type for an Arrow type used in the canonical schemas."""
    if pa.types.is_decimal(arrow_type):
        return f"DECIMAL({arrow_type.precision},{arrow_type.scale})"
    if pa.types.is_timestamp(arrow_type):
        if arrow_type.tz is None:
            raise ValueError("canonical timestamps are always UTC-aware")
        return "TIMESTAMPTZ"
    simple = {
        pa.string(): "VARCHAR",
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
    }
    return simple[arrow_type]


def duckdb_columns(schema: pa.Schema) -> str:
    """Column list for CREATE TABLE, quoting names so FOCUS PascalCase survives."""
    return ",\n    ".join(
        f'"{f.name}" {duckdb_type(f.type)}{"" if f.nullable else " NOT NULL"}' for f in schema
    )


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)
