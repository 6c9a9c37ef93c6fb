"""Core Kubernetes objects in the snapshot's vocabulary, shared by the Volcano and Kueue adapters:
GPU nodes, GPU pods and their GPU indexes, Events, and the node drain (cordon + eviction).

Pure functions over the API's plain dicts, except :func:`drain_node`, which writes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from diagnosis.core.vocabulary import format_time, parse_time
from diagnosis.edge.schedulers.base import ChangeResult, EventBatch, SchedulerError
from diagnosis.edge.schedulers.kubernetes import dra
from diagnosis.edge.schedulers.kubernetes import sharing as gpu_sharing
from diagnosis.edge.schedulers.kubernetes.client import (
    EVENTS,
    HTTP_CONFLICT,
    KubeSettings,
    ResourceCache,
    annotations,
    condition,
    labels,
    meta,
    mirror,
    quantity,
    scheduler_error,
    sync_all,
)

DRAIN_REASON_ANNOTATION = "gpuobs.io/drain-reason"
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # the NVLink clique (GB200/GB300 NVL72) of a node's GPUs
HOLDING_PHASES = ("Pending", "Running")


# -- times and quantities ------------------------------------------------------------------------


def rfc3339(value: Any) -> str | None:
    """A Kubernetes time (``2026-11-29T07:59:00Z`` or a MicroTime with fractions) as RFC 3339
    UTC with ``Z``; None when absent or unparsable."""
    moment = parse_time(value)
    return None if moment is None else format_time(moment)


def whole(value: Decimal | None) -> int | None:
    """A GPU quantity as whole GPUs (fractions round down: a node cannot offer half a GPU)."""
    return None if value is None else math.floor(value)


def gpus_in(resources: Mapping[str, Any] | None, resource: str) -> int | None:
    return whole(quantity((resources or {}).get(resource)))


# -- nodes ---------------------------------------------------------------------------------------


def node_pool(node: Mapping[str, Any], settings: KubeSettings) -> str:
    return labels(node).get(settings.pool_label) or settings.default_pool


def node_state(node: Mapping[str, Any], holds_gpus: bool) -> str:
    """``down`` unless Ready is True; a cordoned node is ``drained`` once no pod holds GPUs."""
    ready = condition(node, "Ready")
    if ready is None or ready.get("status") != "True":
        return "down"
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned" if holds_gpus else "drained"
    return "ready"


def gpu_nodes(
    nodes: Iterable[Mapping[str, Any]],
    settings: KubeSettings,
    busy_nodes: set[str],
    view: dra.DraView | None = None,
) -> list[dict[str, Any]]:
    """The snapshot's ``nodes``: every node that offers GPUs, detected per node: through DRA
    (ResourceSlices of ``gpu.nvidia.com``: the GPUs the slices publish, the model from their
    ``productName``) or else through the device plugin (allocatable ``gpu_resource``, the model
    from the GPU Feature Discovery label). A device-plugin node that shares its GPUs
    (:func:`gpu_sharing.node_sharing`) has its physical GPUs, and ``sharing`` says how (strategy and
    replicas per GPU); its model is the product without ``-SHARED``."""
    view = view or dra.DraView.empty()
    rows = []
    for node in nodes:
        status = node.get("status") or {}
        name = meta(node).get("name")
        published = view.nodes.get(str(name))
        model = labels(node).get(settings.model_label)
        sharing = None
        if published is not None:
            gpus = len(published.parents)
            model = model or published.model
            pool = labels(node).get(settings.pool_label) or dra.pool_model(published.model)
        else:
            gpus = gpus_in(status.get("allocatable"), settings.gpu_resource)
            if gpus is None:
                gpus = gpus_in(status.get("capacity"), settings.gpu_resource)
            pool = None
            sharing = gpu_sharing.node_sharing(node, gpus) if gpus else None
        if not gpus:
            continue
        row = {
            "name": name,
            "pool": pool or node_pool(node, settings),
            "gpus": gpus,
            "state": node_state(node, name in busy_nodes),
        }
        if sharing is not None:
            row["gpus"] = sharing["gpus"]
            row["sharing"] = {"strategy": sharing["strategy"], "replicas": sharing["replicas"]}
            model = model.removesuffix(gpu_sharing.SHARED_PRODUCT_SUFFIX) if model else model
        if model:
            row["gpu_model"] = model
        rows.append(row)
    return sorted(rows, key=lambda row: row["name"])


def node_cliques(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each node's NVLink clique from the ``nvidia.com/gpu.clique`` label, where it has one."""
    return {
        str(meta(n).get("name")): str(labels(n)[CLIQUE_LABEL])
        for n in nodes
        if labels(n).get(CLIQUE_LABEL)
    }


def subtree_tenants(rows: list[dict[str, Any]], labelled: set[str]) -> None:
    """Hierarchical queues (Volcano ``spec.parent``, KAI ``parentQueue``): a tenant is a subtree,
    so a queue without a tenant label takes the tenant of its nearest labelled ancestor (in
    place). A queue with no labelled ancestor keeps its own name; a cycle is cut."""
    by_name = {row["name"]: row for row in rows}
    for row in rows:
        if row["name"] in labelled:
            continue
        seen, up = {row["name"]}, row.get("parent")
        while up in by_name and up not in seen:
            if up in labelled:
                row["tenant"] = by_name[up]["tenant"]
                break
            seen.add(up)
            up = by_name[up].get("parent")


# -- pods ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuPod:
    """A pod that asks for GPUs, as the adapters need it."""

    uid: str
    namespace: str
    name: str
    node: str | None
    phase: str
    gpus: int
    gpu_indexes: tuple[int, ...] | None  # from the device plugin's annotation, when present
    priority: int
    created: str | None
    started: str | None
    scheduled_at: str | None
    finished: str | None
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    owners: tuple[str, ...]  # uids of its owner references
    node_selector_pool: str | None
    devices: tuple[dra.Held, ...] = ()  # what its DRA claims hold (empty: device plugin)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_gpus(self) -> bool:
        return bool(self.node) and self.phase in HOLDING_PHASES


def pod_gpu_request(spec: Mapping[str, Any], resource: str) -> int:
    """GPUs a pod asks: the sum over its containers (limits, else requests), or the largest
    init container's ask if that is larger (init containers run one at a time)."""

    def ask(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = gpus_in(resources.get("limits"), resource)
        if value is None:
            value = gpus_in(resources.get("requests"), resource)
        return value or 0

    main = sum(ask(c) for c in spec.get("containers") or ())
    init = max((ask(c) for c in spec.get("initContainers") or ()), default=0)
    return max(main, init)


def parse_indexes(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(part) for part in text.replace(" ", "").split(",") if part != "")
    except ValueError:
        return None


def gpu_pod(
    pod: Mapping[str, Any], settings: KubeSettings, view: dra.DraView | None = None
) -> GpuPod | None:
    """The pod's GPU view, or None when it asks for no GPU: through its containers' extended
    resource (the device plugin, or DRA's extended-resource mapping) or its resource claims."""
    spec = pod.get("spec") or {}
    gpus = pod_gpu_request(spec, settings.gpu_resource)
    held: tuple[dra.Held, ...] = ()
    if view is not None:
        held = tuple(view.holdings.get(str(meta(pod).get("uid") or ""), ()))
        if gpus <= 0:
            gpus = len(held) or view.pod_ask(pod)
    if gpus <= 0:
        return None
    metadata = meta(pod)
    status = pod.get("status") or {}
    scheduled = condition(pod, "PodScheduled")
    finished = [
        ((entry.get("state") or {}).get("terminated") or {}).get("finishedAt")
        for entry in status.get("containerStatuses") or ()
    ]
    return GpuPod(
        uid=str(metadata.get("uid") or ""),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        gpus=gpus,
        gpu_indexes=parse_indexes(annotations(pod).get(settings.gpu_index_annotation)),
        priority=int(spec.get("priority") or 0),
        created=rfc3339(metadata.get("creationTimestamp")),
        started=rfc3339(status.get("startTime")),
        scheduled_at=rfc3339(scheduled.get("lastTransitionTime"))
        if scheduled and scheduled.get("status") == "True"
        else None,
        finished=max((t for t in map(rfc3339, finished) if t), default=None),
        annotations=dict(annotations(pod)),
        labels=dict(labels(pod)),
        owners=tuple(str(o.get("uid")) for o in metadata.get("ownerReferences") or ()),
        node_selector_pool=(spec.get("nodeSelector") or {}).get(settings.pool_label),
        devices=held,
    )


class GpuPlacements(dict[str, list[int]]):
    """The GPU indexes each bound pod holds (by pod uid), and per pod what else its allocation
    entry says (``extra``): the devices' ``uuids`` and ``share`` for DRA pods, ``gpus_guessed``
    where the indexes are a guess."""

    def __init__(self) -> None:
        super().__init__()
        self.extra: dict[str, dict[str, Any]] = {}


def assign_gpu_indexes(
    pods: Iterable[GpuPod],
    node_gpus: Mapping[str, int],
    view: dra.DraView | None = None,
    replicas: Mapping[str, int] | None = None,
) -> GpuPlacements:
    """The GPU indexes each bound pod holds, by pod uid.

    DRA pods: exactly the devices their claims hold (with the UUIDs, and the share of a shared
    device). Pods of a node that shares its GPUs (``replicas``: node -> replicas per GPU, see
    :func:`gpu_sharing.node_sharing`): :func:`gpu_sharing.replica_placement`, marked
    ``gpus_guessed``. Other device-plugin pods: the plugin's annotation wins where present and
    consistent; the other pods of a node get its lowest free indexes, in order of binding -- a
    guess (Kubernetes does not say which physical GPU a pod got unless a plugin annotates it),
    marked ``gpus_guessed``. Pods on a node the snapshot does not know, or that would need more
    GPUs than the node has left, get none.
    """
    view = view or dra.DraView.empty()
    replicas = replicas or {}
    holding = sorted(
        (p for p in pods if p.holds_gpus),
        key=lambda p: (p.node or "", p.scheduled_at or p.created or "", p.key),
    )
    taken: dict[str, set[int]] = {}
    result = GpuPlacements()
    for uid, (indexes, share) in gpu_sharing.replica_placement(
        [(p.uid, p.node or "", p.gpus) for p in holding if not p.devices and p.node in replicas],
        node_gpus,
        replicas,
    ).items():
        result[uid] = indexes
        result.extra[uid] = {"share": share, "gpus_guessed": True}
    for pod in holding:
        if pod.devices and pod.node in node_gpus:
            placed = _dra_placement(pod, view)
            if placed is None:
                continue
            indexes, uuids, share = placed
            result[pod.uid] = indexes
            extra: dict[str, Any] = {"uuids": uuids} if all(uuids) else {}
            result.extra[pod.uid] = {**extra, **({} if share is None else {"share": share})}
            if share is None:
                taken.setdefault(pod.node or "", set()).update(indexes)
    for pod in holding:
        if pod.uid in result:
            continue
        count = node_gpus.get(pod.node or "")
        indexes = pod.gpu_indexes
        used = taken.setdefault(pod.node or "", set())
        if (
            count is not None
            and indexes
            and len(indexes) == pod.gpus
            and len(set(indexes)) == len(indexes)
            and all(0 <= i < count and i not in used for i in indexes)
        ):
            result[pod.uid] = list(indexes)
            used.update(indexes)
    for pod in holding:
        if pod.uid in result or pod.node not in node_gpus:
            continue
        used = taken[pod.node or ""]
        free = [i for i in range(node_gpus[pod.node or ""]) if i not in used]
        if len(free) >= pod.gpus:
            result[pod.uid] = free[: pod.gpus]
            result.extra[pod.uid] = {"gpus_guessed": True}
            used.update(free[: pod.gpus])
    return result


def _dra_placement(
    pod: GpuPod, view: dra.DraView
) -> tuple[list[int], list[str | None], float | None] | None:
    """(indexes, UUIDs, share) of a DRA pod's devices; None when one is not on its node."""
    entry = view.nodes.get(pod.node or "")
    if entry is None:
        return None
    indexes, uuids, shares = [], [], []
    for held in pod.devices:
        device = view.by_key.get((held.pool, held.device))
        index = entry.index_of(device) if device is not None and device.node == pod.node else None
        if device is None or index is None or not device.uuid:
            return None
        indexes.append(index)
        uuids.append(device.uuid)
        shares.append(held.share)
    known = [s for s in shares if s is not None]
    share = round(min(known), 6) if known else None
    return indexes, uuids, share


@dataclass(frozen=True)
class PodGang:
    """What a job's pods say about it: the shape, what they hold and since when."""

    gpus_per_pod: int | None
    allocation: list[dict[str, Any]]
    started: str | None
    partial_since: str | None
    ended: str | None
    priority: int
    pool: str | None


def pod_gang(
    pods: list[GpuPod],
    indexes: Mapping[str, list[int]],
    pools: Mapping[str, str],
    gpus_per_pod: int | None = None,
) -> PodGang:
    """Summarise the GPU pods of one job. ``gpus_per_pod`` defaults to the most common ask."""
    if gpus_per_pod is None and pods:
        gpus_per_pod = Counter(p.gpus for p in pods).most_common(1)[0][0]
    bound = [p for p in pods if p.holds_gpus and p.uid in indexes and p.gpus == gpus_per_pod]
    bound.sort(key=lambda p: (p.scheduled_at or p.created or "", p.key))
    extra = getattr(indexes, "extra", {})
    allocation = [{"node": p.node, "gpus": indexes[p.uid], **extra.get(p.uid, {})} for p in bound]
    node_pools = Counter(pools[p.node] for p in bound if p.node in pools)
    selectors = Counter(p.node_selector_pool for p in pods if p.node_selector_pool)
    pool = (node_pools or selectors).most_common(1)[0][0] if (node_pools or selectors) else None
    return PodGang(
        gpus_per_pod=gpus_per_pod,
        allocation=allocation,
        started=min((p.started for p in pods if p.started), default=None),
        partial_since=min((p.scheduled_at or p.started or "" for p in bound), default=None) or None,
        ended=max((p.finished for p in pods if p.finished), default=None),
        priority=max((p.priority for p in pods), default=0),
        pool=pool,
    )


# -- events --------------------------------------------------------------------------------------

# Native event reasons -> the snapshot's event kinds (docs/snapshot.md). Reasons not listed
# here (Pulling, Created, BackOff, ...) are not scheduler events and are skipped.
EVENT_KINDS = {
    "FailedScheduling": "failed_scheduling",  # kube-scheduler / volcano on a Pod
    "Unschedulable": "failed_scheduling",  # volcano on a PodGroup
    "Pending": "failed_scheduling",  # kueue on a Workload: "couldn't assign flavors ..."
    "Scheduled": "scheduled",
    "QuotaReserved": "scheduled",  # kueue
    "Admitted": "scheduled",  # kueue
    "Started": "started",
    "Preempted": "preempted",  # kube-scheduler on the victim; kueue on a Workload
    "Evict": "evicted",  # volcano
    "Evicted": "evicted",  # kubelet; kueue on a Workload
    "Completed": "completed",  # batch Job controller
    "BackoffLimitExceeded": "failed",  # batch Job controller
    "DeadlineExceeded": "failed",
    "NodeNotSchedulable": "node_cordoned",
}


def event_time(event: Mapping[str, Any]) -> str | None:
    """When it last happened: ``lastTimestamp``, the series' last observation, ``eventTime``,
    ``firstTimestamp``, then the object's creation."""
    series = event.get("series") or {}
    for value in (
        event.get("lastTimestamp"),
        series.get("lastObservedTime"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        meta(event).get("creationTimestamp"),
    ):
        moment = rfc3339(value)
        if moment:
            return moment
    return None


def event_dedup_key(event: Mapping[str, Any]) -> str:
    """The object's uid and resourceVersion: a repeated event (count + 1) is a new version."""
    metadata = meta(event)
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    if uid and version:
        return f"k8s:{uid}@{version}"
    digest = hashlib.sha256(json.dumps(event, sort_keys=True).encode()).hexdigest()
    return f"k8s:sha256:{digest}"


def normalize_event(
    event: Mapping[str, Any], job_of: Callable[[Mapping[str, Any]], str | None]
) -> dict[str, Any] | None:
    """A core/v1 Event as a snapshot event (plus ``dedup_key``), or None when it is not one the
    snapshot has a kind for. ``job_of(involvedObject)`` names the job the object belongs to."""
    reason = str(event.get("reason") or "")
    kind = EVENT_KINDS.get(reason)
    if kind is None:
        return None
    moment = event_time(event)
    if moment is None:
        return None
    involved = event.get("involvedObject") or event.get("regarding") or {}
    node = involved.get("name") if involved.get("kind") == "Node" else None
    if node is None and reason == "Scheduled":
        node = _assigned_node(str(event.get("message") or event.get("note") or ""))
    source = event.get("source") or {}
    if node is None and source.get("host") and kind in ("started", "evicted", "preempted"):
        node = source.get("host")
    return {
        "time": moment,
        "kind": kind,
        "job": job_of(involved) if involved.get("kind") != "Node" else None,
        "node": node,
        "reason": reason,
        "message": str(event.get("message") or event.get("note") or ""),
        "dedup_key": event_dedup_key(event),
    }


def _assigned_node(message: str) -> str | None:
    # "Successfully assigned team-a/llm-0 to gpu-001"
    marker = " to "
    if message.startswith("Successfully assigned") and marker in message:
        return message.rsplit(marker, 1)[1].strip() or None
    return None


def read_events(
    api: k8s.ApiClient,
    settings: KubeSettings,
    key: str,
    cursor: str | None,
    also_sync: Iterable[ResourceCache],
    job_lookup: Callable[[], Callable[[Mapping[str, Any]], str | None]],
) -> EventBatch:
    """Scheduler events since ``cursor`` (the Events' resourceVersion), oldest first.

    No cursor: list the Events the API server still keeps (about an hour). A cursor: watch from
    it; a 410 (the cursor is older than the server's history) lists again, and the listed Events
    that were already stored are duplicates by their key, so nothing is counted twice.
    ``also_sync`` (the pods) are brought up to date alongside, before ``job_lookup()`` builds
    the map from involved objects to jobs.
    """
    events = mirror(key, EVENTS)
    events.resume_from(cursor)
    synced = sync_all(api, settings, [events, *also_sync])[EVENTS.name]
    if synced.listed:
        raw = list(events.items.values())
    else:
        raw = [c["raw_object"] for c in synced.changes if c.get("type") != "DELETED"]
    job_of = job_lookup()
    normalized = (normalize_event(event, job_of) for event in raw)
    batch = sorted((e for e in normalized if e), key=lambda e: (e["time"], e["dedup_key"]))
    return EventBatch(events=batch, cursor=events.resource_version)


# -- draining a node -----------------------------------------------------------------------------


def dry_run_args(dry_run: bool) -> dict[str, str]:
    return {"dry_run": "All"} if dry_run else {}


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def evictable(pod: Mapping[str, Any]) -> bool:
    """What ``kubectl drain --ignore-daemonsets`` evicts: not DaemonSet pods, not static (mirror)
    pods, not pods that already finished."""
    if annotations(pod).get("kubernetes.io/config.mirror"):
        return False
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in meta(pod).get("ownerReferences") or ())


def write_failed(exc: ApiException, what: str, *, doing: str, failed: str) -> SchedulerError:
    """A failed write of ``what``: a 409 is a conflict (``<what> changed while <doing> it``, try
    again), anything else as any failed call (:func:`scheduler_error`, saying ``failed``)."""
    if exc.status == HTTP_CONFLICT:
        return SchedulerError(
            f"{what} changed while {doing} it (409 Conflict); try again", conflict=True
        )
    return scheduler_error(exc, failed)


HTTP_TOO_MANY_REQUESTS = 429  # a PodDisruptionBudget says not now


def evict_pod(
    core: k8s.CoreV1Api,
    namespace: str,
    name: str,
    lines: list[str],
    *,
    timeout: float,
    dry_run: bool,
) -> bool:
    """Evict one pod through the Eviction API (a graceful delete that honours
    PodDisruptionBudgets), its request appended to ``lines``: True when evicted (or, in a dry
    run, when it would be), False when a PodDisruptionBudget blocks it (429); any other error
    is raised as a :class:`SchedulerError`."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    lines.append(f"POST /api/v1/namespaces/{namespace}/pods/{name}/eviction {compact_json(body)}")
    try:
        core.create_namespaced_pod_eviction(
            name, namespace, body, _request_timeout=timeout, **dry_run_args(dry_run)
        )
    except ApiException as exc:
        if exc.status == HTTP_TOO_MANY_REQUESTS:
            return False
        raise scheduler_error(exc, f"evicting pod {namespace}/{name}") from exc
    return True


@dataclass(frozen=True)
class Evictions:
    """What evicting a set of pods did: the pods evicted (or, in a dry run, that would be) and
    those a PodDisruptionBudget blocked, each named as the caller named it."""

    evicted: list[str]
    blocked: list[str]

    def counted(self, dry_run: bool) -> str:
        """``evicted 3 pod(s)`` (``would evict`` in a dry run)."""
        return f"{'would evict' if dry_run else 'evicted'} {len(self.evicted)} pod(s)"

    def blocked_note(self) -> str:
        """``; 1 blocked by a PodDisruptionBudget: a, b``, or nothing when none was blocked."""
        if not self.blocked:
            return ""
        return f"; {len(self.blocked)} blocked by a PodDisruptionBudget: {', '.join(self.blocked)}"


def evict_pods(
    core: k8s.CoreV1Api,
    pods: Iterable[tuple[str, str, str]],
    lines: list[str],
    *,
    timeout: float,
    dry_run: bool,
) -> Evictions:
    """Evict each of ``pods`` (namespace, name, how the message names it), in the order given,
    through :func:`evict_pod`, its request appended to ``lines``."""
    evicted: list[str] = []
    blocked: list[str] = []
    for namespace, name, shown in pods:
        if evict_pod(core, namespace, name, lines, timeout=timeout, dry_run=dry_run):
            evicted.append(shown)
        else:
            blocked.append(shown)
    return Evictions(evicted, blocked)


def drain_node(
    api: k8s.ApiClient,
    settings: KubeSettings,
    change: Mapping[str, Any],
    node_name: str,
    *,
    dry_run: bool,
) -> ChangeResult:
    """Cordon a node (``spec.unschedulable``, with the reason as an annotation and the node's
    resourceVersion for optimistic concurrency) and evict its pods through the Eviction API, so
    PodDisruptionBudgets are honoured. With ``dry_run`` every write carries ``dryRun=All``: the
    API server checks it (admission, PDBs) and stores nothing."""
    core = k8s.CoreV1Api(api)
    timeout = settings.request_timeout_s
    try:
        node = json.loads(core.read_node(node_name, _preload_content=False).data)
    except ApiException as exc:
        raise scheduler_error(exc, f"reading node {node_name}") from exc
    version = meta(node).get("resourceVersion")
    expected = change.get("resource_version")
    if expected and expected != version:
        raise SchedulerError(
            f"node {node_name} changed since the recommendation (resourceVersion {expected} → "
            f"{version}); re-read it before draining",
            conflict=True,
        )
    before = "cordoned" if (node.get("spec") or {}).get("unschedulable") else "schedulable"
    reason = str(change.get("reason") or "drained by gpuobs")
    patch = {
        "metadata": {"resourceVersion": version, "annotations": {DRAIN_REASON_ANNOTATION: reason}},
        "spec": {"unschedulable": True},
    }
    lines = [f"PATCH /api/v1/nodes/{node_name} (strategic-merge-patch+json) {compact_json(patch)}"]
    try:
        core.patch_node(node_name, patch, _request_timeout=timeout, **dry_run_args(dry_run))
    except ApiException as exc:
        raise write_failed(
            exc, f"node {node_name}", doing="cordoning", failed=f"cordoning node {node_name}"
        ) from exc
    try:
        listed = core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node_name}",
            _preload_content=False,
            _request_timeout=timeout,
        )
        pods = [p for p in json.loads(listed.data).get("items") or () if evictable(p)]
    except ApiException as exc:
        raise scheduler_error(exc, f"listing the pods of node {node_name}") from exc
    named = sorted((meta(p).get("namespace"), meta(p).get("name")) for p in pods)
    evictions = evict_pods(
        core,
        ((namespace, name, f"{namespace}/{name}") for namespace, name in named),
        lines,
        timeout=timeout,
        dry_run=dry_run,
    )
    message = f"cordoned {node_name}; {evictions.counted(dry_run)}{evictions.blocked_note()}"
    return ChangeResult(
        applied=not dry_run,
        dry_run=dry_run,
        before=before,
        after="cordoned",
        command="\n".join(lines),
        message=message,
    )
