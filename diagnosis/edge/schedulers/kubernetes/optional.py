"""What a Kubernetes cluster may serve beyond a scheduler's own kinds, read by every Kubernetes
adapter where the API serves it (discovery): DRA (``resource.k8s.io/v1``: ResourceSlices,
ResourceClaims, ResourceClaimTemplates, DeviceClasses, and DeviceTaintRules in the newest
version served, see :mod:`.dra`) and the native gang
API (``scheduling.k8s.io`` Workload: a pod group with ``policy.gang.minCount`` is a gang).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from diagnosis.edge.schedulers.kubernetes import dra
from diagnosis.edge.schedulers.kubernetes.client import (
    KubeSettings,
    Resource,
    custom_resource,
    meta,
    scheduler_error,
)
from diagnosis.edge.schedulers.kubernetes.objects import GpuPod, pod_gang, rfc3339

DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
RESOURCE_SLICES = custom_resource(DRA_GROUP, DRA_VERSION, "resourceslices")
RESOURCE_CLAIMS = custom_resource(DRA_GROUP, DRA_VERSION, "resourceclaims")
RESOURCE_CLAIM_TEMPLATES = custom_resource(DRA_GROUP, DRA_VERSION, "resourceclaimtemplates")
DEVICE_CLASSES = custom_resource(DRA_GROUP, DRA_VERSION, "deviceclasses")
DRA_RESOURCES = (RESOURCE_SLICES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES, DEVICE_CLASSES)
# DeviceTaintRule: alpha in v1alpha3 (Kubernetes 1.33), beta v1beta2, GA with device taints
TAINT_RULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")
GANG_GROUP = "scheduling.k8s.io"
GANG_VERSIONS = ("v1", "v1beta1", "v1alpha1")  # the Workload API's, newest first
HTTP_NOT_FOUND = 404


def optional_resources(
    served: Mapping[str, tuple[str, ...]],
    resources_of: Callable[[str, str], frozenset[str]] | None = None,
) -> list[Resource]:
    """The resources to read beyond the adapter's own, where the API serves them: DRA
    (``resource.k8s.io/v1``), DeviceTaintRules in the newest version that serves them (asked
    of ``resources_of(group, version)``, the version's resource discovery: ``v1`` serves them
    only from Kubernetes 1.37 on) and the native gang API's Workloads (``scheduling.k8s.io``)."""
    extra: list[Resource] = []
    versions = served.get(DRA_GROUP, ())
    if DRA_VERSION in versions:
        extra.extend(DRA_RESOURCES)
        for version in (v for v in TAINT_RULE_VERSIONS if v in versions and resources_of):
            if "devicetaintrules" in resources_of(DRA_GROUP, version):
                extra.append(custom_resource(DRA_GROUP, version, "devicetaintrules"))
                break
    gang = next((v for v in GANG_VERSIONS if v in served.get(GANG_GROUP, ())), None)
    if gang is not None:
        extra.append(custom_resource(GANG_GROUP, gang, "workloads"))
    return extra


def resource_discovery(
    api: k8s.ApiClient, settings: KubeSettings
) -> Callable[[str, str], frozenset[str]]:
    """``(group, version) -> the resources it serves`` (``GET /apis/<group>/<version>``); a
    version the server does not know (404) serves none."""

    def resources_of(group: str, version: str) -> frozenset[str]:
        try:
            response = k8s.CustomObjectsApi(api).get_api_resources(
                group,
                version,
                _preload_content=False,
                _request_timeout=settings.request_timeout_s,
            )
            listed = json.loads(response.data)
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                return frozenset()
            raise scheduler_error(exc, f"discovering {group}/{version}") from exc
        except (Urllib3Error, ValueError) as exc:
            raise scheduler_error(exc, f"discovering {group}/{version}") from exc
        return frozenset(str(r.get("name")) for r in listed.get("resources") or ())

    return resources_of


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
        of_resource(items, "devicetaintrules", DRA_GROUP),
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
