"""The ResourceManager's REST answers in the snapshot's vocabulary: pure functions over the
JSON of ``/ws/v1/cluster/nodes``, ``/ws/v1/cluster/apps`` and ``/ws/v1/cluster/scheduler``
(shapes as in Hadoop's ResourceManagerRest.md; tests/fixtures/yarn/README.md).

Read defensively: a missing or oddly typed field is "unknown", never a crash and never a guess.
What the ResourceManager does not say is left out: it reports GPUs per node
(``totalResource``/``usedResource`` with ``yarn.io/gpu``) but not which GPUs, or which node,
an application's containers hold, so applications carry no allocation (docs/snapshot.md:
unknown is never assumed).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from diagnosis.core.numbers import finite_number
from diagnosis.core.vocabulary import format_time
from diagnosis.edge.errors import SchedulerError

GPU = "yarn.io/gpu"
MAX_RECORDS = 100_000  # nodes or applications read from one answer
MAX_QUEUE_DEPTH = 32
LIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
PENDING_STATES = frozenset({"NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED"})
NODE_STATES = {
    "RUNNING": "ready",
    "NEW": "down",
    "DECOMMISSIONING": "cordoned",  # no new containers; the running ones go on
    "DECOMMISSIONED": "drained",
    "UNHEALTHY": "down",
    "LOST": "down",
    "REBOOTED": "down",
    "SHUTDOWN": "down",
}


@dataclass(frozen=True)
class YarnSettings:
    gpu_resource: str = GPU
    default_pool: str = "default"
    gpu_models: Mapping[str, str] = field(default_factory=dict)  # node label -> GPU model


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    """A JSON list, or the lone object Jersey prints for a list of one."""
    if isinstance(value, list):
        return value[:MAX_RECORDS]
    return [value] if isinstance(value, Mapping) else []


def _records(document: Mapping[str, Any], outer: str, inner: str, path: str) -> list[Any]:
    """The records of a list answer, ``{outer: {inner: [...]}}``. ``{outer: null}`` is how the
    ResourceManager says "none"; an answer whose ``outer`` is missing or is no object
    (``{"nodes": 7}``), or whose ``inner`` is neither a list nor an object, is malformed: a
    :class:`SchedulerError` naming it, never an empty cluster. Odd records inside are skipped."""
    if not isinstance(document, Mapping) or outer not in document:
        raise SchedulerError(f"the ResourceManager's {path} answer has no {outer!r}")
    wrapper = document[outer]
    if wrapper is None:
        return []
    if not isinstance(wrapper, Mapping):
        raise SchedulerError(
            f"the ResourceManager's {path} answer is malformed: {outer!r} is "
            f"{type(wrapper).__name__} {str(wrapper)[:40]!r}, not an object or null"
        )
    records = wrapper.get(inner)
    if records is not None and not isinstance(records, list | Mapping):
        raise SchedulerError(
            f"the ResourceManager's {path} answer is malformed: {outer}.{inner} is "
            f"{type(records).__name__}, not a list"
        )
    return _list(records)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def ms_time(value: Any) -> str | None:
    """A ResourceManager time (ms since the epoch) as RFC 3339; None for 0, -1 or nonsense."""
    ms = finite_number(value)
    if ms is None or ms <= 0 or ms >= 253402300800000:
        return None
    return format_time(datetime.fromtimestamp(int(ms) // 1000, UTC))


def resource_amount(resource: Any, name: str) -> int | None:
    """The amount of resource ``name`` in a resource object (``resourceInformations.
    resourceInformation[]``; memory and vCores also as plain keys). None: not reported."""
    resource = _mapping(resource)
    for item in _list(_mapping(resource.get("resourceInformations")).get("resourceInformation")):
        item = _mapping(item)
        if item.get("name") == name:
            value = finite_number(item.get("value"))
            return int(value) if value is not None and value >= 0 else None
    return None


# -- nodes ---------------------------------------------------------------------------------------


def node_state(record: Mapping[str, Any]) -> str:
    return NODE_STATES.get(_text(record.get("state")).upper(), "down")


def parse_nodes(document: Mapping[str, Any], settings: YarnSettings) -> list[dict[str, Any]]:
    """``/ws/v1/cluster/nodes`` → snapshot nodes: the host name, its first node label as pool
    (``default_pool`` without one), GPUs from ``totalResource`` (0 when the node advertises no
    ``yarn.io/gpu``: YARN schedules none there)."""
    nodes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in _records(document, "nodes", "node", "/ws/v1/cluster/nodes"):
        record = _mapping(record)
        name = _text(record.get("nodeHostName")) or _text(record.get("id")).rpartition(":")[0]
        if not name or name in seen:
            continue
        seen.add(name)
        raw_labels = record.get("nodeLabels")
        labels = (
            [x for x in raw_labels if isinstance(x, str) and x]
            if isinstance(raw_labels, list)
            else []
        )
        pool = labels[0] if labels else settings.default_pool
        total = resource_amount(record.get("totalResource"), settings.gpu_resource)
        node: dict[str, Any] = {
            "name": name,
            "pool": pool,
            "gpu_model": settings.gpu_models.get(pool),
            "gpus": total or 0,
            "state": node_state(record),
        }
        used = resource_amount(record.get("usedResource"), settings.gpu_resource)
        if used is not None:
            node["gpus_used"] = used  # held by containers; which ones the RM does not say
        nodes.append(node)
    return nodes


_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}:\d{1,5}\Z")


def gpu_node_addresses(document: Mapping[str, Any], settings: YarnSettings) -> dict[str, str]:
    """Node name → its NodeManager's web address (``nodeHTTPAddress``, a plain ``host:port``),
    for the nodes whose containers hold GPUs (``usedResource``'s ``yarn.io/gpu`` > 0)."""
    found: dict[str, str] = {}
    for record in _list(_mapping(document.get("nodes")).get("node")):
        record = _mapping(record)
        name = _text(record.get("nodeHostName")) or _text(record.get("id")).rpartition(":")[0]
        address = _text(record.get("nodeHTTPAddress"))
        used = resource_amount(record.get("usedResource"), settings.gpu_resource)
        if name and used and _ADDRESS.match(address):
            found.setdefault(name, address)
    return found


# -- queues --------------------------------------------------------------------------------------


def scheduler_type(document: Mapping[str, Any]) -> str:
    """``capacityScheduler``, ``fairScheduler`` or ``fifoScheduler`` (or "")."""
    return _text(_mapping(_mapping(document.get("scheduler")).get("schedulerInfo")).get("type"))


def _children(queue: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [_mapping(q) for q in _list(_mapping(queue.get(key)).get("queue"))]


def _leaves(queue: Mapping[str, Any], key: str, depth: int = 0) -> Iterator[Mapping[str, Any]]:
    children = _children(queue, key)
    if not children:
        yield queue
        return
    if depth >= MAX_QUEUE_DEPTH:
        return
    for child in children:
        yield from _leaves(child, key, depth + 1)


def parse_queues(document: Mapping[str, Any], total_gpus: int) -> list[dict[str, Any]]:
    """Leaf queues as the snapshot's queues (tenant = the queue).

    Capacity Scheduler: ``weight`` = the leaf's absolute capacity (% of the cluster),
    ``deserved_gpus`` / ``capability_gpus`` = its absolute capacity / maximum capacity applied
    to the cluster's GPUs. Fair Scheduler: ``weight`` when the answer carries it, ``deserved_gpus``
    / ``capability_gpus`` from ``minResources`` / ``maxResources``'s ``yarn.io/gpu`` when
    reported. FIFO: one queue, ``default``."""
    info = _mapping(_mapping(document.get("scheduler")).get("schedulerInfo"))
    kind = _text(info.get("type"))
    queues: list[dict[str, Any]] = []
    if kind == "capacityScheduler":
        for leaf in _leaves(info, "queues"):
            name = _text(leaf.get("queueName"))
            if not name or leaf is info:
                continue
            queue: dict[str, Any] = {"name": name, "tenant": name}
            absolute = finite_number(leaf.get("absoluteCapacity"))
            maximum = finite_number(leaf.get("absoluteMaxCapacity"))
            if absolute is not None:
                queue["weight"] = round(absolute, 4)
                queue["deserved_gpus"] = round(absolute / 100 * total_gpus, 2)
            if maximum is not None:
                queue["capability_gpus"] = round(maximum / 100 * total_gpus, 2)
            queues.append(queue)
    elif kind == "fairScheduler":
        root = _mapping(info.get("rootQueue"))
        for leaf in _leaves(root, "childQueues"):
            name = _text(leaf.get("queueName"))
            if not name or leaf is root:
                continue
            queue = {"name": name, "tenant": name}
            weight = finite_number(leaf.get("weight"))
            if weight is not None and weight > 0:
                queue["weight"] = weight
            minimum = resource_amount(leaf.get("minResources"), GPU)
            maximum = resource_amount(leaf.get("maxResources"), GPU)
            if minimum is not None:
                queue["deserved_gpus"] = minimum
            if maximum is not None:
                queue["capability_gpus"] = maximum
            queues.append(queue)
    elif kind == "fifoScheduler":
        queues.append({"name": "default", "tenant": "default"})
    return queues


# -- applications --------------------------------------------------------------------------------


def app_state(record: Mapping[str, Any]) -> str:
    state = _text(record.get("state")).upper()
    if state in PENDING_STATES:
        return "pending"
    if state == "RUNNING":
        return "running"
    if state == "FINISHED" and _text(record.get("finalStatus")).upper() == "SUCCEEDED":
        return "completed"
    return "failed"  # FINISHED with FAILED/KILLED/UNDEFINED, FAILED, KILLED


@dataclass
class ParsedApps:
    jobs: list[dict[str, Any]] = field(default_factory=list)
    native: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> facts for events


def parse_apps(documents: list[Mapping[str, Any]], settings: YarnSettings) -> ParsedApps:
    """``/ws/v1/cluster/apps`` answers → snapshot jobs. A running application is one pod per
    running container; its GPUs and their nodes are not in the ResourceManager's answer, so it
    has ``gpus_per_pod`` 0 and no allocation until :func:`attach_allocations` gives it the
    GPUs the NodeManagers assigned to its containers. ``pending_reason`` is YARN's state
    (``ACCEPTED``: waiting for resources or for the queue's AM share), the diagnostics its
    message."""
    parsed = ParsedApps()
    for document in documents:
        for record in _records(document, "apps", "app", "/ws/v1/cluster/apps"):
            record = _mapping(record)
            ident = _text(record.get("id"))
            submitted = ms_time(record.get("startedTime"))
            if not ident or ident in parsed.native or submitted is None:
                continue
            state = app_state(record)
            queue = _text(record.get("queue")) or None
            running = finite_number(record.get("runningContainers"))
            pods = int(running) if running is not None and running >= 1 else 1
            launched = ms_time(record.get("launchTime")) or submitted
            native = _text(record.get("state")).upper()
            preempted = sum(
                int(finite_number(record.get(k)) or 0)
                for k in ("numAMContainerPreempted", "numNonAMContainerPreempted")
            )
            job = {
                "id": ident,
                "name": _text(record.get("name")) or None,
                "tenant": queue,
                "queue": queue,
                "pool": _text(record.get("appNodeLabelExpression")) or settings.default_pool,
                "kind": None,
                "priority": int(finite_number(record.get("priority")) or 0),
                "state": state,
                "submitted": submitted,
                "started": launched if state != "pending" else None,
                "ended": ms_time(record.get("finishedTime"))
                if state in {"completed", "failed"}
                else None,
                "pods": pods,
                "gpus_per_pod": 0,
                "gang": False,
                "min_member": pods,
                "allocation": [],
                "pending_reason": native if state == "pending" else None,
                "preemptions": preempted,
            }
            parsed.jobs.append(job)
            parsed.native[ident] = {
                "native_state": native,
                "final_status": _text(record.get("finalStatus")).upper(),
                "diagnostics": _text(record.get("diagnostics")).strip()[:2000],
                "user": _text(record.get("user")),
                "submit_ms": int(finite_number(record.get("startedTime")) or 0),
                "finish_ms": int(finite_number(record.get("finishedTime")) or 0),
                "launch_ms": int(finite_number(record.get("launchTime")) or 0),
            }
    return parsed


# -- GPUs per container (NodeManagers) ----------------------------------------------------------

_CONTAINER = re.compile(r"^container_(?:e\d+_)?(\d+)_(\d+)_\d+_\d+\Z")


def container_app(container_id: str) -> str | None:
    """``container_1795939000000_0001_01_000002`` (or ``container_e17_...``) → its application,
    ``application_1795939000000_0001`` (YARN's ids say it; nothing is guessed)."""
    match = _CONTAINER.match(container_id)
    return f"application_{match.group(1)}_{match.group(2)}" if match else None


def assigned_gpus(document: Mapping[str, Any]) -> dict[str, list[int]]:
    """A NodeManager's ``/ws/v1/node/resources/yarn.io%2Fgpu`` → container id → the GPU
    indexes assigned to it (``assignedGpuDevices[]``: ``index``, ``minorNumber``,
    ``containerId``; newer Hadoop wraps the object in ``nmGpuResourceInfo``)."""
    info = _mapping(document.get("nmGpuResourceInfo")) or document
    found: dict[str, list[int]] = {}
    for device in _list(info.get("assignedGpuDevices"))[:1024]:
        device = _mapping(device)
        container = _text(device.get("containerId"))
        index = finite_number(device.get("index"))
        if container and index is not None and 0 <= index < 1024 and index == int(index):
            found.setdefault(container, []).append(int(index))
    return {c: sorted(set(indexes)) for c, indexes in found.items()}


def attach_allocations(parsed: ParsedApps, by_node: Mapping[str, Mapping[str, list[int]]]) -> None:
    """Give each running application its containers' GPUs (one pod per container; pods of
    unequal size split to their greatest common size, as Slurm's are)."""
    held: dict[str, list[tuple[str, list[int]]]] = {}
    for node, containers in by_node.items():
        for container, indexes in sorted(containers.items()):
            app = container_app(container)
            if app and indexes:
                held.setdefault(app, []).append((node, indexes))
    for job in parsed.jobs:
        if job["state"] != "running" or job["id"] not in held:
            continue
        size = 0
        for _, indexes in held[job["id"]]:
            size = math.gcd(size, len(indexes))
        pods = [
            {"node": node, "gpus": indexes[start : start + size]}
            for node, indexes in held[job["id"]]
            for start in range(0, len(indexes), size)
        ]
        job.update(pods=len(pods), gpus_per_pod=size, min_member=len(pods), allocation=pods)


# -- events --------------------------------------------------------------------------------------

CURSOR_VERSION = 1


@dataclass(frozen=True)
class EventCursor:
    """The previous read's time (ms) and a digest of each pending application's diagnostics
    (reported again only when they change)."""

    time_ms: int | None = None
    pending: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> EventCursor:
        try:
            data = json.loads(text or "")
        except ValueError:
            return cls()
        if not isinstance(data, dict) or data.get("v") != CURSOR_VERSION:
            return cls()
        pending = data.get("pending") if isinstance(data.get("pending"), dict) else {}
        time_ms = data.get("t") if isinstance(data.get("t"), int) else None
        return cls(time_ms=time_ms, pending={str(k): str(v) for k, v in pending.items()})

    def dump(self) -> str:
        return json.dumps(
            {"v": CURSOR_VERSION, "t": self.time_ms, "pending": dict(self.pending)},
            separators=(",", ":"),
            sort_keys=True,
        )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def derive_events(
    parsed: ParsedApps, cursor: EventCursor, *, now_ms: int, overlap_ms: int = 300_000
) -> tuple[list[dict[str, Any]], EventCursor]:
    """``submitted`` at an application's start time, ``started`` at its AM's launch,
    ``completed``/``failed`` at its finish
    time (since the cursor, less ``overlap_ms``), and ``failed_scheduling`` for a pending
    application whose diagnostics changed since the last read (reason: its YARN state,
    message: the diagnostics)."""
    since = None if cursor.time_ms is None else cursor.time_ms - overlap_ms
    events: list[dict[str, Any]] = []
    pending: dict[str, str] = {}

    def add(ms: int, kind: str, key: str, job: str, reason: str, message: str) -> None:
        events.append(
            {
                "time": ms_time(ms),
                "kind": kind,
                "job": job,
                "node": None,
                "reason": reason,
                "message": message,
                "dedup_key": key,
            }
        )

    for job in parsed.jobs:
        ident = job["id"]
        facts = parsed.native[ident]
        if facts["submit_ms"] > 0 and (since is None or facts["submit_ms"] >= since):
            add(
                facts["submit_ms"],
                "submitted",
                f"app:{ident}:submitted",
                ident,
                "Submitted",
                f"application {ident} submitted to queue {job['queue']}",
            )
        launch = facts["launch_ms"]
        if job["state"] != "pending" and launch > 0 and (since is None or launch >= since):
            add(
                launch,
                "started",
                f"app:{ident}:started",
                ident,
                "Started",
                f"application {ident} started (its ApplicationMaster launched)",
            )
        ended = job["state"] in {"completed", "failed"} and facts["finish_ms"] > 0
        if ended and (since is None or facts["finish_ms"] >= since):
            status = facts["final_status"] or facts["native_state"]
            detail = f": {facts['diagnostics']}" if facts["diagnostics"] else ""
            add(
                facts["finish_ms"],
                job["state"],
                f"app:{ident}:{status}",
                ident,
                status,
                f"application {ident} ended {status}{detail}",
            )
        if job["state"] == "pending":
            digest = _digest(f"{facts['native_state']}\n{facts['diagnostics']}")
            pending[ident] = digest
            if cursor.pending.get(ident) != digest:
                add(
                    now_ms,
                    "failed_scheduling",
                    f"app:{ident}:pending:{digest}",
                    ident,
                    facts["native_state"],
                    facts["diagnostics"] or f"application {ident} is {facts['native_state']}",
                )
    events.sort(key=lambda e: (e["time"] or "", e["dedup_key"]))
    return events, EventCursor(time_ms=now_ms, pending=pending)


# -- advice --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityLeaf:
    path: str  # root.teams.research
    absolute: float | None  # % of the cluster (the queue's weight here)
    parent: str  # root.teams
    parent_absolute: float  # % of the cluster


def capacity_leaves(document: Mapping[str, Any]) -> dict[str, CapacityLeaf]:
    """Capacity Scheduler leaves by name, with their path and their parent's absolute
    capacity (what a relative ``capacity`` setting is a percentage of)."""
    info = _mapping(_mapping(document.get("scheduler")).get("schedulerInfo"))
    found: dict[str, CapacityLeaf] = {}

    def walk(queue: Mapping[str, Any], path: str, absolute: float, depth: int) -> None:
        for child in _children(queue, "queues"):
            name = _text(child.get("queueName"))
            if not name or depth >= MAX_QUEUE_DEPTH:
                continue
            child_path = _text(child.get("queuePath")) or f"{path}.{name}"
            child_absolute = finite_number(child.get("absoluteCapacity"))
            if _children(child, "queues"):
                walk(child, child_path, child_absolute or 0.0, depth + 1)
            else:
                found.setdefault(name, CapacityLeaf(child_path, child_absolute, path, absolute))

    if _text(info.get("type")) == "capacityScheduler":
        walk(info, _text(info.get("queueName")) or "root", 100.0, 0)
    return found


def queue_advice(kind: str, queue: str, to: Any, leaf: CapacityLeaf | None = None) -> str:
    """What an admin would change for a queue-weight recommendation, as text (gpuobs does not
    write it: see docs/integrations.md). For the Capacity Scheduler the weight is the queue's
    absolute capacity (% of the cluster); the setting is relative to its parent, so the text
    gives the parent's share of it."""
    if kind == "capacityScheduler":
        target = finite_number(to)
        if leaf is None or target is None or leaf.parent_absolute <= 0:
            return (
                f"set yarn.scheduler.capacity.<parent path>.{queue}.capacity so that the queue "
                f"gets {to} % of the cluster (the setting is a percent of its parent; siblings "
                "must still sum to 100) in capacity-scheduler.xml, then run "
                "'yarn rmadmin -refreshQueues'"
            )
        relative = round(target / leaf.parent_absolute * 100, 2)
        return (
            f"set yarn.scheduler.capacity.{leaf.path}.capacity to {relative:g} ({target:g} % of "
            f"the cluster is {relative:g} % of {leaf.parent}, which has "
            f"{leaf.parent_absolute:g} %; lower its siblings so they still sum to 100) in "
            "capacity-scheduler.xml, or through "
            "the scheduler configuration API if the queue store is mutable, then run "
            "'yarn rmadmin -refreshQueues'"
        )
    if kind == "fairScheduler":
        return (
            f"set <weight>{to}</weight> on queue {queue} in the Fair Scheduler's allocation file "
            "(fair-scheduler.xml); the ResourceManager reloads it within 10 s"
        )
    return f"the {kind or 'FIFO'} scheduler has no queue weights; use the Capacity Scheduler"
