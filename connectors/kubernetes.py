"""Kubernetes pod listings (`kubectl get pods -A -o json`) into workloads.

One workload per pod: its node is the host, it started at `status.startTime` and, once Succeeded
or Failed, ended when its last container finished. Its GPUs are the `nvidia.com/gpu` and MIG
(`nvidia.com/mig-<profile>`, the device plugin's mixed strategy) limits, else requests, of its
containers: each a GPU to `gpu_count`, a MIG instance its profile's share of the card in
`gpu_cards` (a `1g.10gb` on an A100 is 1/7). Under MIG's single strategy a slice is advertised as
`nvidia.com/gpu`: a listing that holds the nodes too (`kubectl get pods,nodes -A -o json`) sizes it
from its node's GPU feature discovery labels (`nvidia.com/mig.strategy=single`,
`nvidia.com/gpu.product=…-MIG-1g.10gb`); a pod listing alone cannot tell it from a whole GPU. The
nodes' product label also tells a card of four slices (an RTX PRO 6000) from one of seven.
A `phase` or `ml-phase` label or annotation states its phase explicitly; otherwise the phase rules
decide from its name, namespace and labels.
"""

import json
import re
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import ROW_NUMBER, first_reason, parse_utc, split_rejected, to_canonical
from connectors.kit import normalise_host
from connectors.kit import Connector, ConnectorError, ReadContext, read_whole
from models.gpus import mig_card_share
from models.phases import PHASE_ALIASES, WORK_PHASES

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# GPU feature discovery's node labels: under the single strategy every nvidia.com/gpu is one slice
# of the profile the product names (`NVIDIA-A100-SXM4-80GB-MIG-1g.10gb`).
MIG_STRATEGY_LABEL, GPU_PRODUCT_LABEL = "nvidia.com/mig.strategy", "nvidia.com/gpu.product"
PHASE_KEYS = ("phase", "ml-phase", "ml_phase", "gpu-finops/phase")


class GpuRequestError(ValueError):
    """A pod's GPU resources cannot be counted: the reason its pod is quarantined."""


def whole_amount(resource: str, amount) -> int:
    """A resource quantity as a whole number ≥ 0 ("2", "+2", 2 or 2.0); anything else is refused,
    not truncated."""
    if isinstance(amount, float) and amount.is_integer():
        amount = int(amount)
    if isinstance(amount, bool) or not isinstance(amount, (int, str)) or not re.fullmatch(r"\+?\d+", str(amount).strip()):
        raise GpuRequestError(f"{resource} limit or request {amount!r} is not a whole number ≥ 0")
    return int(str(amount).strip())


def node_labels(items: list) -> dict[str, dict]:
    """Node name → its labels, for the Node items of the listing."""
    nodes = {}
    for item in items:
        if isinstance(item, dict) and item.get("kind") == "Node" and isinstance(item.get("metadata"), dict):
            labels, name = item["metadata"].get("labels") or {}, item["metadata"].get("name")
            if isinstance(labels, dict) and isinstance(name, str):
                nodes[name] = labels
    return nodes


def gpu_product(labels: dict) -> str | None:
    """The GPU product GPU feature discovery labels a node with ('NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition';
    under the single strategy with the profile: 'NVIDIA-A100-SXM4-80GB-MIG-1g.10gb')."""
    product = labels.get(GPU_PRODUCT_LABEL)
    return product if isinstance(product, str) else None


def single_strategy_share(labels: dict) -> float | None:
    """The card share of one `nvidia.com/gpu` on a node that runs MIG's single strategy with a
    product label naming the profile; None on any other node."""
    return mig_card_share(gpu_product(labels)) if labels.get(MIG_STRATEGY_LABEL) == "single" else None


def pod_gpus(pod: dict, gpu_share: float | None = None, unsized: list[str] | None = None,
             card: str | None = None) -> tuple[int, float | None]:
    """(GPUs, cards) the pod's containers hold: GPUs count whole GPUs and MIG instances alike;
    cards is None unless a MIG instance is among them (then a whole GPU is one card), and None
    again when a MIG resource names no profile this release can size (none it knows, or 2g.48gb
    without its card: counted as a GPU of unknown size; its name is added to `unsized`). Time-sliced resources (`….shared`) are not read.
    `gpu_share`: what one nvidia.com/gpu is on the pod's node (a slice, under the single strategy);
    `card`: the node's GPU product, which sizes its MIG profiles (an RTX PRO 6000 has four slices).
    Raises GpuRequestError when an amount is not a whole number."""
    gpus, cards, any_mig, unknown = 0, 0.0, False, False
    for container in pod.get("spec", {}).get("containers", []):
        resources = container.get("resources", {})
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        if not isinstance(limits, dict) or not isinstance(requests, dict):
            raise TypeError("resources.limits or resources.requests is not an object")
        for resource in dict.fromkeys([*limits, *requests]):
            if resource == GPU_RESOURCE:
                share = gpu_share or 1.0
            elif resource.startswith(MIG_RESOURCE_PREFIX) and not resource.endswith(".shared"):
                share = mig_card_share(resource.removeprefix(MIG_RESOURCE_PREFIX), card)
                if share is None:
                    unknown = True
                    if unsized is not None:
                        unsized.append(resource)
            else:
                continue
            amount = next((a for a in (limits.get(resource), requests.get(resource)) if a not in (None, "")), 0)
            amount = whole_amount(resource, amount)
            gpus, any_mig = gpus + amount, any_mig or share != 1.0 or resource != GPU_RESOURCE
            cards += amount * (share or 0.0)
    if gpus >= 2**31:
        raise GpuRequestError(f"{gpus} GPUs is out of range")
    return gpus, (cards if any_mig and not unknown else None)


def pod_end(pod: dict) -> str | None:
    status = pod.get("status", {})
    if status.get("phase") not in ("Succeeded", "Failed"):
        return None
    finished = [c.get("state", {}).get("terminated", {}).get("finishedAt") for c in status.get("containerStatuses", [])]
    finished = [f for f in finished if f]
    return max(finished) if finished else None


def stated_phase(meta: dict) -> str | None:
    for source in (meta.get("labels") or {}, meta.get("annotations") or {}):
        for key in PHASE_KEYS:
            if source.get(key):
                return source[key]
    return None


class KubernetesPodsConnector(Connector):
    name = "kubernetes_pods"
    kind = "workload"
    recognises = "`kubectl get pods -A -o json` listings (kind List of Pod items)"

    def detect(self, path: Path, head: bytes) -> bool:
        text = head.decode("utf-8", errors="replace").lstrip()
        return text.startswith("{") and '"items"' in text and '"Pod"' in text

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        # A pod listing is bounded by the cluster's size, not by time, so it is read whole.
        try:
            document = json.loads(read_whole(path, ctx.source_file).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConnectorError(ctx.source_file, f"not a readable JSON pod listing: {exc}") from exc
        if not isinstance(document, dict) or not isinstance(document.get("items", []), list):
            raise ConnectorError(ctx.source_file, "not a pod listing: no list of items")
        rows = []
        nodes = node_labels(document.get("items", []))
        for number, pod in enumerate(document.get("items", []), start=1):
            if isinstance(pod, dict) and pod.get("kind") == "Node":
                continue  # read above, for what its pods' GPUs are
            try:  # a pod of the wrong shape (a field of the wrong JSON type) is quarantined, not a crash
                meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
                try:
                    unsized: list[str] = []
                    labels = nodes.get(spec.get("nodeName"), {})
                    gpus, cards = pod_gpus(pod, single_strategy_share(labels), unsized, gpu_product(labels))
                except GpuRequestError as exc:
                    ctx.quarantine(self.name, number, str(exc), pod)
                    continue
                if unsized:
                    ctx.warn(f"item {number}: {', '.join(unsized)} names no MIG profile this release can size without "
                             "its card (list the nodes with the pods): counted as a GPU of unknown size (a whole card)")
                row = {
                    ROW_NUMBER: number,
                    # A pod listed without its namespace is in Kubernetes' default one (as dcgm-exporter labels it).
                    "workload_id": f"k8s:{meta.get('namespace') or 'default'}/{meta.get('name')}",
                    "name": meta.get("name"), "namespace": meta.get("namespace") or "default",
                    "labels": json.dumps(meta.get("labels") or {}, sort_keys=True),
                    "stated_phase": stated_phase(meta),
                    "host": spec.get("nodeName"), "gpu_count": gpus, "gpu_cards": cards,
                    "start": status.get("startTime"), "end": pod_end(pod), "state": status.get("phase"),
                    "__kind": pod.get("kind", "Pod"),
                }
                if not all(v is None or isinstance(v, str) for k, v in row.items() if k not in (ROW_NUMBER, "gpu_count", "gpu_cards")):
                    raise TypeError("a field that should be text is not")
                rows.append(row)
            except (AttributeError, TypeError, ValueError) as exc:
                ctx.quarantine(self.name, number, f"item is not a pod object of the usual shape: {exc}", pod)
        if not rows:
            return
        frame = pl.DataFrame(rows, schema={
            ROW_NUMBER: pl.Int64, "workload_id": pl.String, "name": pl.String, "namespace": pl.String, "labels": pl.String,
            "stated_phase": pl.String, "host": pl.String, "gpu_count": pl.Int32, "gpu_cards": pl.Float64, "start": pl.String, "end": pl.String,
            "state": pl.String, "__kind": pl.String,
        })
        key = pl.col("stated_phase").str.to_lowercase().str.replace_all(r"[\s_\-]", "").replace(PHASE_ALIASES)
        phase = pl.when(key.is_in(WORK_PHASES)).then(key)
        started, ended = parse_utc("start", ctx.timezone), parse_utc("end", ctx.timezone)
        reason = first_reason([
            (pl.col("__kind") != "Pod", pl.format("item of kind {} is not a Pod", "__kind")),
            (pl.col("name").is_null(), "pod has no name"),
            (started.is_null(), "pod never started (no status.startTime)"),
            (pl.col("host").is_null(), "pod was never scheduled on a node"),
            (pl.col("state").is_in(["Succeeded", "Failed"]) & pl.col("end").is_null(),
             "pod has ended but no container reports when: it would otherwise hold its GPUs forever"),
            (pl.col("stated_phase").is_not_null() & phase.is_null(),
             pl.format("phase label '{}' is not one of " + ", ".join(WORK_PHASES), "stated_phase")),
        ])
        accepted = split_rejected(frame, reason, ctx, self.name, [c for c in frame.columns if not c.startswith("_")])
        if not accepted.height:
            return
        out = accepted.select(
            "workload_id", "name", "namespace", "labels", "state", ROW_NUMBER,
            phase.alias("phase"), normalise_host(pl.col("host")).alias("host"),
            pl.col("gpu_count").cast(pl.Int32), "gpu_cards", started.alias("started_at"), ended.alias("ended_at"),
            pl.lit("kubernetes").alias("source"),
        )
        yield to_canonical(out, self.schema, self.name, ctx)
