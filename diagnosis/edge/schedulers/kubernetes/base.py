"""What every Kubernetes scheduler adapter (Volcano, Kueue, KAI) shares, so that each adapter is
its differences only.

- :class:`KubeAdapter`: the constructor (the common settings, the adapter's own keys handed to
  :meth:`KubeAdapter.configure`, the mirror key), the ``read_state`` skeleton (discovery, the
  mirrors of nodes, pods, the adapter's own kinds and the optional DRA and gang kinds, synced
  side by side, then :meth:`KubeAdapter.state_of`) and ``apply`` (transport failures as
  transient errors, then :meth:`KubeAdapter.apply_change`). :class:`PodGroupAdapter` adds the
  changes every PodGroup scheduler applies alike (``drain-node``, ``gang-release``).
- :class:`GpuLayout`: the prelude of every ``build_state`` (GPU pods, GPU nodes, pools, GPU
  indexes) and its ending (the :class:`SchedulerState`); :func:`queue_table` and
  :func:`queue_parents` for schedulers whose queues form a tree.
- :func:`patch_cluster_object`: a merge patch of a cluster-scoped custom object, guarded by the
  object's resourceVersion and the value the change expects (:func:`check_unchanged`), a 409
  a conflict (:func:`write_error`), ``dryRun=All`` for a dry run.

An adapter imports this one module (``from diagnosis.edge.schedulers.kubernetes import base as
kube``): besides its own names it carries, in :data:`__all__`, the scheduler contract's types
(:mod:`diagnosis.edge.schedulers.base`) and the object helpers of
:mod:`~diagnosis.edge.schedulers.kubernetes.client` the adapters use.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.schedulers.base import (
    Capabilities,
    ChangeResult,
    EventBatch,
    GangAdvice,
    SchedulerError,
    SchedulerState,
)
from diagnosis.edge.schedulers.kubernetes import dra, gang_release, health, objects, optional
from diagnosis.edge.schedulers.kubernetes.client import (
    HTTP_CONFLICT,
    NODES,
    PODS,
    KubeConnection,
    KubeSettings,
    Resource,
    annotations,
    condition,
    condition_true,
    config_key,
    custom_resource,
    kube_config,
    labels,
    meta,
    namespaced_name,
    quantity,
    scheduler_error,
    served_versions,
    sync_all,
    transport_errors_as_scheduler_errors,
)

__all__ = [
    "KUBE_CHANGES",
    "PODS",
    "Capabilities",
    "ChangeResult",
    "ClusterObject",
    "EventBatch",
    "GangAdvice",
    "GpuLayout",
    "KubeAdapter",
    "KubeRead",
    "KubeSettings",
    "PodGroupAdapter",
    "Resource",
    "SchedulerError",
    "SchedulerState",
    "check_unchanged",
    "condition",
    "condition_true",
    "custom_resource",
    "guarded",
    "kube_capabilities",
    "kube_config",
    "labels",
    "meta",
    "namespaced_name",
    "patch_cluster_object",
    "pod_job_lookup",
    "quantity",
    "queue_table",
    "scheduler_error",
    "waiting_event",
    "with_events",
    "with_queue_parents",
    "write_error",
]

# The changes every Kubernetes adapter takes (a queue's weight, a node drain, a gang release).
KUBE_CHANGES = frozenset({"queue-weight", "drain-node", "gang-release"})


def kube_capabilities(gang_advice: str, *, changes: Iterable[str] = ()) -> Capabilities:
    """A Kubernetes adapter's capabilities: :data:`KUBE_CHANGES` and its own ``changes``, a queue
    tree (``scheduler.queue_parents``, ``cohorts``) and its ``gang_advice``."""
    return Capabilities(
        change_kinds=KUBE_CHANGES | frozenset(changes),
        queue_tree=True,
        gang_advice=GangAdvice(gang_advice),
    )


# -- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KubeRead:
    """One read's objects: nodes, pods, the adapter's own kinds (in the order
    :meth:`KubeAdapter.own_resources` gave them), the DRA view and the native gang Workloads."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    own: list[list[dict[str, Any]]]
    view: dra.DraView
    native: list[dict[str, Any]]


class KubeAdapter(KubeConnection):
    """A Kubernetes scheduler adapter: a subclass declares ``id``, ``capabilities`` and
    ``config`` (its :class:`ConfigSpec`) and implements :meth:`own_resources`,
    :meth:`state_of`, :meth:`apply_change` and ``read_events``."""

    id: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    config: ClassVar[ConfigSpec]

    def __init__(self, config: Mapping[str, Any] | None, *, cluster: str = "") -> None:
        self.cluster = cluster
        self.settings, own = KubeSettings.parse(config, self.config)
        self.key = config_key(config or {})
        self.configure(own)

    def configure(self, own: Mapping[str, Any]) -> None:
        """Keep the adapter's own settings (checked already)."""

    def served(self) -> dict[str, tuple[str, ...]]:
        """The API groups the server serves, with their versions (discovery)."""
        return served_versions(self.api, self.settings)

    def own_resources(self, served: Mapping[str, tuple[str, ...]]) -> Sequence[Resource]:
        """The scheduler's own kinds to mirror (or a permanent error: the scheduler is not
        installed)."""
        raise NotImplementedError

    def state_of(self, read: KubeRead) -> SchedulerState:
        """The snapshot's part from one read (the adapter's ``build_state``)."""
        raise NotImplementedError

    def read_state(self) -> SchedulerState:
        served = self.served()
        own = list(self.own_resources(served))
        extra = optional.optional_resources(
            served, optional.resource_discovery(self.api, self.settings)
        )
        caches = [self._mirror(r) for r in (NODES, PODS, *own, *extra)]
        sync_all(self.api, self.settings, caches)
        listed = [list(c.items.values()) for c in caches]
        mine = 2 + len(own)
        items = {c.resource.name: listed[i] for i, c in enumerate(caches) if i >= mine}
        pods = listed[1]
        return self.state_of(
            KubeRead(
                nodes=listed[0],
                pods=pods,
                own=listed[2:mine],
                view=optional.dra_view(items, pods),
                native=optional.of_resource(items, "workloads", optional.GANG_GROUP),
            )
        )

    def apply(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
        guarded = transport_errors_as_scheduler_errors(f"{self.id}: applying a change")
        return guarded(self.apply_change)(change, dry_run=dry_run)

    def apply_change(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
        raise NotImplementedError


class PodGroupAdapter(KubeAdapter):
    """A scheduler whose gangs are PodGroups (Volcano, KAI): ``drain-node`` and ``gang-release``
    are applied alike (:func:`gang_release.apply_podgroup_change`), the rest by
    :meth:`apply_own` (None: not one of its own)."""

    podgroup_kind: ClassVar[gang_release.PodGroupKind]

    def apply_own(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult | None:
        return None

    def apply_change(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
        applied = self.apply_own(change, dry_run=dry_run)
        if applied is None:
            applied = gang_release.apply_podgroup_change(
                self.api, self.settings, change, self.podgroup_kind, dry_run=dry_run
            )
        if applied is not None:
            return applied
        known = ", ".join(sorted(self.capabilities.change_kinds))
        raise SchedulerError(
            f"{self.id} cannot apply {change.get('kind')!r} (it takes: {known})", permanent=True
        )


def with_events(batch: EventBatch, more: Iterable[dict[str, Any]]) -> EventBatch:
    """``batch`` and the scheduler's own events (from its objects' conditions), oldest first."""
    merged = sorted([*batch.events, *more], key=lambda e: (e["time"], e["dedup_key"]))
    return EventBatch(events=merged, cursor=batch.cursor)


def pod_job_lookup(
    pods: Iterable[Mapping[str, Any]], group_annotation: str
) -> Callable[[Mapping[str, Any]], str | None]:
    """``job_of(involvedObject)`` for events: a Pod's PodGroup (named by the pod's
    ``group_annotation``) or the Pod itself, a PodGroup."""
    group_of = {
        (meta(p).get("namespace"), meta(p).get("name")): annotations(p).get(group_annotation)
        for p in pods
    }

    def job_of(involved: Mapping[str, Any]) -> str | None:
        namespace, name = involved.get("namespace"), involved.get("name")
        if not name:
            return None
        if involved.get("kind") == "Pod":
            name = group_of.get((namespace, name)) or name
        elif involved.get("kind") != "PodGroup":
            return None
        return f"{namespace}/{name}" if namespace else name

    return job_of


def waiting_event(
    obj: Mapping[str, Any], *, time: str, reason: str, message: str, key: Sequence[Any]
) -> dict[str, Any]:
    """A waiting job's scheduling condition (``obj``: its PodGroup, its Workload) as a
    ``failed_scheduling`` event; its dedup key is ``key``'s first part (the scheduler), the
    object's uid (else its name) and the rest of ``key``, so the condition is stored once."""
    uid = meta(obj).get("uid") or namespaced_name(obj)
    scheduler, *rest = key
    return {
        "time": time,
        "kind": "failed_scheduling",
        "job": namespaced_name(obj),
        "node": None,
        "reason": reason,
        "message": message,
        "dedup_key": ":".join(str(part) for part in (scheduler, uid, *rest)),
    }


# -- the state's common part ---------------------------------------------------------------------


@dataclass(frozen=True)
class GpuLayout:
    """The GPU pods, the GPU nodes (rows), each node's pool and each pod's GPU indexes of one
    read: what every adapter's ``build_state`` starts from."""

    view: dra.DraView
    gpu_pods: list[objects.GpuPod]
    node_rows: list[dict[str, Any]]
    pools: dict[str, str]
    indexes: dict[str, list[int]]

    @classmethod
    def of(
        cls,
        nodes: list[dict[str, Any]],
        pods: list[dict[str, Any]],
        settings: KubeSettings,
        view: dra.DraView | None = None,
    ) -> GpuLayout:
        view = view or dra.DraView.empty()
        gpu_pods = [
            p for p in (objects.gpu_pod(pod, settings, view) for pod in pods) if p is not None
        ]
        busy = {p.node for p in gpu_pods if p.holds_gpus and p.node}
        node_rows = objects.gpu_nodes(nodes, settings, busy, view)
        node_gpus = {row["name"]: row["gpus"] for row in node_rows}
        replicas = {r["name"]: r["sharing"]["replicas"] for r in node_rows if "sharing" in r}
        indexes = objects.assign_gpu_indexes(gpu_pods, node_gpus, view, replicas)
        # A pod holding replicas of shared GPUs holds the physical GPUs they are on.
        gpu_pods = [
            replace(p, gpus=len(indexes[p.uid])) if p.node in replicas and p.uid in indexes else p
            for p in gpu_pods
        ]
        pools = {row["name"]: row["pool"] for row in node_rows}
        return cls(view, gpu_pods, node_rows, pools, indexes)

    def pods_by_group(
        self, annotation: str, *, ungrouped: bool = False
    ) -> dict[str, list[objects.GpuPod]]:
        """The GPU pods by the group their ``annotation`` names (``namespace/group``); with
        ``ungrouped``, a pod without one under its own key (``namespace/name``)."""
        by_group: dict[str, list[objects.GpuPod]] = defaultdict(list)
        for pod in self.gpu_pods:
            group = pod.annotations.get(annotation)
            if group:
                by_group[f"{pod.namespace}/{group}"].append(pod)
            elif ungrouped:
                by_group[pod.key].append(pod)
        return by_group

    def native_gangs(
        self,
        native: Iterable[Mapping[str, Any]],
        candidates: Iterable[objects.GpuPod],
        pods: Iterable[Mapping[str, Any]],
    ) -> tuple[list[dict[str, Any]], set[str]]:
        """The native gang API's jobs among ``candidates`` (:func:`optional.native_gangs`)."""
        return optional.native_gangs(native, candidates, pods, self.indexes, self.pools)

    def state(
        self,
        nodes: list[dict[str, Any]],
        queues: list[dict[str, Any]],
        jobs: list[dict[str, Any]],
        scheduler: dict[str, Any],
    ) -> SchedulerState:
        """The snapshot's part: these nodes, the queues, the jobs (by id), the scheduler block
        and the GPUs the cluster reports (DRA, node conditions)."""
        return SchedulerState(
            nodes=self.node_rows,
            queues=queues,
            jobs=sorted(jobs, key=lambda j: j["id"]),
            scheduler=scheduler,
            gpus=health.gpu_rows(self.view, nodes, self.node_rows, objects.node_cliques(nodes)),
        )


def queue_table(
    queues: Iterable[Mapping[str, Any]],
    settings: KubeSettings,
    row_of: Callable[[Mapping[str, Any], KubeSettings], dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Queue rows (by name), a labelled queue's tenant given to its subtree, and each queue's
    tenant."""
    queues = list(queues)
    rows = sorted((row_of(q, settings) for q in queues), key=lambda r: r["name"])
    objects.subtree_tenants(
        rows, {str(meta(q).get("name")) for q in queues if labels(q).get(settings.tenant_label)}
    )
    return rows, {row["name"]: row["tenant"] for row in rows}


def with_queue_parents(
    scheduler: dict[str, Any], rows: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """The scheduler block with ``queue_parents``: each queue (row) with a parent, by name; the
    block as it was when no queue has one."""
    parents = {row["name"]: row["parent"] for row in rows if row.get("parent")}
    if parents:
        scheduler["queue_parents"] = parents
    return scheduler


# -- writing -------------------------------------------------------------------------------------


def check_unchanged(
    change: Mapping[str, Any], obj: Mapping[str, Any], current: Any, what: str
) -> None:
    """Abort when the target changed since the recommendation was made: the change may carry
    the value it expects (``from``) and the object's ``resource_version``."""
    if "from" in change and change["from"] != current:
        raise SchedulerError(
            f"{what} changed since the recommendation: expected {change['from']!r}, "
            f"found {current!r}",
            conflict=True,
        )
    expected = change.get("resource_version")
    version = meta(obj).get("resourceVersion")
    if expected and expected != version:
        raise SchedulerError(
            f"{what} changed since the recommendation (resourceVersion {expected} → {version})",
            conflict=True,
        )


def write_error(exc: ApiException, what: str) -> SchedulerError:
    """A failed write: a 409 is a conflict (re-read and retry), the rest as any failed call."""
    if exc.status == HTTP_CONFLICT:
        return SchedulerError(
            f"{what} changed while writing it (409 Conflict: {exc.reason}); re-read and retry",
            conflict=True,
        )
    return scheduler_error(exc, f"writing {what}")


@dataclass(frozen=True)
class ClusterObject:
    """A cluster-scoped custom object, and how messages name it (``queue research``)."""

    group: str
    version: str
    plural: str
    name: str
    what: str


def guarded(obj: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch of ``spec``, guarded by the object's resourceVersion."""
    return {"metadata": {"resourceVersion": meta(obj).get("resourceVersion")}, "spec": spec}


def patch_cluster_object(
    api: k8s.ApiClient,
    settings: KubeSettings,
    change: Mapping[str, Any],
    target: ClusterObject,
    *,
    before_of: Callable[[Mapping[str, Any]], Any],
    patch_of: Callable[[Mapping[str, Any]], dict[str, Any]],
    after: Any,
    message: Callable[[Any], str],
    dry_run: bool,
) -> ChangeResult:
    """Read the object, check it is as the change expects (:func:`check_unchanged` on
    ``before_of(obj)``), write ``patch_of(obj)`` (which may refuse the change) as a merge
    patch, and say what it did: ``message(before)``."""
    custom = k8s.CustomObjectsApi(api)
    timeout = settings.request_timeout_s
    group, version, plural, name = target.group, target.version, target.plural, target.name
    try:
        obj = custom.get_cluster_custom_object(
            group, version, plural, name, _request_timeout=timeout
        )
    except ApiException as exc:
        raise scheduler_error(exc, f"reading {target.what}") from exc
    before = before_of(obj)
    check_unchanged(change, obj, before, target.what)
    patch = patch_of(obj)
    command = (
        f"kubectl patch {plural}.{group} {name} --type=merge -p '{objects.compact_json(patch)}'"
        + (" --dry-run=server" if dry_run else "")
    )
    try:
        custom.patch_cluster_custom_object(
            group,
            version,
            plural,
            name,
            patch,
            _request_timeout=timeout,
            **objects.dry_run_args(dry_run),
        )
    except ApiException as exc:
        raise write_error(exc, target.what) from exc
    return ChangeResult(
        applied=not dry_run,
        dry_run=dry_run,
        before=before,
        after=after,
        command=command,
        message=message(before),
    )
