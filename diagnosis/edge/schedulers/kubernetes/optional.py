"""What a Kubernetes cluster may serve beyond a scheduler's own kinds, read by every Kubernetes
adapter where the API serves it (discovery): DRA (``resource.k8s.io/v1``: ResourceSlices,
ResourceClaims, ResourceClaimTemplates, DeviceClasses, see :mod:`.dra`) and the native gang
API (``scheduling.k8s.io`` Workload: a pod group with ``policy.gang.minCount`` is a gang).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from diagnosis.edge.schedulers.kubernetes import dra
from diagnosis.edge.schedulers.kubernetes.client import Resource, custom_resource, meta
from diagnosis.edge.schedulers.kubernetes.objects import GpuPod, pod_gang, rfc3339

DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
RESOURCE_SLICES = custom_resource(DRA_GROUP, DRA_VERSION, "resourceslices")
RESOURCE_CLAIMS = custom_resource(DRA_GROUP, DRA_VERSION, "resourceclaims")
RESOURCE_CLAIM_TEMPLATES = custom_resource(DRA_GROUP, DRA_VERSION, "resourceclaimtemplates")
DEVICE_CLASSES = custom_resource(DRA_GROUP, DRA_VERSION, "deviceclasses")
DRA_RESOURCES = (RESOURCE_SLICES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES, DEVICE_CLASSES)
GANG_GROUP = "scheduling.k8s.io"
GANG_VERSIONS = ("v1", "v1beta1", "v1alpha1")  # the Workload API's, newest first


def optional_resources(served: Mapping[str, tuple[str, ...]]) -> list[Resource]:
    """The resources to read beyond the adapter's own, where the API serves them: DRA
    (``resource.k8s.io/v1``) and the native gang API's Workloads (``scheduling.k8s.io``)."""
    extra: list[Resource] = []
    if DRA_VERSION in served.get(DRA_GROUP, ()):
        extra.extend(DRA_RESOURCES)
    gang = next((v for v in GANG_VERSIONS if v in served.get(GANG_GROUP, ())), None)
    if gang is not None:
        extra.append(custom_resource(GANG_GROUP, gang, "workloads"))
    return extra


def of_resource(items: Mapping[str, list[dict[str, Any]]], plural: str, group: str) -> list:
    """The listed objects of ``plural.group`` (any version) among a read's mirrors."""
    return [
        obj
        for name, objs in items.items()
        if name.partition("/")[0] == f"{plural}.{group}"
        for obj in objs
    ]


def dra_view(items: Mapping[str, list[dict[str, Any]]], pods: list[dict[str, Any]]) -> dra.DraView:
    """The DRA view of a read (empty when the cluster serves no DRA)."""
    return dra.build_view(
        of_resource(items, "resourceslices", DRA_GROUP),
        of_resource(items, "resourceclaims", DRA_GROUP),
        of_resource(items, "deviceclasses", DRA_GROUP),
        pods,
        of_resource(items, "resourceclaimtemplates", DRA_GROUP),
    )


def native_gangs(
    workloads: Iterable[Mapping[str, Any]],
    gpu_pods: Iterable[GpuPod],
    raw_pods: Iterable[Mapping[str, Any]],
    indexes: Mapping[str, list[int]],
    pools: Mapping[str, str],
) -> tuple[list[dict[str, Any]], set[str]]:
    """Jobs of the native gang API (``scheduling.k8s.io`` Workload): each pod group of a
    Workload whose GPU pods point at it (``spec.workloadRef``) is a job; ``policy.gang.minCount``
    makes it a gang. Returns the jobs and the uids of the pods they took."""
    refs = {}
    for pod in raw_pods:
        ref = (pod.get("spec") or {}).get("workloadRef") or {}
        if ref.get("name"):
            key = (
                str(meta(pod).get("namespace")),
                str(ref["name"]),
                str(ref.get("podGroup") or ""),
            )
            refs[str(meta(pod).get("uid") or "")] = key
    members: dict[tuple[str, str, str], list[GpuPod]] = {}
    for pod in gpu_pods:
        if pod.uid in refs:
            members.setdefault(refs[pod.uid], []).append(pod)
    jobs, taken = [], set()
    for workload in workloads:
        namespace, name = str(meta(workload).get("namespace")), str(meta(workload).get("name"))
        for group in (workload.get("spec") or {}).get("podGroups") or ():
            pods = members.get((namespace, name, str(group.get("name") or "")))
            if not pods:
                continue
            gang_policy = ((group.get("policy") or {}).get("gang")) or {}
            min_count = max(dra.count(gang_policy.get("minCount"), 1), 1) if gang_policy else 1
            gang = pod_gang(pods, indexes, pools)
            live = [p for p in pods if p.phase not in ("Succeeded", "Failed")]
            bound = len(gang.allocation)
            phases = {p.phase for p in pods}
            if phases <= {"Succeeded"}:
                state = "completed"
            elif "Failed" in phases and not live:
                state = "failed"
            elif bound >= min_count and bound:
                state = "running"
            else:
                state = "pending"
            size = max(min_count, len(live), bound, 1)
            job = {
                "id": f"{namespace}/{name}/{group.get('name')}",
                "name": f"{name}/{group.get('name')}",
                "tenant": namespace,
                "pool": gang.pool,
                "priority": gang.priority,
                "state": state,
                "submitted": rfc3339(meta(workload).get("creationTimestamp")),
                "started": gang.started if state != "pending" else None,
                "ended": gang.ended if state in ("completed", "failed") else None,
                "pods": size,
                "gpus_per_pod": gang.gpus_per_pod or 0,
                "gang": bool(gang_policy) and min_count > 1,
                "min_member": min(min_count, size),
                "allocation": gang.allocation if state in ("pending", "running") else [],
                "partial_since": gang.partial_since if state == "pending" and bound else None,
            }
            jobs.append({k: v for k, v in job.items() if v is not None})
            taken.update(p.uid for p in pods)
    return jobs, taken
