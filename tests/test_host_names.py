"""An AWS instance billed as its id, whose telemetry names its hostname: linked by core.host_names.

The bill: i-0gpu1, a p4d (8 GPUs) for 48 hours from 1 Sep, each hour covered by a savings plan at
20.00 (2.50 a GPU-hour; tests/test_gpu_hour_prices.py's CUR). nvidia-smi on the instance, saved as
ip-10-0-1-23.csv, names the host ip-10-0-1-23: its 8 GPUs busy on 1 Sep, GPU 0 idle on 2 Sep.

Unlinked, the instance looks unmonitored (a no_telemetry finding of its 960.00, all of it idle in
the attribution) and the idle card is priced from the catalog. Linked (a host names file in any of
its three layouts, or a workload naming both), the idle card is 24 GPU-hours at what was paid,
60.00; the busy hours nobody held are unattributed (900.00), the idle card's idle (60.00).
"""

import json
from datetime import date, timedelta
from decimal import Decimal

import pytest

from models.host_names import HostNamesError, instance_of_provider_id, load_host_names
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline, smi_minutes
from tests.test_gpu_hour_prices import T0, cur, stamp

HOST_NAMES = {
    "hosts.csv": "host,resource_id,owner\nIP-10-0-1-23.ec2.internal,i-0gpu1,ml-platform\nip-10-0-9-9,i-0other,\n",
    "instances.json": json.dumps({"Reservations": [{"ReservationId": "r-1", "Instances": [
        {"InstanceId": "i-0gpu1", "PrivateDnsName": "ip-10-0-1-23.ec2.internal", "PrivateIpAddress": "10.0.1.23"},
        {"InstanceId": "i-0gone", "PrivateDnsName": "", "State": {"Name": "terminated"}}]}]}),
    "nodes.json": json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"metadata": {"name": "ip-10-0-1-23.ec2.internal"}, "spec": {"providerID": "aws:///us-east-1a/i-0gpu1"}}]}),
}


def land_instance_reporting_its_hostname(landing) -> None:
    """The bill of i-0gpu1 and its nvidia-smi file, saved as ip-10-0-1-23.csv."""
    landing.mkdir(exist_ok=True)
    (landing / "cur.csv").write_text(cur())
    (landing / "ip-10-0-1-23.csv").write_text(
        smi_minutes(T0, 48 * 60, 8, lambda minute, gpu: 1 if gpu == 0 and minute >= 1440 else 90, "GPU-p"))


def findings_and_phases(tmp_path, host_names: str | None = None, jobs: str | None = None) -> tuple[list, dict]:
    """Run over the bill and the telemetry (and `jobs`, and the `host_names` file): the unused-GPU
    findings per kind and resource, and the usage charges' money per phase. A second call runs again
    over the same warehouse."""
    landing = tmp_path / "landing"
    land_instance_reporting_its_hostname(landing)
    if jobs:
        (landing / "jobs.csv").write_text(jobs)
    settings = {}
    if host_names:
        (tmp_path / host_names).write_text(HOST_NAMES[host_names])
        settings["host_names_files"] = [str(tmp_path / host_names)]
    outcome = run_pipeline(landing, tmp_path / "wh.duckdb", as_of=date(2026, 9, 4), reporting_currency="USD", **settings)
    assert outcome.success and not outcome.failed_checks, outcome.failed_checks
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        # Per kind and resource (no_telemetry has a finding per hourly charge): the money and the price's source.
        found = fetch_all(conn, """SELECT subkind, resource, sum(wasted_cost), string_agg(DISTINCT split_part(price_source, ':', 1))
                                   FROM findings.unused_gpu GROUP BY ALL ORDER BY ALL""")
        phases = dict(fetch_all(conn, """SELECT phase, sum(amount_billing) FROM marts.cost_attribution a
                                         JOIN core.cost_lines c USING (x_ChargeId)
                                         WHERE c.ChargeCategory = 'Usage' AND c.EffectiveCost > 0 GROUP BY ALL"""))
    finally:
        conn.close()
    return found, phases


def test_unlinked_the_instance_looks_unmonitored_and_its_idle_card_is_priced_from_the_catalog(tmp_path):
    found, phases = findings_and_phases(tmp_path)
    assert [(subkind, resource) for subkind, resource, _, _ in found] == [
        ("idle_run", "ip-10-0-1-23/GPU-p0"), ("no_telemetry", "i-0gpu1")]
    assert found[0][3] == "catalog"
    assert phases == {"idle": Decimal("960.0000000000")}


@pytest.mark.parametrize("host_names", sorted(HOST_NAMES))
def test_a_host_names_file_links_the_instance_to_its_telemetry(tmp_path, host_names):
    found, phases = findings_and_phases(tmp_path, host_names)
    assert [(subkind, resource, wasted.quantize(Decimal("0.01")), source) for subkind, resource, wasted, source in found] == [
        ("idle_run", "ip-10-0-1-23/GPU-p0", Decimal("60.00"), "charge")]
    assert phases == {"unattributed": Decimal("900.0000000000"), "idle": Decimal("60.0000000000")}


def test_a_host_names_file_given_to_a_later_run_relinks_what_was_built(tmp_path):
    """The months already attributed and priced are built again when the file comes: it is part of
    every month's fingerprint, as the other files of the user's are."""
    assert findings_and_phases(tmp_path)[1] == {"idle": Decimal("960.0000000000")}
    found, phases = findings_and_phases(tmp_path, "hosts.csv")
    assert [(subkind, resource) for subkind, resource, _, _ in found] == [("idle_run", "ip-10-0-1-23/GPU-p0")]
    assert phases == {"unattributed": Decimal("900.0000000000"), "idle": Decimal("60.0000000000")}


def test_a_workload_naming_both_its_host_and_the_instance_links_them(tmp_path):
    """A workload file's resource_id column: a 2-GPU fine-tuning job on 1 Sep from 00:00 to 12:00
    (24 GPU-hours of the 192 held that day, 100.00), the rest of the busy hours unattributed."""
    jobs = ("workload_id,phase,host,resource_id,gpu_count,started_at,ended_at\n"
            "ft-1,finetuning,ip-10-0-1-23,i-0gpu1,2,2026-09-01T00:00:00Z,2026-09-01T12:00:00Z\n")
    found, phases = findings_and_phases(tmp_path, jobs=jobs)
    assert [(subkind, resource, wasted.quantize(Decimal("0.01"))) for subkind, resource, wasted, _ in found] == [
        ("idle_run", "ip-10-0-1-23/GPU-p0", Decimal("60.00"))]
    assert phases == {"finetuning": Decimal("60.0000000000"), "unattributed": Decimal("840.0000000000"),
                      "idle": Decimal("60.0000000000")}


def test_host_names_files_are_read_strictly(tmp_path):
    csv_file = tmp_path / "hosts.csv"
    csv_file.write_text("host,resource_id\nip-10-0-1-23,i-0abc\n,i-0def\n")
    with pytest.raises(HostNamesError, match=r"hosts.csv, line 3: host and resource_id must both be given"):
        load_host_names([csv_file])
    # The same host written with and without its domain is one host.
    csv_file.write_text("host,resource_id\nip-10-0-1-23,i-0abc\nIP-10-0-1-23.ec2.internal,i-0abc\n")
    assert load_host_names([csv_file]).to_pylist() == [
        {"host": "ip-10-0-1-23", "resource_id": "i-0abc", "source": "host names file hosts.csv"}]
    # Files add up; a resource two of them name differently is refused, naming both.
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"items": [{"metadata": {"name": "ip-10-0-2-2.ec2.internal"},
                                            "spec": {"providerID": "aws:///us-east-1a/i-0eks"}}, None, "x"]}))
    assert sorted(r["resource_id"] for r in load_host_names([csv_file, nodes]).to_pylist()) == ["i-0abc", "i-0eks"]
    nodes.write_text(json.dumps({"items": [{"metadata": {"name": "ip-10-0-9-9"}, "spec": {"providerID": "aws:///z/i-0abc"}}]}))
    with pytest.raises(HostNamesError, match=r"resource i-0abc is named ip-10-0-1-23 \(hosts.csv, line 2\) and ip-10-0-9-9 "
                                             r"\(nodes.json, node ip-10-0-9-9\)"):
        load_host_names([csv_file, nodes])
    other = tmp_path / "other.json"
    for text, message in ((json.dumps({"Instances": []}), "neither `aws ec2 describe-instances` output"),
                          ("{not json", "not valid JSON"),
                          (json.dumps({"Reservations": [None, "r", {"Instances": [None, {"InstanceId": "i-0x"}]}]}),
                           "names no resource and host"),
                          (json.dumps({"kind": "PodList", "items": [{"metadata": {"name": "trainer-0"}, "spec": {}}]}),
                           "names no resource and host")):
        other.write_text(text)
        with pytest.raises(HostNamesError, match=message):
            load_host_names([other])
    other.write_bytes("host,resource_id\nhôte-1,i-0abc\n".encode("cp1252"))
    with pytest.raises(HostNamesError, match="other.json: not UTF-8 text; save it as UTF-8"):
        load_host_names([other])
    assert load_host_names([]).num_rows == 0
    assert [instance_of_provider_id(p) for p in ("aws:///us-east-1a/i-0abc", "gce://proj/europe-west4-a/gke-node-1",
                                                  "azure:///subscriptions/s/resourceGroups/g/providers/x/vm-1")] == [
        "i-0abc", "gke-node-1", "/subscriptions/s/resourceGroups/g/providers/x/vm-1"]


def test_a_link_keeps_the_host_the_bill_names_too(tmp_path):
    """A FOCUS bill of i-0a, named trainer-01 (8 GPUs, 24 h at 32.00: 4.00 a GPU-hour), whose
    telemetry names trainer-01 (its Name tag is its hostname); cards 6 and 7 idle all day. The
    fleet's describe-instances links i-0a to ip-10-0-1-23 too: the bill's own name still meets the
    telemetry. Before, the link replaced it in the prices, and the findings made the whole bill
    unmonitored (768.00) and priced the idle cards from the catalog, beside an attribution that
    found the telemetry."""
    focus = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
             "ServiceName,ServiceCategory,ResourceId,ResourceName,x_GpuCount,x_GpuModel\n" + "".join(
                 f"32.00,32.00,USD,Usage,{stamp(T0 + timedelta(hours=h))},{stamp(T0 + timedelta(hours=h + 1))},AWS,"
                 "Amazon Elastic Compute Cloud,Compute,i-0a,trainer-01,8,A100-40GB\n" for h in range(24)))
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "focus.csv").write_text(focus)
    (landing / "trainer-01.csv").write_text(smi_minutes(T0, 24 * 60, 8, lambda minute, gpu: 1 if gpu >= 6 else 90, "GPU-a",
                                                        model="NVIDIA A100-SXM4-40GB"))
    (tmp_path / "instances.json").write_text(json.dumps({"Reservations": [{"Instances": [
        {"InstanceId": "i-0a", "PrivateDnsName": "ip-10-0-1-23.us-west-2.compute.internal"}]}]}))
    assert run_pipeline(landing, tmp_path / "wh.duckdb", as_of=date(2026, 9, 4), reporting_currency="USD",
                        host_names_files=[str(tmp_path / "instances.json")]).success
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        found = fetch_all(conn, "SELECT subkind, resource, wasted_cost, price_source FROM findings.unused_gpu ORDER BY ALL")
        phases = dict(fetch_all(conn, "SELECT phase, sum(amount_billing) FROM marts.cost_attribution GROUP BY ALL"))
    finally:
        conn.close()
    assert found == [("idle_run", f"trainer-01/GPU-a{g}", Decimal("96.0000000000"), "charge") for g in (6, 7)]
    assert phases == {"unattributed": Decimal("576.0000000000"), "idle": Decimal("192.0000000000")}


def test_the_command_line_reads_every_host_names_file_and_says_what_they_linked(tmp_path, monkeypatch):
    """`--host-names` repeated (an EC2 fleet's describe-instances beside an EKS cluster's nodes):
    both files link, and the run says how many billed resources each source linked. A file naming
    nothing is refused (exit 2) before anything runs."""
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.delenv("FINOPS_HOST_NAMES", raising=False)
    landing = tmp_path / "landing"
    land_instance_reporting_its_hostname(landing)
    (tmp_path / "instances.json").write_text(HOST_NAMES["instances.json"])
    (tmp_path / "nodes.json").write_text(json.dumps({"items": [
        {"metadata": {"name": "ip-10-0-2-2.ec2.internal"}, "spec": {"providerID": "aws:///us-east-1a/i-0eks"}}]}))
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "PodList", "items": [{"metadata": {"name": "p"}, "spec": {}}]}))
    run = ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--as-of", "2026-09-04"]
    refused = CliRunner().invoke(app, [*run, "--host-names", str(tmp_path / "pods.json")], terminal_width=200)
    assert refused.exit_code == 2 and "pods.json: names no resource and host" in refused.stderr
    done = CliRunner().invoke(app, [*run, "--host-names", str(tmp_path / "instances.json"),
                                    "--host-names", str(tmp_path / "nodes.json")], terminal_width=200)
    assert done.exit_code == 0, done.output
    assert ("host names: 2 resources linked to the host their telemetry names (instances.json 1, nodes.json 1); "
            "1 of them billed for GPUs, 1 reporting telemetry under that host (core.host_names)") in done.stdout
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert fetch_all(conn, "SELECT resource_id, host FROM core.host_names ORDER BY 1") == [
            ("i-0eks", "ip-10-0-2-2"), ("i-0gpu1", "ip-10-0-1-23")]
    finally:
        conn.close()
