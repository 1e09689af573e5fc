"""Slurm accounting: `sacct --parsable2 --format=JobID,JobName,Account,Partition,AllocTRES,Start,End,NodeList,State`.

One workload per job and node: the job's GPUs (`gres/gpu` in AllocTRES) are shared out over the
nodes of its NodeList (and, where typed gres names MIG profiles, `gres/gpu:1g.10gb=1`, the cards
they are: `gpu_cards`), whose ranges (`gpu[01-04,07]`) are expanded. Job steps (`123.batch`,
`123.0`) are left out: the allocation line already holds the GPUs. Times are local to the
cluster and read in the configured time zone; `Unknown` end means still running.
"""

import re
from collections.abc import Iterator

import hostlist
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import ROW_NUMBER, first_reason, header_fields, parse_utc, split_rejected, stream_csv_as_strings, to_canonical
from connectors.kit import normalise_host
from connectors.kit import Connector, ReadContext
from models.gpus import mig_card_share

REQUIRED = ("JobID", "JobName", "AllocTRES", "Start", "End", "NodeList")
NOT_A_TIME = ("Unknown", "None", "")


def expand_nodelist(nodelist: str | None) -> list[str]:
    """`gpu[01-04,07],login1` → gpu01 gpu02 gpu03 gpu04 gpu07 login1, by python-hostlist (Slurm's
    own hostlist grammar). A job that never got nodes, or a list that does not parse, has none."""
    if not nodelist or nodelist.strip() in ("None assigned", "(null)"):
        return []
    try:
        return hostlist.expand_hostlist(nodelist.strip())
    except hostlist.BadHostlist:
        return []


def gpus_in_tres(tres: str | None) -> int | None:
    """`cpu=64,gres/gpu=8,gres/gpu:a100=8` → 8 (the untyped count, else the sum of typed ones)."""
    if not tres:
        return 0
    untyped = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
    if untyped:
        return int(untyped.group(1))
    typed = re.findall(r"(?:^|,)gres/gpu:[^=,]+=(\d+)", tres)
    return sum(int(n) for n in typed)


def mig_cards_in_tres(tres: str | None) -> float | None:
    """`gres/gpu=2,gres/gpu:a100_1g.10gb=2` → 2/7: the job's MIG instances (typed gres whose type
    names a MIG profile, as Slurm's NVML autodetection and gres.conf name them) as their share of
    a card, its other GPUs whole. None without a MIG type: the GPUs are whole cards."""
    typed = re.findall(r"(?:^|,)gres/gpu:([^=,]+)=(\d+)", tres or "")
    mig = [(int(count), share) for kind, count in typed if (share := mig_card_share(kind)) is not None]
    if not mig:
        return None
    whole = max((gpus_in_tres(tres) or 0) - sum(count for count, _ in mig), 0)
    return whole + sum(count * share for count, share in mig)


def gpus_in_tres_expr(tres: pl.Expr) -> pl.Expr:
    """The same rule as gpus_in_tres, vectorised."""
    untyped = tres.str.extract(r"(?:^|,)gres/gpu=(\d+)").cast(pl.Int32)
    typed = tres.str.extract_all(r"gres/gpu:[^=,]+=\d+").list.eval(pl.element().str.extract(r"=(\d+)$").cast(pl.Int32)).list.sum()
    return pl.coalesce(untyped, typed, pl.lit(0)).cast(pl.Int32)


class SlurmSacctConnector(Connector):
    name = "slurm_sacct"
    kind = "workload"
    recognises = "Slurm `sacct --parsable2` output with JobID, JobName, AllocTRES, Start, End, NodeList (Account, Partition, State optional)"

    def detect(self, path: Path, head: bytes) -> bool:
        return set(REQUIRED) <= set(header_fields(head, delimiter="|"))

    def missing_columns(self, head: bytes) -> list[str] | None:
        names = set(header_fields(head, delimiter="|"))
        return [c for c in REQUIRED if c not in names] if "|" in head.split(b"\n", 1)[0].decode("utf-8", "replace") else None

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        for frame in stream_csv_as_strings(path, ctx.source_file, delimiter="|", ctx=ctx, connector=self.name):
            source_columns = [c for c in frame.columns if c != ROW_NUMBER]
            frame = frame.filter(~pl.col("JobID").str.contains(r"\.").fill_null(False)).with_columns(
                pl.when(pl.col(c).is_in(NOT_A_TIME)).then(None).otherwise(pl.col(c)).alias(c) for c in ("Start", "End")
            )
            started, ended = parse_utc("Start", ctx.timezone), parse_utc("End", ctx.timezone)
            frame = frame.with_columns(
                gpus_in_tres_expr(pl.col("AllocTRES")).alias("__gpus"),
                pl.col("AllocTRES").map_elements(mig_cards_in_tres, return_dtype=pl.Float64).alias("__cards"),
                pl.col("NodeList").map_elements(expand_nodelist, return_dtype=pl.List(pl.String)).alias("__nodes"),
            )
            reason = first_reason([
                (pl.col("JobID").is_null(), "JobID is empty"),
                (started.is_null(), pl.format("job {} has not started (Start '{}')", "JobID", pl.col("Start").fill_null(""))),
                (pl.col("End").is_not_null() & ended.is_null(), pl.format("End '{}' is not a timestamp", "End")),
                (pl.col("__nodes").list.len() == 0, pl.format("NodeList '{}' names no node", pl.col("NodeList").fill_null(""))),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, source_columns)
            if not accepted.height:
                continue
            per_node = accepted.with_columns(started.alias("started_at"), ended.alias("ended_at")).explode("__nodes").with_columns(
                pl.int_range(pl.len()).over(ROW_NUMBER).alias("__node_no"),
            )
            n = pl.len().over(ROW_NUMBER)
            # GPUs shared out over the nodes; a remainder goes to the first nodes.
            node_gpus = ((pl.col("__gpus") // n) + (pl.col("__node_no") < (pl.col("__gpus") % n)).cast(pl.Int32)).cast(pl.Int32)
            out = per_node.with_columns(node_gpus.alias("gpu_count")).select(
                pl.when(n > 1).then(pl.concat_str(pl.lit("slurm:"), "JobID", pl.lit("@"), "__nodes"))
                  .otherwise(pl.concat_str(pl.lit("slurm:"), "JobID")).alias("workload_id"),
                pl.col("JobName").alias("name"),
                normalise_host(pl.col("__nodes")).alias("host"),
                "gpu_count",
                # The cards go with the GPUs: each node's part of the job's cards is its part of the GPUs.
                pl.when(pl.col("__gpus") > 0).then(pl.col("__cards") * pl.col("gpu_count") / pl.col("__gpus")).alias("gpu_cards"),
                "started_at", "ended_at",
                *(pl.col(src).alias(dst) for src, dst in (("Account", "account"), ("Partition", "partition"), ("State", "state"))
                  if src in per_node.columns),
                pl.lit("slurm").alias("source"),
                ROW_NUMBER,
            )
            yield to_canonical(out, self.schema, self.name, ctx)
