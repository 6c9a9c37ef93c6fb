"""Issue #16: health that NVIDIA's tools publish is incident input, not a second incident. An
NVSentinel ``SysLogsXIDError`` node condition (read by the Kubernetes adapters,
diagnosis/edge/schedulers/kubernetes/health.py) opens the GPU's incident and keeps it open while
it lasts; the same Xid seen by dcgm-exporter too makes one finding and one incident.

The GPU entries come from the real readers (``health.gpu_rows`` over the condition's shape,
``merge_gpus`` with the metrics' entry) and go into hand-built snapshots through the cycle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.edge.schedulers.kubernetes import dra, health
from diagnosis.edge.sources.prometheus.collection import _unit_key, merge_gpus
from diagnosis.models import Finding, Incident
from tests.support.builders import AS_OF, SnapshotBuilder, rfc3339

pytestmark = pytest.mark.django_db

UUID = "GPU-b5f21324-f1f9-f1a4-1a37-1166234f6e4f"
SINCE = rfc3339(AS_OF - timedelta(minutes=5))
DCGM_AT = rfc3339(AS_OF - timedelta(minutes=5) + timedelta(seconds=2))  # dcgm-exporter, later
XID_79 = (
    f"ErrorCode:79 PCI:0000:ef:00 GPU_UUID:{UUID} MESSAGE=NVRM: Xid (PCI:0000:ef:00): 79, "
    "pid=0, name=<unknown>, GPU has fallen off the bus. Recommended Action=RESTART_BM;"
)
NODE = {
    "metadata": {"name": "n1"},
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True"},
            {
                "type": "SysLogsXIDError",
                "status": "True",
                "reason": "SysLogsXIDErrorIsNotHealthy",
                "message": XID_79,
                "lastTransitionTime": SINCE,
            },
        ]
    },
}


def scheduler_gpus() -> list[dict]:
    """What the Kubernetes adapter reports of n1: its two DRA GPUs, GPU 1 under the condition."""
    devices = [
        {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": u}}}
        for i, u in enumerate(("GPU-zero", UUID))
    ]
    piece = {
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1},
            "devices": devices,
        }
    }
    view = dra.build_view([piece], [], [], [])
    return health.gpu_rows(view, [NODE], [{"name": "n1", "gpus": 2}])


def snapshot(gpus: list[dict], *, minutes: int = 0):
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="sentinel")
    builder.node("n1", gpus=2).queue("hpo")
    builder.doc["gpus"] = [{**g, "util": {"mean": 0.0}} for g in gpus]
    return builder.build()


@pytest.fixture
def cluster(make_cluster):
    return make_cluster("sentinel", metrics_kind="none")


def test_the_condition_alone_opens_the_gpus_incident(cluster):
    record_cycle(cluster, snapshot(scheduler_gpus()))
    incident = Incident.objects.get(cluster=cluster)
    assert (incident.node, incident.gpu_index, incident.xid_code) == ("n1", 1, 79)
    assert incident.opened_at == AS_OF - timedelta(minutes=5)


def test_the_condition_keeps_the_incident_open_while_it_lasts(cluster):
    record_cycle(cluster, snapshot(scheduler_gpus()))
    for minutes in (30, 90):  # NVSentinel still reports the Xid, long out of the window
        record_cycle(cluster, snapshot(scheduler_gpus(), minutes=minutes))
    assert Finding.objects.get(cluster=cluster, rule_id="xid").state == "firing"
    assert Incident.objects.get(cluster=cluster).state == "open"


def test_the_same_xid_from_dcgm_and_from_the_condition_is_one_incident(cluster):
    metrics = [
        {"node": "n1", "index": 0, "uuid": "GPU-zero"},
        {"node": "n1", "index": 1, "uuid": UUID, "xid": [{"code": 79, "time": DCGM_AT}]},
    ]
    merged = merge_gpus({_unit_key(g): g for g in scheduler_gpus()}, metrics)
    record_cycle(cluster, snapshot(merged))
    assert Finding.objects.filter(cluster=cluster, rule_id="xid").count() == 1
    assert Incident.objects.filter(cluster=cluster).count() == 1


def test_on_a_device_plugin_node_the_metrics_uuid_places_the_incident(cluster):
    """No DRA: the scheduler cannot tell which GPU the condition's UUID is; dcgm-exporter can."""
    scheduler = health.gpu_rows(dra.DraView.empty(), [NODE], [{"name": "n1", "gpus": 2}])
    metrics = [
        {"node": "n1", "index": 0, "uuid": "GPU-zero"},
        {"node": "n1", "index": 1, "uuid": UUID},
    ]
    record_cycle(cluster, snapshot(merge_gpus({_unit_key(g): g for g in scheduler}, metrics)))
    incident = Incident.objects.get(cluster=cluster)
    assert (incident.node, incident.gpu_index, incident.xid_code) == ("n1", 1, 79)
