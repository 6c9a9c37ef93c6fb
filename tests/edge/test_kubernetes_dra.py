"""GPUs through DRA (resource.k8s.io/v1, driver gpu.nvidia.com) read by the real ``kubernetes``
client from the loopback API server: a DRA-only cluster (no allocatable nvidia.com/gpu, no GPU
Feature Discovery labels), a mixed one, and the same cluster expressed both ways giving the same
findings."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from diagnosis.core import snapshot
from diagnosis.core.rules.engine import run_rules
from diagnosis.edge.schedulers.kubernetes.volcano import VolcanoAdapter
from tests.support.kube_server import (
    KubeApiServer,
    adapter_config,
    kube_api_fixture,
    load_fixture,
    serving,
)

pytestmark = pytest.mark.kubernetes

H100 = "NVIDIA H100 80GB HBM3"
UUID = "GPU-4b2a7e10-91c3-4f55-a0d1-3c9e8f00000{}"
MIG_1G = "MIG-7f0e1d2c-0000-5a5a-8000-000000000001"


kube_api = kube_api_fixture()


@pytest.fixture
def dra_only(kube_api: KubeApiServer) -> Callable[[], Any]:
    kube_api.load(load_fixture("dra"))
    return lambda: VolcanoAdapter(adapter_config()).read_state()


def by(rows: list[dict[str, Any]], key: str = "name") -> dict[Any, dict[str, Any]]:
    return {row[key]: row for row in rows}


def as_snapshot(state, as_of: str = "2026-11-29T08:00:00Z") -> snapshot.ClusterSnapshot:
    return snapshot.load(
        {
            "format": snapshot.FORMAT,
            "cluster": "k8s",
            "as_of": as_of,
            "scheduler": state.scheduler,
            "nodes": state.nodes,
            "gpus": state.gpus,
            "queues": state.queues,
            "jobs": state.jobs,
        }
    )


def test_dra_only_nodes_come_from_resource_slices(dra_only) -> None:
    nodes = by(dra_only().nodes)
    assert nodes["dra-h-1"] == {
        "name": "dra-h-1",
        "pool": "NVIDIA-H100-80GB-HBM3",  # the productName as GFD would label it
        "gpus": 4,  # the old pool generation's gpu-9 is gone
        "state": "ready",
        "gpu_model": H100,
    }
    assert (nodes["dra-a-1"]["gpus"], nodes["dra-a-1"]["gpu_model"]) == (1, "NVIDIA A100-SXM4-80GB")


def test_dra_gpus_carry_uuids_and_guessed_indexes(dra_only) -> None:
    gpus = by(dra_only().gpus, "uuid")
    assert gpus[UUID.format(1)] == {
        "node": "dra-h-1",
        "index": 1,
        "index_guessed": True,  # the device name holds the minor number, not the NVML index
        "uuid": UUID.format(1),
        "health": "ok",
        "nvlink_clique": "8c3f1e2a-7d4b-4b1e-9f61-0a1b2c3d4e5f.1",
    }
    assert "GPU-00000000-dead-beef-0000-000000000009" not in gpus


def test_a_mig_enabled_gpu_is_its_mig_instances(dra_only) -> None:
    gpus = [g for g in dra_only().gpus if g["node"] == "dra-a-1"]
    assert [(g["uuid"], g["index"], g["mig"]) for g in gpus] == [
        (
            MIG_1G,
            0,
            {
                "profile": "1g.10gb",
                "instance": 0,
                "parent_uuid": "GPU-a100a100-1111-4222-8333-000000000000",
                "compute_fraction": round(1 / 7, 6),
            },
        ),
        (
            "MIG-7f0e1d2c-0000-5a5a-8000-000000000002",
            0,
            {
                "profile": "3g.40gb",
                "instance": 1,
                "parent_uuid": "GPU-a100a100-1111-4222-8333-000000000000",
                "compute_fraction": round(3 / 7, 6),
            },
        ),
    ]


def test_a_tainted_device_is_unhealthy_with_the_reason(dra_only) -> None:
    gpu = by(dra_only().gpus, "uuid")[UUID.format(3)]
    assert (gpu["health"], gpu["health_reason"]) == ("unhealthy", "taint gpu.nvidia.com/xid=79")


def test_a_claims_devices_are_the_pods_allocation_by_uuid(dra_only) -> None:
    job = by(dra_only().jobs, "id")["research/train-0"]
    assert (job["state"], job["gpus_per_pod"]) == ("running", 2)
    assert job["allocation"] == [
        {"node": "dra-h-1", "gpus": [0, 1], "uuids": [UUID.format(0), UUID.format(1)]}
    ]


def test_a_shared_claim_gives_each_pod_a_share(dra_only) -> None:
    jobs = by(dra_only().jobs, "id")
    for pod in ("serving/infer-a", "serving/infer-b"):
        assert jobs[pod]["allocation"] == [
            {"node": "dra-h-1", "gpus": [2], "uuids": [UUID.format(2)], "share": 0.5}
        ]


def test_a_mig_claim_holds_the_instance_on_its_parents_index(dra_only) -> None:
    job = by(dra_only().jobs, "id")["research/notebook"]
    assert job["allocation"] == [{"node": "dra-a-1", "gpus": [0], "uuids": [MIG_1G]}]


def test_admin_access_claims_hold_nothing(dra_only) -> None:
    held = [a for j in dra_only().jobs for a in j.get("allocation", ())]
    assert sum(a["gpus"].count(0) for a in held if a["node"] == "dra-h-1") == 1  # train-0 only


def test_a_pending_pod_asks_what_its_claim_template_asks(dra_only) -> None:
    job = by(dra_only().jobs, "id")["research/eval-0"]
    assert (job["state"], job["gpus_per_pod"], job["allocation"]) == ("pending", 1, [])


def test_dra_state_is_a_valid_snapshot(dra_only) -> None:
    snap = as_snapshot(dra_only())
    assert snap.total_gpus == 6  # 4 H100 and the A100's two MIG instances


def test_a_mixed_cluster_has_both_kinds_of_node(kube_api: KubeApiServer) -> None:
    kube_api.load(load_fixture("nodes"))
    kube_api.load(load_fixture("volcano"))
    kube_api.load(load_fixture("dra"))
    state = VolcanoAdapter(adapter_config()).read_state()
    nodes = by(state.nodes)
    assert {"gpu-a-1", "gpu-h-1", "dra-h-1", "dra-a-1"} <= set(nodes)
    assert nodes["gpu-a-1"]["gpus"] == 8
    assert nodes["dra-h-1"]["gpus"] == 4
    assert {g["node"] for g in state.gpus} == {"dra-h-1", "dra-a-1"}  # device plugin: none known
    as_snapshot(state)


def test_a_cluster_without_dra_is_read_as_before(kube_api: KubeApiServer) -> None:
    kube_api.unserved.add("resource.k8s.io/v1")
    kube_api.load(load_fixture("nodes"))
    state = VolcanoAdapter(adapter_config()).read_state()
    assert state.gpus == []
    assert not kube_api.requests_to("GET", "/resource.k8s.io/")


# -- one cluster, two ways -----------------------------------------------------------------------

NODES = ("twin-1", "twin-2")
# (pod, node, GPU indexes); twin-1 and twin-2 keep 1 GPU free each; eval asks 2: blocked by
# fragmentation, not by capacity.
HELD = [("train-0", "twin-1", (0, 1, 2)), ("train-1", "twin-2", (1, 2, 3))]


def _node(name: str, device_plugin: bool) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    resources = {"cpu": "64", "pods": "110"}
    if device_plugin:
        labels["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
        resources["nvidia.com/gpu"] = "4"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(name: str, node: str | None, device_plugin: bool, gpus: tuple[int, ...]) -> dict:
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/pytorch:25.10-py3"}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "research",
            "uid": f"7a000000-0000-4000-8000-{name.encode().hex()[-12:]:0>12}",
            "creationTimestamp": "2026-11-29T06:00:00Z",
        },
        "spec": {"containers": [container]},
        "status": {"phase": "Running" if node else "Pending", "startTime": "2026-11-29T06:00:05Z"},
    }
    count = len(gpus) or 2
    if device_plugin:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(count)}}
        if gpus:
            pod["metadata"]["annotations"] = {"volcano.sh/gpu-index": ",".join(map(str, gpus))}
    else:
        container["resources"] = {"claims": [{"name": "gpus"}]}
        pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
    if node:
        pod["spec"]["nodeName"] = node
    else:
        pod["metadata"]["creationTimestamp"] = "2026-11-29T07:00:00Z"
        pod["status"].pop("startTime")
    return pod


def _claim(pod: dict[str, Any], node: str | None, gpus: tuple[int, ...]) -> dict[str, Any]:
    name = pod["metadata"]["name"]
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{name}-gpus", "namespace": "research"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
                ]
            }
        },
    }
    if node:
        claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = len(gpus)
        results = [
            {"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{i}"}
            for i in gpus
        ]
        claim["status"] = {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}],
        }
    return claim


def _slice(node: str) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": f"GPU-{node}-0000-4000-8000-00000000000{i}"},
                "productName": {"string": H100},
            },
        }
        for i in range(4)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def twin_cluster(device_plugin: bool) -> list[dict[str, Any]]:
    objects = [_node(n, device_plugin) for n in NODES]
    for name, node, gpus in [*HELD, ("eval", None, ())]:
        pod = _pod(name, node, device_plugin, gpus)
        objects.append(pod)
        if not device_plugin:
            objects.append(_claim(pod, node, gpus))
    if not device_plugin:
        objects.extend(_slice(n) for n in NODES)
    return copy.deepcopy(objects)


def findings_of(server: KubeApiServer, objects: list[dict[str, Any]]) -> list[tuple]:
    server.load(objects)
    snap = as_snapshot(VolcanoAdapter(adapter_config()).read_state())
    return sorted((f.rule, f.subject, f.severity) for f in run_rules(snap).findings)


def test_rules_find_the_same_on_dra_as_on_the_device_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(tmp_path, monkeypatch) as server:
        plugin = findings_of(server, twin_cluster(device_plugin=True))
    (tmp_path / "dra").mkdir()
    with serving(tmp_path / "dra", monkeypatch) as server:
        dra = findings_of(server, twin_cluster(device_plugin=False))
    assert ("fragmentation", "pool:NVIDIA-H100-80GB-HBM3", "critical") in plugin
    assert dra == plugin


def test_a_claims_device_condition_makes_it_unhealthy(kube_api: KubeApiServer) -> None:
    objects = load_fixture("dra")
    claim = next(o for o in objects if o["metadata"]["name"] == "notebook-mig-mig-4qz8s")
    claim["status"]["devices"][0]["conditions"] = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "DeviceLost",
            "message": "Xid 79",
            "lastTransitionTime": "2026-11-29T07:50:00Z",
        }
    ]
    kube_api.load(objects)
    gpu = by(VolcanoAdapter(adapter_config()).read_state().gpus, "uuid")[MIG_1G]
    assert (gpu["health"], gpu["health_reason"]) == ("unhealthy", "DeviceLost: Xid 79")


def test_a_pods_resource_health_makes_its_device_unhealthy(kube_api: KubeApiServer) -> None:
    objects = load_fixture("dra")
    pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "train-0")
    pod["status"]["containerStatuses"] = [
        {
            "name": "trainer",
            "image": "nvcr.io/nvidia/pytorch:25.10-py3",
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "allocatedResourcesStatus": [
                {
                    "name": "claim:gpus",
                    "resources": [
                        {"resourceID": "gpu.nvidia.com/dra-h-1/gpu-1", "health": "Unhealthy"}
                    ],
                }
            ],
        }
    ]
    kube_api.load(objects)
    gpus = by(VolcanoAdapter(adapter_config()).read_state().gpus, "uuid")
    assert gpus[UUID.format(1)]["health"] == "unhealthy"
    assert gpus[UUID.format(0)]["health"] == "ok"


def test_a_pod_asking_the_extended_resource_is_served_by_its_dra_claim(dra_only) -> None:
    """KEP-5004: ``nvidia.com/gpu: 1`` on a DRA node, the claim kube-scheduler made for it named
    in ``status.extendedResourceClaimStatus``: the exact device, not a lowest-free guess."""
    job = by(dra_only().jobs, "id")["research/legacy-0"]
    assert job["allocation"] == [{"node": "dra-h-1", "gpus": [3], "uuids": [UUID.format(3)]}]
