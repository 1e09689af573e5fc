"""The lake: every raw row read from a landing file, as Parquet files beside the warehouse.

`layout` says where each kind of row lives (partitioned by provider and billing period, by day,
and by source file) and makes the warehouse's raw.* views over it; `writer` streams a connector's
record batches into it, one landing file at a time, so no file is ever held whole in memory.
"""
