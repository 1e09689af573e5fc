"""The bundled scenario: a deterministic landing folder that tells the design's story.

A GPU-rental cloud billed in CNY, exporting its invoice detail with Chinese headers (8×A100 80G
and 2×A100 80G on monthly plans at 1.85 CNY per card-hour, an RTX 6000 Ada on demand at 0.58
CNY/h serving inference) and a hyperscaler billed
in USD (a dataset bucket, a 300 GB dataset pulled ten times over the internet, a slow checkpoint
volume). nvidia-smi telemetry per host matches the workloads: busy pre-training with GPUs near
zero during each checkpoint write, fine-tuning jobs, inference with idle valleys, two monthly
cards idle for the last week. One day has a spend spike (five dataset pulls).

The truths the files were built from are written beside them (`truths.json`) for tests.
"""

import csv
import json
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import polars as pl

START = datetime(2026, 9, 1, tzinfo=UTC)
DAYS = 40
TELEMETRY_TZ = "Asia/Shanghai"  # nvidia-smi writes the host's local time
A100_CARD_HOUR_CNY = Decimal("1.85")
RTX6000_HOUR_CNY = Decimal("0.58")
EGRESS_USD_PER_GB = Decimal("0.09")
DATASET_GB = 300
PULL_DAYS = (2, 5, 9, 12, 25, 25, 25, 25, 25, 31)  # day 25: the spike
SPIKE_DAY = 25
PRETRAIN_DAYS = 20
CHECKPOINT_EVERY_H = 6
CHECKPOINT_MINUTES = 8
CHECKPOINT_GB = 200
INFERENCE_BUSY_HOURS = 137
DCGM_HOSTS = ("gpu-a100-02",)


@dataclass(frozen=True)
class Host:
    name: str  # telemetry file stem and workload host
    resource_id: str  # the invoice's ResourceId
    gpus: int
    model: str
    smi_name: str
    mem_total_mib: int
    plan: str  # monthly | on-demand
    hourly_cny: Decimal  # per card-hour


HOSTS = (
    Host("gpu-a100-01", "ins-a100-01", 8, "A100 80G", "NVIDIA A100-SXM4-80GB", 81920, "monthly", A100_CARD_HOUR_CNY),
    Host("gpu-a100-02", "ins-a100-02", 2, "A100 80G", "NVIDIA A100-SXM4-80GB", 81920, "monthly", A100_CARD_HOUR_CNY),
    Host("gpu-rtx6000-01", "ins-rtx6000-01", 1, "RTX 6000 Ada", "NVIDIA RTX 6000 Ada Generation", 49140, "on-demand", RTX6000_HOUR_CNY),
)


@dataclass(frozen=True)
class Workload:
    workload_id: str
    name: str
    phase: str
    host: str
    gpu_count: int
    started_at: datetime
    ended_at: datetime


def day(n: int, hour: float = 0) -> datetime:
    return START + timedelta(days=n, hours=hour)


def build_workloads(rng: np.random.Generator, leaks: bool = True) -> list[Workload]:
    """The story's jobs. Without leaks (the control scenario) every paid card keeps working: full-host
    fine-tuning jobs with short gaps, and the two-card host busy to the end."""
    jobs = [Workload("pt-llm-7b", "pretrain-llm-7b", "pretraining", "gpu-a100-01", 8, day(0), day(PRETRAIN_DAYS))]
    # Fine-tuning on the big host after pre-training: short jobs with gaps between them.
    t = day(PRETRAIN_DAYS, 6 if leaks else 1)
    n = 1
    while t < day(DAYS - 2):
        hours = int(rng.integers(6, 40))
        gpus = int(rng.choice([4, 8])) if leaks else 8
        end = min(t + timedelta(hours=hours), day(DAYS))
        jobs.append(Workload(f"ft-a100-01-{n:02d}", f"finetune-sft-{n:02d}", "finetuning", "gpu-a100-01", gpus, t, end))
        t = end + timedelta(hours=int(rng.integers(4, 30) if leaks else rng.integers(1, 5)))
        n += 1
    if not leaks:
        last = jobs[-1]
        jobs[-1] = Workload(last.workload_id, last.name, last.phase, last.host, last.gpu_count, last.started_at, day(DAYS))
    # Fine-tuning on the two-card host until day 33; its last week is idle.
    t = day(0, 2)
    first_lora = len(jobs)
    while t < day(31 if leaks else DAYS - 1):
        hours = int(rng.integers(20, 70))
        end = min(t + timedelta(hours=hours), day(33 if leaks else DAYS))
        jobs.append(Workload(f"ft-a100-02-{n:02d}", f"finetune-lora-{n:02d}", "finetuning", "gpu-a100-02", 2, t, end))
        t = end + timedelta(hours=int(rng.integers(2, 12) if leaks else rng.integers(1, 5)))
        n += 1
    if not leaks and len(jobs) > first_lora:
        last = jobs[-1]
        jobs[-1] = Workload(last.workload_id, last.name, last.phase, last.host, last.gpu_count, last.started_at, day(DAYS))
    jobs.append(Workload("svc-sd-inference", "stable-diffusion-serving", "inference", "gpu-rtx6000-01", 1, day(0), day(DAYS)))
    return jobs


def minutes_index() -> np.ndarray:
    return np.arange(DAYS * 24 * 60)


def utilization(host: Host, jobs: list[Workload], rng: np.random.Generator, leaks: bool = True) -> np.ndarray:
    """Integer utilization % per GPU (rows) and minute (columns), as nvidia-smi would report."""
    n = DAYS * 24 * 60
    util = rng.integers(0, 3, size=(host.gpus, n)).astype(float)  # idle floor: 0–2 %
    minute = minutes_index()
    for job in (j for j in jobs if j.host == host.name):
        a = int((job.started_at - START).total_seconds() // 60)
        b = int((job.ended_at - START).total_seconds() // 60)
        if job.phase == "pretraining":
            util[:, a:b] = rng.integers(75, 91, size=(host.gpus, b - a))
            # Synchronous checkpoints to a slow disk stall every GPU; the control writes asynchronously.
            for h in range(0, PRETRAIN_DAYS * 24, CHECKPOINT_EVERY_H if leaks else PRETRAIN_DAYS * 24 + 1):
                c = a + h * 60 + CHECKPOINT_EVERY_H * 60 - CHECKPOINT_MINUTES  # write ends each 6-hour block
                util[:, c:c + CHECKPOINT_MINUTES] = rng.integers(0, 4, size=(host.gpus, CHECKPOINT_MINUTES))
        elif job.phase == "finetuning":
            util[: job.gpu_count, a:b] = rng.integers(55, 76, size=(job.gpu_count, b - a))
        elif job.phase == "inference":
            # Diurnal demand with a 10x peak/valley swing, scaled to the busy hours of the story.
            hour = (minute / 60.0) % 24
            swing = 9.0 if leaks else 0.0  # the control serves a flat load
            shape = 1.0 + swing * np.clip(np.sin((hour - 8) / 24 * 2 * np.pi), 0, None) ** 2
            shape *= rng.uniform(0.8, 1.2, size=n)
            scaled = shape / shape.sum() * INFERENCE_BUSY_HOURS * 60 * 100
            util[0, a:b] = np.clip(np.round(scaled[a:b]), 0, 100)
    return util.astype(int)


def telemetry_frame(host: Host, util: np.ndarray, rng: np.random.Generator) -> pl.DataFrame:
    """One row per GPU and minute: k (minute number), i (GPU index), u (util %), m (MiB), p (centiwatts)."""
    n = util.shape[1]
    frames = []
    for g in range(host.gpus):
        u = util[g]
        mem = np.where(u > 5, host.mem_total_mib * rng.uniform(0.55, 0.9, size=n), rng.uniform(0, 600, size=n)).astype(int)
        power_centiwatts = (6000 + u * (340 if host.gpus > 1 else 240) + rng.integers(0, 800, size=n)).astype(int)
        frames.append(pl.DataFrame({"i": np.full(n, g), "u": u, "m": mem, "p": power_centiwatts, "k": np.arange(n)}))
    return pl.concat(frames).sort(["k", "i"])


def gpu_uuid_prefix(host: Host) -> str:
    return f"GPU-{zlib.crc32(host.name.encode()):08x}"


def write_nvidia_smi(landing: Path, host: Host, df: pl.DataFrame) -> None:
    """nvidia-smi --query-gpu CSV in the host's local time, one file per host."""
    n = df.get_column("k").max() + 1
    local = (pl.datetime_range(START, START + timedelta(minutes=n - 1), "1m", time_zone="UTC", eager=True)
             .dt.convert_time_zone(TELEMETRY_TZ).dt.strftime("%Y/%m/%d %H:%M:%S.000"))
    df = df.with_columns(local.gather(df.get_column("k")).alias("ts"))
    uuid_prefix = gpu_uuid_prefix(host)
    lines = df.select(pl.format(
        "{}, {}, {}-{}, {}, 00000000:{}:00.0, P0, {} %, {} MiB, {} MiB, {}.{} W",
        "ts", "i", pl.lit(uuid_prefix), pl.col("i").cast(pl.String).str.zfill(4), pl.lit(host.smi_name),
        (pl.col("i") + 7).cast(pl.String).str.zfill(2), "u", pl.lit(host.mem_total_mib), "m",
        pl.col("p") // 100, (pl.col("p") % 100).cast(pl.String).str.zfill(2),
    ).alias("line"))
    header = "timestamp, index, uuid, name, pci.bus_id, pstate, utilization.gpu [%], memory.total [MiB], memory.used [MiB], power.draw [W]"
    path = landing / "telemetry" / f"{host.name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fh.write(header + "\n")
        lines.write_csv(fh, include_header=False, quote_style="never")


DCGM_METRICS = (("DCGM_FI_DEV_GPU_UTIL", "u", "GPU utilization (in %)."),
                ("DCGM_FI_DEV_FB_USED", "m", "Framebuffer memory used (in MiB)."),
                ("DCGM_FI_DEV_POWER_USAGE", "p", "Power draw (in W)."))


def write_dcgm(landing: Path, host: Host, df: pl.DataFrame) -> None:
    """A host group monitored by dcgm-exporter: its history as a Prometheus query_range export (as
    teams export it), and its last day as the raw scrapes an exporter sidecar saved."""
    last_day = (DAYS - 1) * 1440
    write_prometheus_export(landing, host, df.filter(pl.col("k") < last_day))
    write_dcgm_scrapes(landing, host, df.filter(pl.col("k") >= last_day))


def write_prometheus_export(landing: Path, host: Host, df: pl.DataFrame) -> None:
    epoch_s = int(START.timestamp())
    uuid_prefix = gpu_uuid_prefix(host)
    result = []
    for metric, column, _ in DCGM_METRICS:
        for g in range(host.gpus):
            gpu = df.filter(pl.col("i") == g)
            values = (gpu.get_column("p") / 100).to_list() if column == "p" else gpu.get_column(column).to_list()
            result.append({
                "metric": {"__name__": metric, "gpu": str(g), "UUID": f"{uuid_prefix}-{g:04d}", "device": f"nvidia{g}",
                           "modelName": host.smi_name, "Hostname": host.name, "instance": f"{host.name}:9400", "job": "dcgm-exporter"},
                "values": [[epoch_s + k * 60, str(v)] for k, v in zip(gpu.get_column("k").to_list(), values)],
            })
    path = landing / "telemetry" / "prometheus" / f"dcgm-{host.name}-query_range.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}, separators=(",", ":")))


def write_dcgm_scrapes(landing: Path, host: Host, df: pl.DataFrame) -> None:
    """dcgm-exporter scrapes, one per minute with sample timestamps, concatenated into a file per day."""
    epoch_ms = int(START.timestamp() * 1000)
    uuid_prefix = gpu_uuid_prefix(host)
    parts = []
    for order, (metric, column, help_text) in enumerate(DCGM_METRICS):
        value = (pl.format("{}.{}", pl.col("p") // 100, (pl.col("p") % 100).cast(pl.String).str.zfill(2)) if column == "p"
                 else pl.col(column).cast(pl.String))
        samples = df.select("k", pl.lit(order).alias("o"), pl.col("i").alias("r"), pl.format(
            '{}{{gpu="{}",UUID="{}-{}",device="nvidia{}",modelName="{}",Hostname="{}"}} {} {}',
            pl.lit(metric), "i", pl.lit(uuid_prefix), pl.col("i").cast(pl.String).str.zfill(4), "i", pl.lit(host.smi_name),
            pl.lit(host.name), value, pl.col("k") * 60_000 + epoch_ms).alias("line"))
        headers = df.filter(pl.col("i") == 0).select("k", pl.lit(order).alias("o"), pl.lit(-1).cast(df.schema["i"]).alias("r"),
                                                     pl.lit(f"# HELP {metric} {help_text}\n# TYPE {metric} gauge").alias("line"))
        parts += [samples, headers]
    lines = pl.concat(parts).sort("k", "o", "r")
    folder = landing / "telemetry" / "dcgm" / host.name
    folder.mkdir(parents=True, exist_ok=True)
    for day_no, day_lines in lines.with_columns((pl.col("k") // 1440).alias("d")).partition_by("d", as_dict=True).items():
        with open(folder / f"dcgm-{day(day_no[0]).date().isoformat()}.prom", "w") as fh:
            day_lines.select("line").write_csv(fh, include_header=False, quote_style="never")


FOCUS_HEADER = (
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingAccountId", "BillingAccountName",
    "BillingCurrency", "BillingPeriodStart", "BillingPeriodEnd", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargeFrequency", "ChargePeriodStart", "ChargePeriodEnd", "ConsumedQuantity",
    "ConsumedUnit", "InvoiceIssuerName", "ListUnitPrice", "ContractedUnitPrice", "PricingCategory",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId",
    "ResourceName", "ResourceType", "ServiceCategory", "ServiceName", "SkuId", "SkuPriceId", "SubAccountId",
    "SubAccountName", "Tags", "x_GpuModel", "x_GpuCount",
)


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def billing_period(ts: datetime) -> tuple[datetime, datetime]:
    start = ts.replace(day=1, hour=0, minute=0, second=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def charge(provider: str, account: tuple[str, str], currency: str, d: int, cost: Decimal, **fields) -> dict:
    start, end = day(d), day(d + 1)
    bp_start, bp_end = billing_period(start)
    row = {
        "BilledCost": cost, "EffectiveCost": cost, "ListCost": cost, "ContractedCost": cost,
        "BillingAccountId": account[0], "BillingAccountName": account[1], "BillingCurrency": currency,
        "BillingPeriodStart": iso(bp_start), "BillingPeriodEnd": iso(bp_end), "ChargeCategory": "Usage",
        "ChargeClass": None, "ChargeFrequency": "Usage-Based", "ChargePeriodStart": iso(start),
        "ChargePeriodEnd": iso(end), "InvoiceIssuerName": provider, "PricingCategory": "Standard",
        "ProviderName": provider, "PublisherName": provider, "SubAccountId": account[0], "SubAccountName": account[1],
    }
    row.update(fields)
    return row


def gpu_cloud_charges() -> list[dict]:
    rows = []
    for host in HOSTS:
        for d in range(DAYS):
            hours = Decimal(24 * host.gpus)
            cost = hours * host.hourly_cny
            monthly = host.plan == "monthly"
            rows.append(charge(
                "Lumen GPU Cloud", ("lgc-778812", "ml-research"), "CNY", d, cost,
                ChargeDescription=f"{host.gpus}x {host.model} {'monthly plan' if monthly else 'on-demand'}, {host.hourly_cny} CNY per card-hour",
                ChargeFrequency="Recurring" if monthly else "Usage-Based",
                ConsumedQuantity=hours, ConsumedUnit="GPU-Hours", PricingQuantity=hours, PricingUnit="GPU-Hours",
                ListUnitPrice=host.hourly_cny, ContractedUnitPrice=host.hourly_cny,
                RegionId="cn-east-1", RegionName="China East 1", ResourceId=host.resource_id, ResourceName=host.name,
                ResourceType="GPU instance", ServiceCategory="Compute", ServiceName="GPU Instances",
                SkuId=f"{host.model.lower().replace(' ', '-')}-{host.plan}", SkuPriceId=f"{host.model}-{host.plan}-{host.hourly_cny}",
                Tags=json.dumps({"team": "ml-research"}), x_GpuModel=host.model, x_GpuCount=host.gpus,
            ))
    return rows


def hyperscaler_charges(leaks: bool = True) -> list[dict]:
    account = ("210987654321", "ml-data")
    rows = []
    storage = dict(ServiceCategory="Storage", RegionId="us-east-1", RegionName="US East (N. Virginia)",
                   PricingUnit="GB-Month", ConsumedUnit="GB-Month")
    for d in range(DAYS):
        gb_month = Decimal(DATASET_GB) / Decimal(30)
        rows.append(charge("AWS", account, "USD", d, (gb_month * Decimal("0.023")).quantize(Decimal("0.000001")),
                           ChargeDescription="$0.023 per GB-Month of storage used in S3 Standard",
                           ServiceName="Amazon Simple Storage Service", ResourceId="arn:aws:s3:::llm-datasets",
                           ResourceName="llm-datasets", ResourceType="Bucket", SkuId="S3-Standard-Storage",
                           SkuPriceId="S3-Standard-Storage-0.023", ListUnitPrice=Decimal("0.023"),
                           ConsumedQuantity=gb_month.quantize(Decimal("0.0001")), PricingQuantity=gb_month.quantize(Decimal("0.0001")),
                           Tags=json.dumps({"team": "ml-platform", "dataset": "corpus-v3"}), **storage))
        if d < PRETRAIN_DAYS:
            rows.append(charge("AWS", account, "USD", d, (Decimal(2000) * Decimal("0.08") / Decimal(30)).quantize(Decimal("0.000001")),
                               ChargeDescription="$0.08 per GB-month of General Purpose SSD provisioned storage",
                               ServiceName="Amazon Elastic Block Store", ResourceId="vol-0ckpt0001", ResourceName="checkpoints-pt",
                               ResourceType="Volume", SkuId="EBS-gp-Storage", SkuPriceId="EBS-gp-0.08", ListUnitPrice=Decimal("0.08"),
                               ConsumedQuantity=Decimal("66.6667"), PricingQuantity=Decimal("66.6667"),
                               Tags=json.dumps({"phase": "pretraining", "team": "ml-research"}), **storage))
        else:
            rows.append(charge("AWS", account, "USD", d, Decimal("0.050000"),
                               ChargeDescription="$0.023 per GB-Month of storage used in S3 Standard",
                               ServiceName="Amazon Simple Storage Service", ResourceId="arn:aws:s3:::ft-adapters",
                               ResourceName="ft-adapters", ResourceType="Bucket", SkuId="S3-Standard-Storage",
                               SkuPriceId="S3-Standard-Storage-0.023", ListUnitPrice=Decimal("0.023"),
                               ConsumedQuantity=Decimal("2.1739"), PricingQuantity=Decimal("2.1739"),
                               Tags=json.dumps({"ml_phase": "fine-tuning", "team": "ml-research"}), **storage))
        pulls = PULL_DAYS.count(d) if leaks else 0  # the control pulls its dataset over the internal network
        if pulls:
            gb = Decimal(DATASET_GB * pulls)
            rows.append(charge("AWS", account, "USD", d, gb * EGRESS_USD_PER_GB,
                               ChargeDescription="$0.09 per GB - first 10 TB / month data transfer out to the internet",
                               ServiceCategory="Networking", ServiceName="AWS Data Transfer", RegionId="us-east-1",
                               RegionName="US East (N. Virginia)", ResourceId="arn:aws:s3:::llm-datasets",
                               ResourceName="llm-datasets", ResourceType="Bucket", SkuId="DataTransfer-Out-Bytes",
                               SkuPriceId="DataTransfer-Out-Bytes-0.09", ListUnitPrice=EGRESS_USD_PER_GB,
                               ConsumedQuantity=gb, ConsumedUnit="GB", PricingQuantity=gb, PricingUnit="GB",
                               Tags=json.dumps({"team": "ml-platform", "dataset": "corpus-v3"})))
    return rows


def write_invoices(landing: Path, folder: str, rows: list[dict]) -> list[str]:
    """One FOCUS CSV per billing month, as providers export them."""
    written = []
    months = sorted({r["BillingPeriodStart"][:7] for r in rows})
    for month in months:
        path = landing / folder / f"focus-{month}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=FOCUS_HEADER)
            writer.writeheader()
            for r in rows:
                if r["BillingPeriodStart"][:7] == month:
                    writer.writerow({k: ("NULL" if r.get(k) is None else r[k]) for k in FOCUS_HEADER})
        written.append(path.relative_to(landing).as_posix())
    return written


def local_time(ts: datetime) -> str:
    return ts.astimezone(ZoneInfo(TELEMETRY_TZ)).strftime("%Y-%m-%dT%H:%M:%S")


CN_INVOICE_HEADER = ("云厂商", "账单编号", "账号ID", "实例ID", "实例名称", "地域", "GPU型号", "GPU数量", "计费方式",
                     "开始时间", "结束时间", "时长(小时)", "单价(元/卡时)", "金额", "币种")


def write_gpu_cloud_invoices(landing: Path, rows: list[dict]) -> list[str]:
    """The GPU cloud's monthly invoice detail as it exports it: Chinese headers, local times
    (read by the gpu_rental_cn mapping)."""
    written = []
    for month in sorted({r["BillingPeriodStart"][:7] for r in rows}):
        path = landing / "lumen-gpu-cloud" / f"账单明细-{month}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(CN_INVOICE_HEADER)
            for r in (r for r in rows if r["BillingPeriodStart"][:7] == month):
                writer.writerow([
                    r["ProviderName"], f"LGC-{month}", r["BillingAccountId"], r["ResourceId"], r["ResourceName"], r["RegionId"],
                    r["x_GpuModel"], r["x_GpuCount"], "包月" if r["ChargeFrequency"] == "Recurring" else "按量计费",
                    local_time(datetime.fromisoformat(r["ChargePeriodStart"])).replace("T", " "),
                    local_time(datetime.fromisoformat(r["ChargePeriodEnd"])).replace("T", " "),
                    r["PricingQuantity"] / r["x_GpuCount"], r["ListUnitPrice"], r["BilledCost"], r["BillingCurrency"],
                ])
        written.append(path.relative_to(landing).as_posix())
    return written


def write_workloads(landing: Path, jobs: list[Workload]) -> list[str]:
    """Jobs on the big host as Slurm accounting (phases from the rules), the two-card host's jobs
    as the plain CSV (explicit phases), and the inference service as a Kubernetes pod listing."""
    folder = landing / "workloads"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "sacct-gpu-a100-01.txt", "w") as fh:
        fh.write("JobID|JobName|Account|Partition|AllocTRES|Start|End|NodeList|State\n")
        for number, j in enumerate((j for j in jobs if j.host == "gpu-a100-01"), start=41000):
            fh.write(f"{number}|{j.name}|ml-research|a100|billing={j.gpu_count * 8},cpu={j.gpu_count * 8},"
                     f"gres/gpu={j.gpu_count},node=1|{local_time(j.started_at)}|{local_time(j.ended_at)}|{j.host}|COMPLETED\n")
            fh.write(f"{number}.batch|batch|ml-research||cpu={j.gpu_count * 8},gres/gpu={j.gpu_count},node=1|"
                     f"{local_time(j.started_at)}|{local_time(j.ended_at)}|{j.host}|COMPLETED\n")
    with open(folder / "jobs-gpu-a100-02.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["workload_id", "name", "phase", "host", "gpu_count", "started_at", "ended_at"])
        for j in (j for j in jobs if j.host == "gpu-a100-02"):
            writer.writerow([j.workload_id, j.name, j.phase, j.host, j.gpu_count, iso(j.started_at), iso(j.ended_at)])
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{j.name}-7f9c4", "namespace": "inference", "labels": {"app": j.name}},
             "spec": {"nodeName": f"{j.host}.cluster.local",
                      "containers": [{"name": "server", "resources": {"limits": {"nvidia.com/gpu": str(j.gpu_count)}}}]},
             "status": {"phase": "Running", "startTime": iso(j.started_at)}}
            for j in jobs if j.host == "gpu-rtx6000-01"]
    (folder / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}, indent=1))
    return ["workloads/sacct-gpu-a100-01.txt", "workloads/jobs-gpu-a100-02.csv", "workloads/pods.json"]


def write_storage_events(landing: Path, jobs: list[Workload], leaks: bool = True) -> dict:
    """Checkpoint events from the training code, and the dataset bucket's access log. The control
    writes checkpoints to local NVMe in a minute and reads its dataset once, from inside."""
    folder = landing / "storage"
    folder.mkdir(parents=True, exist_ok=True)
    pretrain = next(j for j in jobs if j.phase == "pretraining")
    with open(folder / "checkpoints.jsonl", "w") as fh:
        for h in range(0, PRETRAIN_DAYS * 24, CHECKPOINT_EVERY_H):
            end = pretrain.started_at + timedelta(hours=h + CHECKPOINT_EVERY_H)
            took = timedelta(minutes=CHECKPOINT_MINUTES) if leaks else timedelta(seconds=60)
            fh.write(json.dumps({"job": pretrain.workload_id, "host": pretrain.host,
                                 "started_at": iso(end - took), "ended_at": iso(end),
                                 "bytes": CHECKPOINT_GB * 10**9, "path": f"/mnt/{'cloud-disk' if leaks else 'nvme'}/ckpt/step-{h * 500:06d}",
                                 "storage_class": "cloud_disk" if leaks else "local_nvme"}) + "\n")
    with open(folder / "s3-access-llm-datasets.log", "w") as fh:
        for n, d in enumerate(PULL_DAYS if leaks else PULL_DAYS[:1]):
            when = day(d, 9 + n % 5).strftime("%d/%b/%Y:%H:%M:%S +0000")
            size = DATASET_GB * 10**9
            fh.write(f"79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be llm-datasets [{when}] "
                     f"{'203.0.113.' if leaks else '10.0.3.'}{10 + n} arn:aws:iam::210987654321:user/gpucloud-trainer REQ{n:012d} REST.GET.OBJECT "
                     f'corpus-v3/corpus-v3.tar "GET /llm-datasets/corpus-v3/corpus-v3.tar HTTP/1.1" 200 - {size} {size} '
                     f'2400000 45 "-" "aws-cli/2.15.0" - host{n} SigV4 ECDHE-RSA-AES128-GCM-SHA256 AuthHeader '
                     f"llm-datasets.s3.us-east-1.amazonaws.com TLSv1.2 - -\n")
    checkpoints = PRETRAIN_DAYS * 24 // CHECKPOINT_EVERY_H
    return {"checkpoint_events": checkpoints, "object_gets": len(PULL_DAYS) if leaks else 1}


def expected_attribution(rows: list[dict], jobs: list[Workload]) -> dict:
    """Phase totals per billing currency, computed independently of the SQL with exact fractions."""
    totals: dict[tuple[str, str], Fraction] = {}
    tag_phase = {"pretraining": "pretraining", "fine-tuning": "finetuning"}
    idle_gpu_seconds = 0
    for r in rows:
        cost = Fraction(r["EffectiveCost"])
        tags = json.loads(r["Tags"])
        phase = tag_phase.get(tags.get("phase") or tags.get("ml_phase") or "")
        parts: dict[str, Fraction] = {}
        if phase:
            parts[phase] = cost
        elif r.get("x_GpuCount"):
            start, end = datetime.fromisoformat(r["ChargePeriodStart"]), datetime.fromisoformat(r["ChargePeriodEnd"])
            paid = r["x_GpuCount"] * (end - start).total_seconds()
            held: dict[str, float] = {}
            for j in jobs:
                if j.host == r["ResourceName"]:
                    overlap = (min(j.ended_at, end) - max(j.started_at, start)).total_seconds()
                    if overlap > 0:
                        held[j.phase] = held.get(j.phase, 0) + j.gpu_count * overlap
            total = max(paid, sum(held.values()))
            for p, s in held.items():
                parts[p] = cost * Fraction(int(s)) / Fraction(int(total))
            idle = paid - sum(held.values())
            if idle > 0:
                parts["idle"] = cost * Fraction(int(idle)) / Fraction(int(total))
                idle_gpu_seconds += idle
        else:
            parts["unattributed"] = cost
        for p, amount in parts.items():
            key = (p, r["BillingCurrency"])
            totals[key] = totals.get(key, Fraction(0)) + amount
    return {
        "phase_cost": {f"{p}|{c}": str(Decimal(v.numerator) / Decimal(v.denominator)) for (p, c), v in sorted(totals.items())},
        "idle_gpu_hours_paid": idle_gpu_seconds / 3600,
    }


def busy_hours_by_phase(utils: dict[str, np.ndarray], jobs: list[Workload]) -> dict[str, float]:
    """Busy GPU-hours per phase by the mart's rule: a host-minute's workloads hold the busiest of its
    GPUs, as many as they hold (which ones is not recorded), and that busy time goes to them by GPUs
    held; the rest of the host's GPUs are no workload's: a GPU-minute under the idle threshold to
    idle and one at or over it to unattributed."""
    out: dict[str, float] = {}
    for host, util in utils.items():
        gpus, n = util.shape
        weights: dict[str, np.ndarray] = {}
        total = np.zeros(n)
        for j in (j for j in jobs if j.host == host):
            a = int((j.started_at - START).total_seconds() // 60)
            b = int((j.ended_at - START).total_seconds() // 60)
            w = np.zeros(n)
            w[a:b] = j.gpu_count
            weights[j.phase] = weights.get(j.phase, np.zeros(n)) + w
            total += w
        busiest_first = -np.sort(-util, axis=0)
        # The part of each GPU (busiest first) the workloads hold: whole until their GPUs run out.
        held = np.clip(total[None, :] - np.arange(gpus)[:, None], 0, 1)
        held_busy = (busiest_first * held).sum(axis=0) / 100.0
        for phase, w in weights.items():
            share = np.divide(w, total, out=np.zeros(n), where=total > 0)
            out[phase] = out.get(phase, 0.0) + float((held_busy * share).sum() / 60)
        # The rest: a GPU-minute at or over the idle threshold ran something unrecorded.
        rest = busiest_first * (1 - held)
        out["idle"] = out.get("idle", 0.0) + float(rest[busiest_first < IDLE_BUSY_PCT].sum() / 100 / 60)
        if (rest[busiest_first >= IDLE_BUSY_PCT] > 0).any():
            out["unattributed"] = out.get("unattributed", 0.0) + float(rest[busiest_first >= IDLE_BUSY_PCT].sum() / 100 / 60)
    return out


FAST_DISK_GBPS = 3
IDLE_BUSY_PCT = 5
IDLE_MIN_MINUTES = 360
INFERENCE_VALLEY_BUSY = 0.10


def leak_truths(utils: dict[str, np.ndarray], jobs: list[Workload], leaks: bool = True) -> dict:
    """The hidden costs injected into the scenario, computed from the generated data with the
    rules the findings document: waiting GPUs during checkpoints, idle runs, repeated downloads."""
    pretrain = next(j for j in jobs if j.phase == "pretraining")
    util = utils[pretrain.host]
    wasted_ckpt_hours, avoidable_ckpt_hours = 0.0, 0.0
    write_s = CHECKPOINT_MINUTES * 60
    fast_s = CHECKPOINT_GB * 1e9 / (FAST_DISK_GBPS * 1e9)
    for h in range(0, PRETRAIN_DAYS * 24, CHECKPOINT_EVERY_H):
        c = h * 60 + CHECKPOINT_EVERY_H * 60 - CHECKPOINT_MINUTES
        idle_share = float((util[:, c:c + CHECKPOINT_MINUTES] < IDLE_BUSY_PCT).mean()) if leaks else 0.0
        hours = pretrain.gpu_count * write_s / 3600 * idle_share
        wasted_ckpt_hours += hours
        avoidable_ckpt_hours += hours * (1 - fast_s / write_s)
    idle_hours = 0.0
    for host in HOSTS:
        if host.name == "gpu-rtx6000-01":
            continue  # inference valleys are a sizing question, not unused cards
        for gpu in utils[host.name]:
            run = 0
            for busy in list(gpu < IDLE_BUSY_PCT) + [False]:
                if busy:
                    run += 1
                else:
                    idle_hours += run / 60 if run >= IDLE_MIN_MINUTES else 0
                    run = 0
    price = float(A100_CARD_HOUR_CNY)
    pulls = len(PULL_DAYS) if leaks else 0
    # Inference valleys: hours whose busy GPUs stay under 0.10 need no GPU at all.
    serving = utils["gpu-rtx6000-01"][0].reshape(-1, 60).sum(axis=1) / 100 / 60
    valley_hours = int((serving < INFERENCE_VALLEY_BUSY).sum())
    return {
        "slow_disk_idle": {"checkpoints": PRETRAIN_DAYS * 24 // CHECKPOINT_EVERY_H, "wasted_gpu_hours": wasted_ckpt_hours,
                           "wasted_cny": wasted_ckpt_hours * price, "avoidable_cny": avoidable_ckpt_hours * price},
        "unused_gpu": {"idle_gpu_hours": idle_hours, "wasted_cny": idle_hours * price},
        # Wasted: paid above a right-sized fleet. The one card serves every hour above the valley
        # (one card is what the load needs), so what it paid beyond that is its valley hours.
        "overprovisioned_inference": {"valley_hours": valley_hours, "paid_cny": float(RTX6000_HOUR_CNY) * DAYS * 24,
                                      "wasted_cny": valley_hours * float(RTX6000_HOUR_CNY),
                                      "avoidable_cny": valley_hours * float(RTX6000_HOUR_CNY),
                                      "peak_valley_ratio": float(np.quantile(serving, 0.95) / np.quantile(serving, 0.05))},
        "egress": {"wasted_usd": float(DATASET_GB * pulls * EGRESS_USD_PER_GB),
                   "avoidable_usd": float(DATASET_GB * max(pulls - 1, 0) * EGRESS_USD_PER_GB)},
    }


def write_scenario(out: Path, seed: int = 7, leaks: bool = True) -> dict:
    """Write the landing folder under `out/landing` and `out/truths.json`; return the truths.
    `leaks=False` writes the control scenario: the same story with none of the hidden costs."""
    rng = np.random.default_rng(seed)
    landing = out / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    jobs = build_workloads(rng, leaks)
    workload_files = write_workloads(landing, jobs)
    storage = write_storage_events(landing, jobs, leaks)
    utils = {}
    samples = 0
    for host in HOSTS:
        utils[host.name] = utilization(host, jobs, rng, leaks)
        frame = telemetry_frame(host, utils[host.name], rng)
        # One host group reports through dcgm-exporter, the others through nvidia-smi.
        (write_dcgm if host.name in DCGM_HOSTS else write_nvidia_smi)(landing, host, frame)
        samples += frame.height
    gpu_rows = gpu_cloud_charges()
    aws_rows = hyperscaler_charges(leaks)
    files = write_gpu_cloud_invoices(landing, gpu_rows) + write_invoices(landing, "aws", aws_rows)
    egress = [r for r in aws_rows if r["ServiceName"] == "AWS Data Transfer"]
    inference_busy = float(utils["gpu-rtx6000-01"].sum() / 100 / 60)
    checkpoints = PRETRAIN_DAYS * 24 // CHECKPOINT_EVERY_H
    truths = {
        "seed": seed,
        "period": {"start": iso(day(0)), "end": iso(day(DAYS)), "days": DAYS},
        "telemetry_time_zone": TELEMETRY_TZ,
        "files": {"invoices": files, "workloads": workload_files,
                  "telemetry": sorted(p.relative_to(landing).as_posix() for p in (landing / "telemetry").rglob("*") if p.is_file()),
                  "storage": ["storage/checkpoints.jsonl", "storage/s3-access-llm-datasets.log"]},
        "rows": {"cost_lines": len(gpu_rows) + len(aws_rows), "gpu_samples": samples, "workloads": len(jobs),
                 "gpu_minutes": samples, "storage_events": sum(storage.values()), **storage},
        "totals": {
            "CNY": str(sum((r["EffectiveCost"] for r in gpu_rows), Decimal(0))),
            "USD": str(sum((r["EffectiveCost"] for r in aws_rows), Decimal(0))),
        },
        **expected_attribution(gpu_rows + aws_rows, jobs),
        "busy_gpu_hours": busy_hours_by_phase(utils, jobs),
        "inference_busy_gpu_hours": inference_busy,
        "egress": {"gb": float(sum(r["ConsumedQuantity"] for r in egress)), "usd": str(sum((r["EffectiveCost"] for r in egress), Decimal(0))),
                   "pulls": len(PULL_DAYS), "dataset_gb": DATASET_GB},
        "spike_day": iso(day(SPIKE_DAY))[:10],
        "checkpoints": {"count": checkpoints, "gb_each": CHECKPOINT_GB, "minutes_each": CHECKPOINT_MINUTES,
                        "gpu_minutes_idle": checkpoints * CHECKPOINT_MINUTES * 8},
        "idle_cards": {"host": "gpu-a100-02", "cards": 2, "from": iso(day(33)), "to": iso(day(DAYS))},
        "leaks": leak_truths(utils, jobs, leaks),
        "with_leaks": leaks,
    }
    truths["planned_runs_file"] = str(write_planned_runs(out))
    # The scenario's "today": two days after its last billed day (bills arrive late).
    truths["report_date"] = (day(DAYS - 1) + timedelta(days=2)).date().isoformat()
    (out / "truths.json").write_text(json.dumps(truths, indent=2, default=str))
    return truths


def write_planned_runs(out: Path) -> Path:
    """The team's calendar: the pre-training run and the fine-tuning campaign after it were
    scheduled, so their spend (and its end) is expected. Idle cards and dataset pulls are not."""
    path = out / "planned_runs.yaml"
    path.write_text(
        "# Planned runs: spend in these spans is expected; anomaly detection does not alert on it.\n"
        "planned_runs:\n"
        f"  - name: pretrain-llm-7b\n    start: {day(0).date()}\n    end: {day(PRETRAIN_DAYS - 1).date()}\n"
        "    phase: pretraining\n"
        "    note: 20-day pre-training run on gpu-a100-01, booked in the quarterly plan\n"
        f"  - name: llm-7b-finetuning-campaign\n    start: {day(PRETRAIN_DAYS).date()}\n    end: {day(DAYS - 1).date()}\n"
        "    phase: finetuning\n"
        "    note: fine-tuning sweeps on the pre-training host once pre-training ends\n")
    return path
