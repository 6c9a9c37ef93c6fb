"""What the node, GPU, heatmap, queue and job pages read of the stored snapshots.

Each cycle stores its ``gpuobs.snapshot/v1`` document (``Snapshot``, zlib-compressed JSON), and
a stored snapshot never changes, so what a page extracts from one is kept in this process by
the snapshot's id (small LRU caches) and the next page reads it without decompressing again.

- :func:`node_view` -- one node of one snapshot: its entry, its GPUs and the jobs placed on it,
  read from the snapshot's index (:mod:`diagnosis.core.snapshot_index`) without parsing the
  rest; :func:`job_records` -- jobs' records, likewise (the node, GPU and job pages).
- :func:`latest_document` -- the newest stored snapshot of a cluster, whole (the queue pages
  need its jobs; the node and GPU pages of a snapshot stored before there was an index).
- :func:`gpu_metrics` -- the per-GPU metrics of one snapshot only: the document is read member by
  member and reading stops after ``gpus``, so the jobs and events of a big cluster are never
  parsed for the heatmap or a time series.
- :func:`sampled_snapshots` -- at most ``max_points`` snapshots spread evenly over a time range
  (a time series is downsampled by choosing snapshots, never by reading all of them).

docs/ui.md ("Nodes and GPUs") says what this costs.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from threading import Lock
from typing import Any

from diagnosis.core.snapshot_index import (
    SUMMARY_METRICS,
    SnapshotIndex,
    SnapshotIndexError,
    node_part,
)
from diagnosis.models import Cluster, Snapshot
from diagnosis.models.snapshot_parts import read_index_parts

logger = logging.getLogger(__name__)

MAX_POINTS = 120
# GPU metrics the pages chart: (snapshot metric, statistic). Absent ones stay None.
SERIES_METRICS: dict[str, tuple[str, str]] = {
    metric: (metric, statistic) for metric, statistic in SUMMARY_METRICS.items()
}
GpuKey = tuple[str, int, int]  # node, index, MIG instance (-1: the whole GPU)


class _Lru:
    """A small thread-safe LRU cache of values computed from immutable stored rows."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[Any, Any] = OrderedDict()
        self.lock = Lock()

    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        value = compute()
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return value

    def peek(self, key: Any) -> Any:
        with self.lock:
            return self.items.get(key)

    def clear(self) -> None:
        with self.lock:
            self.items.clear()


_documents = _Lru(4)
_metrics = _Lru(512)
_derived = _Lru(32)
_indexes = _Lru(8)
_nodes = _Lru(4096)  # (snapshot id, node) -> NodeView | None
_node_metrics = _Lru(1024)  # (snapshot id, nodes) -> GpuMetrics of those nodes


def forget_cached() -> None:
    """Drop what this process keeps of stored snapshots (tests that delete and recreate rows)."""
    for cache in (_documents, _metrics, _derived, _indexes, _nodes, _node_metrics):
        cache.clear()


def derived(key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
    """What a page computes from stored snapshots only (``key`` must name them by id, and
    everything else the result depends on), kept like the snapshots' own extracts."""
    return _derived.get(key, compute)


def _raw(snapshot_id: int) -> str:
    document = Snapshot.objects.filter(pk=snapshot_id).values_list("document", flat=True).first()
    if document is None:
        return "{}"
    return zlib.decompress(bytes(document)).decode()


_DECODER = json.JSONDecoder()


def read_members(raw: str, wanted: Iterable[str]) -> dict[str, Any]:
    """The top-level members ``wanted`` of the JSON object ``raw``, read in document order and
    stopping as soon as all of them are found (what follows is never parsed)."""
    wanted = set(wanted)
    found: dict[str, Any] = {}
    ws = " \t\n\r"
    i = 0
    while i < len(raw) and raw[i] in ws:
        i += 1
    if raw[i : i + 1] != "{":
        return found
    i += 1
    while wanted - set(found):
        while i < len(raw) and raw[i] in ws + ",":
            i += 1
        if i >= len(raw) or raw[i] == "}":
            break
        key, i = _DECODER.raw_decode(raw, i)
        while raw[i] in ws + ":":
            i += 1
        value, i = _DECODER.raw_decode(raw, i)
        if key in wanted:
            found[key] = value
    return found


@dataclass(frozen=True)
class StoredSnapshot:
    id: int
    as_of: datetime


def latest_snapshot(cluster: Cluster) -> StoredSnapshot | None:
    row = (
        Snapshot.objects.filter(cluster=cluster)
        .order_by("-as_of", "-id")
        .values_list("id", "as_of")
        .first()
    )
    return StoredSnapshot(*row) if row else None


def snapshot_document(snapshot_id: int) -> dict[str, Any]:
    """The whole document of one stored snapshot ({} when there is none by that id)."""
    return _documents.get(snapshot_id, lambda: json.loads(_raw(snapshot_id)))


def latest_document(cluster: Cluster) -> tuple[StoredSnapshot | None, dict[str, Any]]:
    """The newest stored snapshot of ``cluster`` and its whole document ({} when none)."""
    latest = latest_snapshot(cluster)
    if latest is None:
        return None, {}
    return latest, snapshot_document(latest.id)


@dataclass(frozen=True)
class GpuMetrics:
    """One snapshot's GPUs: each GPU's record (node, index, uuid, health, MIG, Xids) and its
    charted metrics (:data:`SERIES_METRICS`, None when absent), in the document's order."""

    nodes: dict[str, dict[str, Any]]
    gpus: dict[GpuKey, dict[str, Any]]

    def of_node(self, node: str) -> list[dict[str, Any]]:
        return [gpu for key, gpu in self.gpus.items() if key[0] == node]

    def units(self, node: str, index: int) -> list[GpuKey]:
        """The units of GPU ``index`` of ``node``: the GPU, or each of its MIG instances."""
        return self._units.get((node, index), [])

    @cached_property
    def _units(self) -> dict[tuple[str, int], list[GpuKey]]:
        units: dict[tuple[str, int], list[GpuKey]] = {}
        for key in self.gpus:
            units.setdefault(key[:2], []).append(key)
        return units

    def model_of(self, key: GpuKey) -> str | None:
        """A GPU's model: its own where the snapshot gives one (a node with several models,
        docs/snapshot.md), else its node's."""
        gpu = self.gpus.get(key) or {}
        return gpu.get("gpu_model") or (self.nodes.get(key[0]) or {}).get("gpu_model")


def gpu_key(entry: dict[str, Any]) -> GpuKey:
    mig = entry.get("mig") or {}
    instance = mig.get("instance") if isinstance(mig, dict) else None
    return (str(entry.get("node")), int(entry.get("index", 0)), int(instance) if instance else -1)


def _gpu_metrics(
    snapshot_id: int, document: dict[str, Any] | None = None, raw: str | None = None
) -> GpuMetrics:
    if document is not None:
        members = document
    else:
        members = read_members(raw if raw is not None else _raw(snapshot_id), ("nodes", "gpus"))
    nodes = {str(n.get("name")): n for n in members.get("nodes") or () if isinstance(n, dict)}
    gpus: dict[GpuKey, dict[str, Any]] = {}
    for entry in members.get("gpus") or ():
        if not isinstance(entry, dict):
            continue
        record = {
            "node": str(entry.get("node")),
            "index": int(entry.get("index", 0)),
            "uuid": entry.get("uuid") or "",
            "health": entry.get("health") or "ok",
            "mig": entry.get("mig") or None,
            "xid": entry.get("xid") or [],
            "gpu_model": entry.get("gpu_model"),
        }
        for name, (metric, stat) in SERIES_METRICS.items():  # inline: 16,384 GPUs x 6
            stats = entry.get(metric)
            value = stats.get(stat) if type(stats) is dict else None
            record[name] = float(value) if type(value) in (int, float) else None
        gpus[gpu_key(entry)] = record
    return GpuMetrics(nodes=nodes, gpus=gpus)


def _index_of(header: bytes | None, body: bytes | None) -> SnapshotIndex | None:
    if header is None:
        return None
    try:
        return SnapshotIndex.in_memory(bytes(header), bytes(body or b""))
    except SnapshotIndexError as error:
        logger.warning("a stored snapshot index does not read (%s): the document is read", error)
        return None


def snapshot_index(snapshot_id: int) -> SnapshotIndex | None:
    """The index of one stored snapshot, its parts' bytes in memory (None: the snapshot was
    stored before there was an index, or its index does not read)."""

    def load() -> SnapshotIndex | None:
        row = (
            Snapshot.objects.filter(pk=snapshot_id)
            .values_list("index_header", "index_body")
            .first()
        )
        return _index_of(*row) if row else None

    return _indexes.get(snapshot_id, load)


@dataclass(frozen=True)
class NodeView:
    """One node of one snapshot: ``metrics`` holds that node and its GPUs only; ``jobs`` the
    records of the jobs whose allocation is on it (document order)."""

    metrics: GpuMetrics
    jobs: list[Mapping[str, Any]]

    @property
    def record(self) -> dict[str, Any]:
        return next(iter(self.metrics.nodes.values()))


def node_view(snapshot_id: int, node: str) -> NodeView | None:
    """One node of a stored snapshot (None: the snapshot lists no such node): from the
    snapshot's index, else from its whole document."""

    def compute() -> NodeView | None:
        index = snapshot_index(snapshot_id)
        if index is not None:
            part = index.node(node)
            if part is None:
                return None
            found = index.jobs(part["jobs"])
            jobs = [found[j] for j in part["jobs"] if j in found]
            members = {"nodes": [part["node"]], "gpus": part["gpus"]}
            return NodeView(_gpu_metrics(snapshot_id, members), jobs)
        document = snapshot_document(snapshot_id)
        metrics = gpu_metrics(snapshot_id, document)
        if node not in metrics.nodes:
            return None
        jobs = [
            job
            for job in document.get("jobs") or ()
            if any(pod.get("node") == node for pod in job.get("allocation") or ())
        ]
        own = GpuMetrics(
            nodes={node: metrics.nodes[node]},
            gpus={key: gpu for key, gpu in metrics.gpus.items() if key[0] == node},
        )
        return NodeView(own, jobs)

    return _nodes.get((snapshot_id, node), compute)


def job_records(snapshot_id: int, job_ids: Iterable[str]) -> dict[str, Mapping[str, Any]]:
    """The records of ``job_ids`` in one stored snapshot (those it lists), by id."""
    wanted = {str(j) for j in job_ids}
    index = snapshot_index(snapshot_id)
    if index is not None:
        return index.jobs(wanted)
    jobs = snapshot_document(snapshot_id).get("jobs") or ()
    return {str(job["id"]): job for job in jobs if str(job.get("id")) in wanted}


def gpu_metrics(snapshot_id: int, document: dict[str, Any] | None = None) -> GpuMetrics:
    """The GPU metrics of one stored snapshot (``document``: its parsed document, if at hand;
    else its index's ``gpus`` part, else its document's nodes and GPUs)."""

    def compute() -> GpuMetrics:
        if document is None:
            part = read_index_parts([snapshot_id], "gpus").get(snapshot_id, {}).get("gpus")
            if part is not None:
                return _gpu_metrics(snapshot_id, part)
        return _gpu_metrics(snapshot_id, document)

    return _metrics.get(snapshot_id, compute)


def queue_members(stored: StoredSnapshot) -> Mapping[str, Any]:
    """What the queue pages read of a stored snapshot (``scheduler``, ``queues``, ``jobs`` with
    the fields of :data:`~diagnosis.core.snapshot_index.QUEUE_JOB_FIELDS`): its index's
    ``queues`` part, else its whole document."""

    def compute() -> Mapping[str, Any]:
        part = read_index_parts([stored.id], "queues").get(stored.id, {}).get("queues")
        return part if part is not None else snapshot_document(stored.id)

    return derived(("queues", stored.id), compute)


def gpu_metrics_of(snapshot_ids: Iterable[int]) -> dict[int, GpuMetrics]:
    """The GPU metrics of several stored snapshots; those not kept yet are read in one query."""
    ids = list(snapshot_ids)
    found = {i: m for i in ids if (m := _metrics.peek(i)) is not None}
    indexed = read_index_parts([i for i in ids if i not in found], "gpus")
    for snapshot_id, parts in indexed.items():
        if "gpus" in parts:
            found[snapshot_id] = _metrics.get(
                snapshot_id, lambda i=snapshot_id, m=parts["gpus"]: _gpu_metrics(i, m)
            )
    missing = [i for i in ids if i not in found]
    if missing:
        rows = Snapshot.objects.filter(pk__in=missing).values_list("id", "document")
        for snapshot_id, document in rows.iterator(chunk_size=8):
            raw = zlib.decompress(bytes(document)).decode()
            found[snapshot_id] = _metrics.get(
                snapshot_id, lambda i=snapshot_id, r=raw: _gpu_metrics(i, raw=r)
            )
    return found


# A series of GPUs on at most this many nodes (a node's, a GPU's, a small job's) is read from
# the snapshots' indexes, only those nodes' parts; more, from the documents' GPU metrics.
NODE_READ_MAX = 8


def gpu_metrics_on_nodes(snapshot_ids: list[int], nodes: set[str]) -> dict[int, GpuMetrics]:
    """The GPU metrics of ``nodes`` in several stored snapshots (the snapshots' whole metrics
    where this process has them already, or where the nodes are many or a snapshot has no
    index)."""
    found = {i: m for i in snapshot_ids if (m := _metrics.peek(i)) is not None}
    if len(nodes) <= NODE_READ_MAX:
        found |= _node_metrics_of([i for i in snapshot_ids if i not in found], sorted(nodes))
    rest = [i for i in snapshot_ids if i not in found]
    return found | (gpu_metrics_of(rest) if rest else {})


def _node_metrics_of(snapshot_ids: list[int], nodes: list[str]) -> dict[int, GpuMetrics]:
    """The metrics of ``nodes`` in those of the snapshots that have an index (kept by snapshot
    and nodes), read from the nodes' parts."""
    wanted = tuple(nodes)
    found = {i: m for i in snapshot_ids if (m := _node_metrics.peek((i, wanted))) is not None}
    missing = [i for i in snapshot_ids if i not in found]
    if not missing:
        return found
    for snapshot_id, parts in read_index_parts(missing, *map(node_part, wanted)).items():
        members = {
            "nodes": [part["node"] for part in parts.values()],
            "gpus": [gpu for part in parts.values() for gpu in part["gpus"]],
        }
        metrics = _gpu_metrics(snapshot_id, members)
        found[snapshot_id] = _node_metrics.get((snapshot_id, wanted), lambda m=metrics: m)
    return found


def sampled_snapshots(
    cluster: Cluster, start: datetime, end: datetime, max_points: int = MAX_POINTS
) -> list[StoredSnapshot]:
    """At most ``max_points`` stored snapshots of ``cluster`` in ``[start, end]``, spread evenly
    over the snapshots there (always the first and the last)."""
    rows = list(
        Snapshot.objects.filter(cluster=cluster, as_of__gte=start, as_of__lte=end)
        .order_by("as_of", "id")
        .values_list("id", "as_of")
    )
    if len(rows) > max_points > 1:
        step = (len(rows) - 1) / (max_points - 1)
        rows = [rows[round(i * step)] for i in range(max_points)]
    return [StoredSnapshot(*row) for row in rows]


def gpu_series(
    cluster: Cluster, keys: Iterable[GpuKey], start: datetime, end: datetime, max_points: int
) -> dict[GpuKey, list[dict[str, Any]]]:
    """Per GPU of ``keys``: its metrics (``as_of`` and :data:`SERIES_METRICS`) at each sampled
    snapshot in the range that reports it."""
    keys = list(keys)
    series: dict[GpuKey, list[dict[str, Any]]] = {key: [] for key in keys}
    sampled = sampled_snapshots(cluster, start, end, max_points)
    frames = gpu_metrics_on_nodes([s.id for s in sampled], {key[0] for key in keys})
    for stored in sampled:
        frame = frames.get(stored.id)
        if frame is None:
            continue
        for key in keys:
            gpu = frame.gpus.get(key)
            if gpu is not None:
                series[key].append({"as_of": stored.as_of} | {m: gpu[m] for m in SERIES_METRICS})
    return series
