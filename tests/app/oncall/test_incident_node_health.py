"""Issue #16: a health fault that names no GPU gpuobs can identify opens a node incident. An
NVSentinel ``SysLogsXIDError`` condition on a device-plugin node whose entry names the GPU only
by PCI address marks every GPU of the node unhealthy without an Xid
(diagnosis/edge/schedulers/kubernetes/health.py): on-call gets one incident for the node
(``gpu_index`` null), kept open while the condition lasts, never a second one beside a GPU
incident of that node.

The GPU entries come from the real reader (``health.gpu_rows`` over the condition's shape, as
NVSentinel's platform connector writes it: NVIDIA/NVSentinel platform-connectors/pkg/connectors/
kubernetes/process_node_events.go) and go into hand-built snapshots through the cycle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.oncall.incidents import acknowledge_incident, resolve_incident_by
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.edge.schedulers.kubernetes import dra, health
from diagnosis.models import Incident
from tests.support.builders import AS_OF, SnapshotBuilder, rfc3339
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

SINCE = rfc3339(AS_OF - timedelta(minutes=5))
NO_GPU_NAMED = (  # a PCI address only: neither a UUID nor a GPU index
    "ErrorCode:79 PCI:0000:ef:00 MESSAGE=NVRM: Xid (PCI:0000:ef:00): 79, pid=0, "
    "name=<unknown>, GPU has fallen off the bus. Recommended Action=RESTART_BM;"
)


def node(message: str | None) -> dict:
    conditions = [{"type": "Ready", "status": "True"}]
    if message is not None:
        conditions.append(
            {
                "type": "SysLogsXIDError",
                "status": "True",
                "reason": "SysLogsXIDErrorIsNotHealthy",
                "message": message,
                "lastTransitionTime": SINCE,
            }
        )
    return {"metadata": {"name": "n1"}, "status": {"conditions": conditions}}


def scheduler_gpus(message: str | None = NO_GPU_NAMED) -> list[dict]:
    """What the Kubernetes adapter reports of n1, a device-plugin node of 2 GPUs."""
    return health.gpu_rows(dra.DraView.empty(), [node(message)], [{"name": "n1", "gpus": 2}])


def snapshot(gpus: list[dict], *, minutes: int = 0, xid_on_gpu0: bool = False):
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="sentinel")
    builder.node("n1", gpus=2).queue("hpo")
    rows = [{**g, "util": {"mean": 0.0}} for g in gpus] or [
        {"node": "n1", "index": i, "util": {"mean": 0.0}} for i in range(2)
    ]
    if xid_on_gpu0:  # dcgm-exporter's Xid on GPU 0 a minute before the snapshot
        at = rfc3339(AS_OF + timedelta(minutes=minutes - 1))
        rows = [{**r, "xid": [{"code": 79, "time": at}]} if r["index"] == 0 else r for r in rows]
    builder.doc["gpus"] = rows
    return builder.build()


@pytest.fixture
def cluster(make_cluster):
    return make_cluster("sentinel", metrics_kind="none")


def test_a_fault_naming_no_gpu_opens_one_node_incident(cluster):
    gpus = scheduler_gpus()
    assert [g["health"] for g in gpus] == ["unhealthy", "unhealthy"]  # the reader's view
    assert not any(g.get("xid") for g in gpus)
    record_cycle(cluster, snapshot(gpus))
    incident = Incident.objects.get(cluster=cluster)
    assert (incident.node, incident.gpu_index, incident.source) == ("n1", None, "node-health")
    assert incident.state == "open"


def test_the_node_incident_stays_open_and_single_while_the_condition_lasts(cluster, erin):
    record_cycle(cluster, snapshot(scheduler_gpus()))
    acknowledge_incident(Incident.objects.get(cluster=cluster), erin)
    for minutes in (30, 90, 600):  # long past the xid rule's healthy period
        record_cycle(cluster, snapshot(scheduler_gpus(), minutes=minutes))
    incident = Incident.objects.get(cluster=cluster)
    assert incident.state == "acknowledged"
    assert incident.details["health"]["healthy"] is False


def test_the_node_incident_resolves_once_the_node_has_been_healthy_long_enough(cluster, erin):
    record_cycle(cluster, snapshot(scheduler_gpus()))
    acknowledge_incident(Incident.objects.get(cluster=cluster), erin)
    for minutes in (30, 90):  # the condition cleared: NVSentinel's status False
        record_cycle(cluster, snapshot(scheduler_gpus(None), minutes=minutes))
    assert Incident.objects.get(cluster=cluster).state == "resolved"


def test_an_xid_on_one_of_its_gpus_joins_the_node_incident(cluster):
    record_cycle(cluster, snapshot(scheduler_gpus()))
    record_cycle(cluster, snapshot(scheduler_gpus(), minutes=10, xid_on_gpu0=True))
    incident = Incident.objects.get(cluster=cluster)
    assert incident.gpu_index is None
    assert [c["code"] for c in incident.details["codes"]] == [79]


def test_a_node_with_a_gpu_incident_gets_no_node_incident(cluster):
    record_cycle(cluster, snapshot(scheduler_gpus(), xid_on_gpu0=True))
    record_cycle(cluster, snapshot(scheduler_gpus(), minutes=10, xid_on_gpu0=True))
    incident = Incident.objects.get(cluster=cluster)
    assert (incident.gpu_index, incident.source) == (0, "rule:xid")


def test_resolved_while_unhealthy_it_is_not_opened_again_until_the_node_heals(cluster, erin):
    record_cycle(cluster, snapshot(scheduler_gpus()))
    resolve_incident_by(Incident.objects.get(cluster=cluster), erin, "known, RMA filed")
    record_cycle(cluster, snapshot(scheduler_gpus(), minutes=10))
    assert Incident.objects.filter(cluster=cluster).count() == 1

    record_cycle(cluster, snapshot(scheduler_gpus(None), minutes=20))  # healthy: episode over
    record_cycle(cluster, snapshot(scheduler_gpus(), minutes=30))  # the fault again
    assert list(
        Incident.objects.filter(cluster=cluster).order_by("pk").values_list("state", flat=True)
    ) == ["resolved", "open"]


def test_the_node_incident_page_says_what_broke(cluster, erin):
    record_cycle(cluster, snapshot(scheduler_gpus()))
    incident = Incident.objects.get(cluster=cluster)
    client = logged_in_client(erin)
    page = client.get(f"/clusters/{cluster.name}/incidents/{incident.pk}/")
    assert page.status_code == 200
    assert "all 2 GPUs unhealthy, no GPU named" in page.content.decode()
    listed = client.get(f"/clusters/{cluster.name}/incidents/").content.decode()
    assert f'href="/clusters/{cluster.name}/incidents/{incident.pk}/"' in listed
