"""Releasing a gang on Kubernetes (the ``gang-release`` change, issue #20.1).

- **Volcano and KAI**: a gang is a PodGroup; its pods name it in an annotation (Volcano
  ``scheduling.k8s.io/group-name``, KAI ``pod-group-name``). Releasing it evicts every pod of the
  group through the Eviction API (a graceful delete that honours PodDisruptionBudgets, as a drain
  does); the owning controller (Volcano's job controller, the PyTorchJob/JobSet operator)
  recreates the pods and the scheduler admits the group again -- whole, under the gang plugin.
- **Kueue**: a gang is a Workload; releasing it sets ``spec.active: false`` (Kueue v1beta2:
  "Changing active from true to false will evict any running workloads"): Kueue evicts it,
  suspends its job and gives its quota back. It stays inactive until someone sets
  ``spec.active: true`` again (with ``waitForPodsReady`` Kueue evicts and requeues on its own).

The gang's state as the change reads it: ``partial`` (some pods bound, fewer than
``minMember``; for Kueue: quota reserved, pods not all ready), ``pending``, ``running``,
``inactive`` (Kueue). A change whose ``from`` is ``partial`` is refused (a conflict) when the gang
is no longer partial: it started or was released meanwhile. ``dryRun=All`` for a dry run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from diagnosis.edge.schedulers.base import ChangeResult, SchedulerError
from diagnosis.edge.schedulers.kubernetes import objects
from diagnosis.edge.schedulers.kubernetes.client import KubeSettings, meta, scheduler_error
from diagnosis.edge.schedulers.kubernetes.objects import (
    compact_json,
    dry_run_args,
    evictable,
)
from diagnosis.edge.schedulers.targets import target_name


def namespaced(target: str, what: str) -> tuple[str, str]:
    """``namespace/name`` of a job id (the adapters' job ids), or a permanent error."""
    namespace, _, name = target.partition("/")
    if not namespace or not name or "/" in name:
        raise SchedulerError(
            f"gang-release: a {what} is named namespace/name, got {target!r}", permanent=True
        )
    return namespace, name


def check_from(change: Mapping[str, Any], before: str, what: str) -> None:
    if "from" in change and change["from"] != before:
        raise SchedulerError(
            f"{what} changed since the recommendation: it is {before}, expected {change['from']}",
            conflict=True,
        )


def podgroup_state(podgroup: Mapping[str, Any], pods: list[dict[str, Any]]) -> str:
    """``partial``, ``pending`` or ``running``: the group's pods bound against ``minMember``."""
    min_member = max(1, int((podgroup.get("spec") or {}).get("minMember") or 1))
    bound = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))
    if bound == 0:
        return "pending"
    return "partial" if bound < min_member else "running"


class PodGroupKind(NamedTuple):
    """Where a PodGroup scheduler (Volcano, KAI) keeps its PodGroups (``<group>/<version>``,
    plural ``podgroups``) and the annotation with which its pods name theirs."""

    group: str
    version: str
    annotation: str


def apply_podgroup_change(
    api: k8s.ApiClient,
    settings: KubeSettings,
    change: Mapping[str, Any],
    podgroup_kind: PodGroupKind,
    *,
    dry_run: bool,
) -> ChangeResult | None:
    """The changes every PodGroup scheduler applies the same way: ``drain-node`` (cordon and
    evict, :func:`objects.drain_node`) and ``gang-release`` (:func:`release_podgroup`); None
    for any other kind, which is the adapter's own to apply or refuse."""
    kind = change.get("kind")
    if kind == "drain-node":
        return objects.drain_node(api, settings, change, target_name(change), dry_run=dry_run)
    if kind == "gang-release":
        return release_podgroup(
            api,
            settings,
            change,
            target_name(change),
            podgroup_resource=(podgroup_kind.group, podgroup_kind.version, "podgroups"),
            group_annotation=podgroup_kind.annotation,
            dry_run=dry_run,
        )
    return None


def release_podgroup(
    api: k8s.ApiClient,
    settings: KubeSettings,
    change: Mapping[str, Any],
    job_id: str,
    *,
    podgroup_resource: tuple[str, str, str],
    group_annotation: str,
    dry_run: bool,
) -> ChangeResult:
    """Evict every pod of a PodGroup (Volcano, KAI) so its controller recreates them and the
    scheduler admits the group again, whole."""
    namespace, name = namespaced(job_id, "PodGroup")
    group, version, plural = podgroup_resource
    timeout = settings.request_timeout_s
    core = k8s.CoreV1Api(api)
    try:
        podgroup = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, namespace, plural, name, _request_timeout=timeout
        )
        listed = core.list_namespaced_pod(
            namespace, _preload_content=False, _request_timeout=timeout
        )
    except ApiException as exc:
        raise scheduler_error(exc, f"reading PodGroup {job_id} and its pods") from exc
    pods = [
        p
        for p in json.loads(listed.data).get("items") or ()
        if (meta(p).get("annotations") or {}).get(group_annotation) == name and evictable(p)
    ]
    before = podgroup_state(podgroup, pods)
    check_from(change, before, f"PodGroup {job_id}")
    lines: list[str] = []
    names = sorted(meta(p).get("name") for p in pods)
    evictions = objects.evict_pods(
        core, ((namespace, n, n) for n in names), lines, timeout=timeout, dry_run=dry_run
    )
    message = (
        f"PodGroup {job_id} ({before}): {evictions.counted(dry_run)}; its controller "
        "recreates them and the scheduler admits the group again, whole" + evictions.blocked_note()
    )
    return ChangeResult(
        applied=not dry_run,
        dry_run=dry_run,
        before=before,
        after="requeued",
        command="\n".join(lines) or f"(PodGroup {job_id} has no pod to evict)",
        message=message,
    )


def workload_state(workload: Mapping[str, Any]) -> str:
    """A Kueue Workload as a gang release sees it."""
    if (workload.get("spec") or {}).get("active") is False:
        return "inactive"
    status = workload.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
    if conditions.get("Finished") == "True":
        return "finished"
    reserved = status.get("admission") or conditions.get("QuotaReserved") == "True"
    if not reserved:
        return "pending"
    return "running" if conditions.get("PodsReady") == "True" else "partial"


def deactivate_workload(
    api: k8s.ApiClient,
    settings: KubeSettings,
    change: Mapping[str, Any],
    job_id: str,
    *,
    group: str,
    version: str,
    dry_run: bool,
) -> ChangeResult:
    """Evict a Kueue Workload: ``spec.active: false`` (merge patch, guarded by its
    resourceVersion). Kueue evicts it and releases its quota."""
    namespace, name = namespaced(job_id, "Workload")
    custom = k8s.CustomObjectsApi(api)
    timeout = settings.request_timeout_s
    try:
        workload = custom.get_namespaced_custom_object(
            group, version, namespace, "workloads", name, _request_timeout=timeout
        )
    except ApiException as exc:
        raise scheduler_error(exc, f"reading Workload {job_id}") from exc
    before = workload_state(workload)
    check_from(change, before, f"Workload {job_id}")
    patch = {
        "metadata": {"resourceVersion": meta(workload).get("resourceVersion")},
        "spec": {"active": False},
    }
    command = (
        f"kubectl patch workloads.{group} -n {namespace} {name} --type=merge "
        f"-p '{compact_json(patch)}'" + (" --dry-run=server" if dry_run else "")
    )
    try:
        custom.patch_namespaced_custom_object(
            group,
            version,
            namespace,
            "workloads",
            name,
            patch,
            _request_timeout=timeout,
            **dry_run_args(dry_run),
        )
    except ApiException as exc:
        raise objects.write_failed(
            exc,
            f"Workload {job_id}",
            doing="releasing",
            failed=f"deactivating Workload {job_id}",
        ) from exc
    return ChangeResult(
        applied=not dry_run,
        dry_run=dry_run,
        before=before,
        after="inactive",
        command=command,
        message=(
            f"Workload {job_id} ({before}) "
            + ("would be" if dry_run else "is")
            + " deactivated: Kueue evicts it and releases its quota; set spec.active back to "
            "true to queue it again, admitted whole"
        ),
    )
