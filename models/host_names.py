"""The host name telemetry gives a billed resource, from the user's own file (`--host-names`).

An AWS instance is billed as `i-0abc…` while nvidia-smi and dcgm-exporter on it name its hostname
(`ip-10-0-1-23`): without a link, its paid hours look unmonitored and its idle cards are priced from
the catalog. Three layouts link them, whichever the user has at hand:

* a CSV with the columns `host` and `resource_id` (any others are ignored);
* the JSON `aws ec2 describe-instances` prints: each instance's `InstanceId` and `PrivateDnsName`;
* the JSON `kubectl get nodes -o json` prints: each node's name and the instance in its
  `spec.providerID` (`aws:///us-east-1a/i-0abc…` → `i-0abc…`, `gce://project/zone/name` → `name`).

Several files add up (an EC2 fleet's describe-instances beside an EKS cluster's nodes).

Read with the standard library: the files are small (a row per machine), and describe-instances'
nesting is simpler walked than flattened by a frame library.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pyarrow as pa

HOST_NAMES = pa.schema([("host", pa.string()), ("resource_id", pa.string()), ("source", pa.string())])


class HostNamesError(ValueError):
    pass


def instance_of_provider_id(provider_id: str) -> str:
    """The billed id in a Kubernetes node's providerID: the instance for AWS and Google Cloud
    (the last part of the path), else everything after the scheme."""
    scheme, _, rest = provider_id.strip().partition("://")
    if scheme in ("aws", "gce"):
        return rest.rstrip("/").rsplit("/", 1)[-1]
    return rest or provider_id.strip()


def _from_json(document, path: Path) -> list[tuple[str, str, str]]:
    """(host, resource_id, where) of describe-instances' or kubectl's output."""
    def objects(items) -> list[dict]:
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    pairs = []
    if isinstance(document, dict) and "Reservations" in document:
        for reservation in objects(document.get("Reservations")):
            for instance in objects(reservation.get("Instances")):
                # A terminated instance has no DNS name left: nothing can name it (README: a snapshot).
                host = instance.get("PrivateDnsName") or instance.get("PrivateIpAddress")
                if isinstance(host, str) and host and isinstance(instance.get("InstanceId"), str):
                    pairs.append((host, instance["InstanceId"], f"{path.name}, instance {instance['InstanceId']}"))
        return pairs
    if isinstance(document, dict) and isinstance(document.get("items"), list):
        for node in objects(document["items"]):
            name = (node.get("metadata") or {}).get("name") if isinstance(node.get("metadata"), dict) else None
            provider_id = (node.get("spec") or {}).get("providerID") if isinstance(node.get("spec"), dict) else None
            if isinstance(name, str) and name and isinstance(provider_id, str) and provider_id:
                pairs.append((name, instance_of_provider_id(provider_id), f"{path.name}, node {name}"))
        return pairs
    raise HostNamesError(f"{path.name}: JSON that is neither `aws ec2 describe-instances` output (Reservations) "
                         "nor `kubectl get nodes -o json` output (items)")


def _from_csv(text: str, path: Path) -> list[tuple[str, str, str]]:
    reader = csv.DictReader(io.StringIO(text))
    columns = {(name or "").strip().lower(): name for name in reader.fieldnames or []}
    if "host" not in columns or "resource_id" not in columns:
        raise HostNamesError(f"{path.name}: a host names CSV needs the columns host and resource_id "
                             f"(found {', '.join(reader.fieldnames or []) or 'none'})")
    pairs = []
    for line, row in enumerate(reader, start=2):
        host, resource_id = ((row.get(columns[c]) or "").strip() for c in ("host", "resource_id"))
        if not host or not resource_id:
            raise HostNamesError(f"{path.name}, line {line}: host and resource_id must both be given")
        pairs.append((host, resource_id, f"{path.name}, line {line}"))
    return pairs


def short_host(host: str) -> str:
    """A host as telemetry's is compared: lower case, the domain dropped, an IP address whole (the
    rule of norm_host in sql/macros.sql and of the connectors' normalise_host, which models/ cannot
    import)."""
    host = host.strip().lower()
    return host if re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}", host) else host.split(".", 1)[0]


def read_pairs(path: Path) -> list[tuple[str, str, str]]:
    """(host, resource_id, where) of one file, whichever its layout."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise HostNamesError(f"{path.name}: not UTF-8 text; save it as UTF-8") from None
    if text.lstrip().startswith(("{", "[")):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HostNamesError(f"{path.name}: not valid JSON ({exc})") from None
        pairs = _from_json(document, path)
    else:
        pairs = _from_csv(text, path)
    if not pairs:
        raise HostNamesError(f"{path.name}: names no resource and host (instances without a DNS name, nodes without a "
                             "providerID, or an empty table)")
    return pairs


def load_host_names(paths: list[Path] | tuple[Path, ...] = ()) -> pa.Table:
    """One row per resource and the host telemetry names it, from every file (none without one).
    A resource named two different hosts, in one file or across them, is an error: which one
    reports its GPUs is then unknown."""
    hosts: dict[str, tuple[str, str, str]] = {}  # resource → (host, where, file)
    for path in map(Path, paths):
        for host, resource_id, where in read_pairs(path):
            known = hosts.setdefault(resource_id, (host, where, path.name))
            if short_host(known[0]) != short_host(host):
                raise HostNamesError(f"resource {resource_id} is named {known[0]} ({known[1]}) and {host} ({where}); "
                                     "give it one host")
    rows = [(host, resource_id, f"host names file {file}") for resource_id, (host, _, file) in hosts.items()]
    return pa.table([list(c) for c in zip(*rows)] if rows else [[], [], []], schema=HOST_NAMES)
