"""GPU health from NVIDIA's own tools on Kubernetes (issue #16), pure, no server: NVSentinel's node
conditions and DRA DeviceTaintRules become the snapshot's GPU health, and an NVSentinel Xid
becomes the GPU's Xid -- the same GPU and code dcgm-exporter reports, joined, not doubled.

Shapes: the condition as NVSentinel's platform connector writes it (NVIDIA/NVSentinel,
platform-connectors/pkg/connectors/kubernetes/process_node_events.go: type = check name, status
"True", reason ``<check>IsNotHealthy``, message ``ErrorCode:<c> <entity>:<value> ... Recommended
Action=<A>;`` per entity; the SysLogsXIDError message text is from their test fixtures); the
DeviceTaintRule as the Kubernetes API reference (resource.k8s.io/v1beta2) defines it.
"""

from __future__ import annotations

from typing import Any

from diagnosis.edge.schedulers.kubernetes import dra, health
from diagnosis.edge.sources.prometheus.collection import _unit_key, merge_gpus

UUID = "GPU-b5f21324-f1f9-f1a4-1a37-1166234f6e4f"
SINCE = "2026-11-29T07:55:00Z"
XID_79 = (
    f"ErrorCode:79 PCI:0000:ef:00 GPU_UUID:{UUID} MESSAGE=NVRM: Xid (PCI:0000:ef:00): 79, "
    "pid=0, name=<unknown>, GPU has fallen off the bus. Recommended Action=RESTART_BM;"
)


def node(name: str, *conditions: dict[str, Any]) -> dict[str, Any]:
    ready = {"type": "Ready", "status": "True"}
    return {"metadata": {"name": name}, "status": {"conditions": [ready, *conditions]}}


def condition(kind: str, message: str, status: str = "True") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": f"{kind}IsNotHealthy" if status == "True" else f"{kind}IsHealthy",
        "message": message,
        "lastTransitionTime": SINCE,
        "lastHeartbeatTime": SINCE,
    }


def dra_view(*devices: dict[str, Any], taint_rules=()) -> dra.DraView:
    piece = {
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1},
            "devices": list(devices),
        }
    }
    return dra.build_view([piece], [], [], [], taint_rules=taint_rules)


def gpu_device(minor: int, uuid: str) -> dict[str, Any]:
    return {
        "name": f"gpu-{minor}",
        "attributes": {"type": {"string": "gpu"}, "uuid": {"string": uuid}},
    }


DRA_NODE = [{"name": "n1", "gpus": 2}]
TWO_GPUS = (gpu_device(0, "GPU-other"), gpu_device(1, UUID))


def by_index(rows):
    return {(r["node"], r["index"]): r for r in rows}


def test_an_xid_condition_entry_names_its_code_gpu_and_action():
    (entry,) = health.nvsentinel_entries([node("n1", condition("SysLogsXIDError", XID_79))])
    assert entry.xid_codes == (79,)
    assert (entry.gpu_uuid, entry.pci, entry.action) == (UUID, "0000:ef:00", "RESTART_BM")
    assert entry.since == SINCE


def test_the_xid_condition_marks_the_dra_gpu_of_its_uuid_with_the_xid():
    nodes = [node("n1", condition("SysLogsXIDError", XID_79))]
    rows = by_index(health.gpu_rows(dra_view(*TWO_GPUS), nodes, DRA_NODE))
    hit = rows[("n1", 1)]
    assert hit["health"] == "unhealthy"
    assert hit["health_reason"] == "NVSentinel SysLogsXIDError 79 (RESTART_BM)"
    assert hit["xid"] == [{"code": 79, "time": SINCE}]
    assert rows[("n1", 0)]["health"] == "ok"
    assert "xid" not in rows[("n1", 0)]


def test_a_gpu_watch_condition_on_a_device_plugin_node_marks_the_gpu_it_names():
    message = (
        "ErrorCode:DCGM_FR_FAULTY_MEMORY GPU:3 PCI:0000:3b:00.0 GPU_UUID:GPU-3 "
        "GPU memory failure detected on GPU 3 Recommended Action=RESTART_VM;"
    )
    nodes = [node("p1", condition("GpuMemWatch", message))]
    (row,) = health.gpu_rows(dra.DraView.empty(), nodes, [{"name": "p1", "gpus": 8}])
    assert (row["node"], row["index"], row["uuid"], row["health"]) == (
        "p1",
        3,
        "GPU-3",
        "unhealthy",
    )
    assert "xid" not in row  # a memory watch is no Xid


def test_a_healthy_condition_marks_nothing():
    nodes = [node("n1", condition("SysLogsXIDError", "No Health Failures", status="False"))]
    rows = health.gpu_rows(dra_view(*TWO_GPUS), nodes, DRA_NODE)
    assert {r["health"] for r in rows} == {"ok"}


def test_an_entry_naming_no_known_gpu_marks_the_whole_node_without_an_xid():
    message = "ErrorCode:79 PCI:0000:99:00 GPU_UUID:GPU-unknown Recommended Action=RESTART_BM;"
    nodes = [node("n1", condition("SysLogsXIDError", message))]
    rows = health.gpu_rows(dra_view(*TWO_GPUS), nodes, DRA_NODE)
    assert [(r["index"], r["health"]) for r in rows] == [(0, "unhealthy"), (1, "unhealthy")]
    assert not any("xid" in r for r in rows)


def test_a_device_taint_rule_taints_the_device_it_selects():
    rule = {
        "metadata": {"name": "gpu-1-broken"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"},
            "taint": {"key": "gpu.example.com/broken", "value": "xid79", "effect": "NoExecute"},
        },
    }
    rows = by_index(dra.gpu_rows(dra_view(*TWO_GPUS, taint_rules=[rule])))
    assert rows[("n1", 1)]["health"] == "unhealthy"
    assert "gpu.example.com/broken=xid79 (rule gpu-1-broken)" in rows[("n1", 1)]["health_reason"]
    assert rows[("n1", 0)]["health"] == "ok"


def test_an_informational_or_cel_selected_taint_rule_taints_nothing():
    informational = {
        "metadata": {"name": "note"},
        "spec": {"deviceSelector": {}, "taint": {"key": "degraded", "effect": "None"}},
    }
    by_cel = {
        "metadata": {"name": "cel"},
        "spec": {
            "deviceSelector": {"selectors": [{"cel": {"expression": "true"}}]},
            "taint": {"key": "k", "effect": "NoSchedule"},
        },
    }
    rows = dra.gpu_rows(dra_view(*TWO_GPUS, taint_rules=[informational, by_cel]))
    assert {r["health"] for r in rows} == {"ok"}


def test_an_empty_selector_taints_every_device():
    rule = {
        "metadata": {"name": "all"},
        "spec": {"deviceSelector": {}, "taint": {"key": "k", "effect": "NoSchedule"}},
    }
    rows = dra.gpu_rows(dra_view(*TWO_GPUS, taint_rules=[rule]))
    assert {r["health"] for r in rows} == {"unhealthy"}


def test_the_metrics_and_the_condition_report_one_gpu_with_both_xid_rows():
    """dcgm-exporter's Xid and NVSentinel's for the same GPU join on the GPU: one entry."""
    nodes = [node("n1", condition("SysLogsXIDError", XID_79))]
    scheduler = health.gpu_rows(dra_view(*TWO_GPUS), nodes, DRA_NODE)
    metrics = [
        {
            "node": "n1",
            "index": 1,
            "uuid": UUID,
            "xid": [{"code": 79, "time": "2026-11-29T07:55:02Z"}],
        },
        {"node": "n1", "index": 0, "uuid": "GPU-other"},
    ]
    merged = by_index(merge_gpus({_unit_key(g): g for g in scheduler}, metrics))
    assert len(merged) == 2
    assert merged[("n1", 1)]["health"] == "unhealthy"
    assert merged[("n1", 1)]["xid"] == [
        {"code": 79, "time": "2026-11-29T07:55:02Z"},
        {"code": 79, "time": SINCE},
    ]


def device_plugin_merge(uuid: str) -> dict[tuple[str, int], dict[str, Any]]:
    """NVSentinel's Xid 79 for ``uuid`` on device-plugin node p1 (8 GPUs, no UUIDs known to the
    scheduler), joined with dcgm-exporter's entries, which carry each GPU's UUID."""
    message = XID_79.replace(UUID, uuid)
    nodes = [node("p1", condition("SysLogsXIDError", message))]
    scheduler = health.gpu_rows(dra.DraView.empty(), nodes, [{"name": "p1", "gpus": 8}])
    metrics = [{"node": "p1", "index": i, "uuid": f"GPU-p1-{i}"} for i in range(8)]
    return by_index(merge_gpus({_unit_key(g): g for g in scheduler}, metrics))


def test_the_metrics_place_a_device_plugin_gpus_fault_by_its_uuid():
    merged = device_plugin_merge("GPU-p1-5")
    assert merged[("p1", 5)]["health"] == "unhealthy"
    assert merged[("p1", 5)]["xid"] == [{"code": 79, "time": SINCE}]
    assert {merged[("p1", i)]["health"] for i in range(8) if i != 5} == {"ok"}
    assert not any("xid" in merged[("p1", i)] for i in range(8) if i != 5)


def test_a_uuid_the_metrics_do_not_know_leaves_the_whole_node_unhealthy():
    merged = device_plugin_merge("GPU-elsewhere")
    assert {g["health"] for g in merged.values()} == {"unhealthy"}
    assert not any("xid" in g for g in merged.values())
