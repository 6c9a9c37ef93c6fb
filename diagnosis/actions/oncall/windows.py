"""The jobs and tenants a fault hit (:func:`jobs_hit`), from the stored snapshots of its hit
window (the last before it and those up to ``HIT_WINDOW`` after), as
:func:`diagnosis.core.incident_hits.hit_jobs_from_history` reads them for one node.

A followed incident reads its window every cycle until the window is over (``hit_settled``):
~11 stored snapshots, each ~12 MB of JSON at 16,384 GPUs (0.3-0.5 s to decode). A stored
snapshot never changes, so what an incident's node needs of it -- the jobs with a pod there,
the events that may name it -- is kept in the worker process across cycles, by snapshot and
node (bounded, least recently used out): a cycle reads only the snapshots it has not read
for that node yet, most cycles just the newest one (issue #17), and reads them from their
indexes' parts (the node's, its events', its jobs' buckets), decoding only a snapshot stored
without them (issue #35).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.incident_hits import HIT_WINDOW, hit_jobs_from_history, jobs_by_node, on_node
from diagnosis.core.incident_reads import events_on
from diagnosis.core.snapshot_index import hit_parts, job_parts, node_part, placed_job_ids
from diagnosis.core.vocabulary import parse_time
from diagnosis.models import Cluster, Job, SchedulerEvent, Snapshot
from diagnosis.models.snapshot_parts import read_parts, stored_indexes

# (snapshot, node) entries kept per worker process; one is a node's few jobs and events
CACHED_READS = 4096

_reads: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()


class DecodedSnapshots:
    """What one cycle read for its incidents' hit windows: the stored snapshots it decoded
    (indexed by node, :func:`jobs_by_node`), and -- once :meth:`prefetch` named the faults it
    follows -- the window snapshots' rows, the stored scheduler events of their nodes and the
    jobs they hit, each read in one query for all of them instead of a few per incident (at
    131,072 GPUs a cycle follows hundreds). ``at_hand`` are stored snapshots the caller holds
    as frames (the cycle's own, just stored): never decoded, and only their jobs and events on
    the nodes read (the faults' :meth:`prefetch` named, and the one asked for) are dumped from
    the frames: a cycle whose snapshot is dumped in another process does not dump its 160,000
    jobs again (#35)."""

    def __init__(
        self, at_hand: Mapping[int, snapshot_format.ClusterSnapshot] | None = None
    ) -> None:
        self._at_hand = dict(at_hand or {})
        self._nodes: set[str] = set()
        self._on_nodes: dict[int, tuple[set[str], dict[str, Any]]] = {}
        self._indexed: dict[int, dict[str, Any]] = {}
        self._span: tuple[datetime, datetime] | None = None
        self._snapshots: list[Snapshot] = []
        self._events: dict[str, list[dict[str, Any]]] = {}
        self._jobs: dict[str, Job] = {}
        self.hits: dict[tuple[str, int | None, datetime], dict[str, dict[str, Any]]] = {}
        # what :meth:`prefetch` read from the window snapshots' indexes, by (snapshot, node):
        # kept for the cycle, whatever the process-wide reads let go meanwhile
        self.read_from_index: dict[tuple[Any, ...], dict[str, Any]] = {}

    def indexed(self, snapshot: Snapshot, node: str) -> dict[str, Any]:
        """:func:`jobs_by_node` of a snapshot, sure to hold ``node``'s jobs and events."""
        if snapshot.pk in self._at_hand:
            return self._indexed_on(snapshot.pk, self._nodes | {node})
        if snapshot.pk not in self._indexed:
            self._indexed[snapshot.pk] = jobs_by_node(snapshot.load_document())
        return self._indexed[snapshot.pk]

    def _indexed_on(self, pk: int, nodes: set[str]) -> dict[str, Any]:
        covered, indexed = self._on_nodes.get(pk, (set(), {}))
        if not nodes <= covered:
            snap = self._at_hand[pk]
            indexed = jobs_by_node(
                {
                    "as_of": snapshot_format.format_time(snap.as_of),
                    "events": events_on(snap, nodes),
                    "jobs": snapshot_format.dump_jobs_on(snap, nodes),
                }
            )
            self._on_nodes[pk] = (nodes, indexed)
        return indexed

    def prefetch(self, cluster: Cluster, faults: Iterable[tuple[str, datetime]]) -> None:
        """Read, for faults ``(node, at)``, their window snapshots' rows and their nodes'
        stored events in one query each."""
        faults = list(faults)
        self._nodes = {node for node, _ in faults}
        if not faults:
            return
        low = min(at for _, at in faults)
        high = max(at for _, at in faults) + HIT_WINDOW
        self._snapshots = _window_rows(cluster, low, high)
        self._span = (low, high)
        self._events = {}
        stored = SchedulerEvent.objects.filter(
            cluster=cluster,
            node__in={node for node, _ in faults},
            time__gte=low,
            time__lte=high,
        ).values("time", "kind", "job_external_id", "node")
        for event in stored:
            self._events.setdefault(event["node"], []).append(event)
        self._read_indexed(faults)

    def _read_indexed(self, faults: list[tuple[str, datetime]]) -> None:
        """What each fault's node needs of its window's stored snapshots, from their indexes'
        parts -- the node's part, its events' and the buckets of its jobs: three queries for
        all of them -- for the (snapshot, node) pairs this process has not read yet. A process
        that has read none (a command, a new worker) decoded each window snapshot's whole
        document before (~12 MB of JSON at 16,384 GPUs, ~0.15 s each; issue #35). A snapshot
        whose index predates the hit-read parts is left to its document."""
        pairs: dict[tuple[Any, ...], tuple[Snapshot, str]] = {}
        for node, at in faults:
            for snapshot in self._prefetched_window(at):
                key = _read_key(snapshot, node)
                if snapshot.pk in self._at_hand or snapshot.pk in self._indexed or key in _reads:
                    continue
                pairs[key] = (snapshot, node)
        if not pairs:
            return
        indexes = stored_indexes({snapshot.pk for snapshot, _ in pairs.values()})
        wanted: dict[int, list[str]] = {}
        for snapshot, node in pairs.values():
            if snapshot.pk in indexes:
                wanted.setdefault(snapshot.pk, []).extend(hit_parts(node))
        first = read_parts(indexes, wanted)
        buckets: dict[int, list[str]] = {}
        for snapshot, node in pairs.values():
            parts = first.get(snapshot.pk, {})
            if (hits := parts.get("hits")) is not None:
                jobs = placed_job_ids(hits, parts.get(node_part(node)), node)
                buckets.setdefault(snapshot.pk, []).extend(job_parts(jobs))
        second = read_parts(indexes, buckets)
        for key, (snapshot, node) in pairs.items():
            if snapshot.pk not in first or "hits" not in first[snapshot.pk]:
                continue
            parts = {**first[snapshot.pk], **second.get(snapshot.pk, {})}
            read = indexes[snapshot.pk].hit_read(node, parts)
            if read is not None:
                self.read_from_index[key] = read
                _keep(key, read)

    def prefetch_jobs(self, cluster: Cluster, job_ids: Iterable[str]) -> None:
        """The Job rows (with their tenants) of ``job_ids`` not read yet, in one query."""
        wanted = set(job_ids) - self._jobs.keys()
        if wanted:
            rows = Job.objects.filter(cluster=cluster, external_id__in=wanted)
            self._jobs |= {job.external_id: job for job in rows.select_related("tenant")}

    def _prefetched(self, at: datetime) -> bool:
        """Whether :meth:`prefetch` read the whole hit window of a fault at ``at``."""
        return self._span is not None and self._span[0] <= at <= self._span[1] - HIT_WINDOW

    def window(self, cluster: Cluster, at: datetime) -> list[Snapshot]:
        """The rows of the snapshots a fault at ``at`` reads: the last before it and those of
        its hit window, oldest first."""
        if not self._prefetched(at):
            return _window_rows(cluster, at, at + HIT_WINDOW)
        return self._prefetched_window(at)

    def _prefetched_window(self, at: datetime) -> list[Snapshot]:
        before = [s for s in self._snapshots if s.as_of < at][-1:]
        return before + [s for s in self._snapshots if at <= s.as_of <= at + HIT_WINDOW]

    def stored_events(self, cluster: Cluster, node: str, at: datetime) -> list[dict[str, Any]]:
        """The stored scheduler events on ``node`` within the hit window after ``at``."""
        if not self._prefetched(at):
            return list(
                SchedulerEvent.objects.filter(
                    cluster=cluster, node=node, time__gte=at, time__lte=at + HIT_WINDOW
                ).values("time", "kind", "job_external_id", "node")
            )
        return [e for e in self._events.get(node, ()) if at <= e["time"] <= at + HIT_WINDOW]

    def jobs(self, cluster: Cluster, job_ids: Iterable[str]) -> dict[str, Job]:
        job_ids = list(job_ids)
        self.prefetch_jobs(cluster, job_ids)
        return {job_id: self._jobs[job_id] for job_id in job_ids if job_id in self._jobs}


def _window_rows(cluster: Cluster, low: datetime, high: datetime) -> list[Snapshot]:
    """The stored snapshots' rows (not their documents, nor their indexes: 26 MB a row at
    131,072 GPUs, issue #35) from the last before ``low`` to ``high``, oldest first."""
    snapshots = Snapshot.objects.filter(cluster=cluster).defer(
        "document", "index_header", "index_body"
    )
    chosen = list(snapshots.filter(as_of__lt=low).order_by("-as_of")[:1])
    return chosen + list(snapshots.filter(as_of__gte=low, as_of__lte=high).order_by("as_of"))


def window_documents(
    cluster: Cluster, node: str, at: datetime, loaded: DecodedSnapshots
) -> tuple[list[dict[str, Any]], list[Mapping[str, Any]]]:
    """The window snapshots of a fault on ``node`` at ``at`` (oldest first) as
    :func:`~diagnosis.core.incident_hits.hit_jobs_from_history` reads them (time and the jobs
    on the node), and their events that may concern the node (naming it or no node).
    ``loaded`` keeps the snapshots this cycle decoded."""
    chosen = loaded.window(cluster, at)
    documents: list[dict[str, Any]] = []
    events: list[Mapping[str, Any]] = []
    for snapshot in chosen:
        read = _read_for_node(snapshot, node, loaded)
        documents.append({"as_of": read["as_of"], "jobs": read["jobs"]})
        events += read["events"]
    return documents, events


def _read_key(snapshot: Snapshot, node: str) -> tuple[Any, ...]:
    # the stored row's identity: an id alone could name another row in another database (not
    # its sizes: the cycle's own row reads before its bytes are written, #35)
    return (snapshot._state.db, snapshot.pk, snapshot.created_at, node)


def _keep(key: tuple[Any, ...], read: dict[str, Any]) -> None:
    _reads[key] = read
    while len(_reads) > CACHED_READS:
        _reads.popitem(last=False)


def _read_for_node(snapshot: Snapshot, node: str, loaded: DecodedSnapshots) -> dict[str, Any]:
    key = _read_key(snapshot, node)
    read = _reads.get(key)
    if read is not None:
        _reads.move_to_end(key)
        return read
    if (read := loaded.read_from_index.get(key)) is not None:
        _keep(key, read)
        return read
    indexed = loaded.indexed(snapshot, node)
    read = {
        **on_node(indexed, node),
        "events": [e for e in indexed["events"] if e.get("node") in (None, "", node)],
    }
    _keep(key, read)
    return read


# -- the jobs a fault hit ------------------------------------------------------------------------


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def jobs_hit(
    cluster: Cluster,
    node: str,
    gpu_index: int | None,
    at: datetime,
    *,
    loaded: DecodedSnapshots | None = None,
) -> dict[str, Any]:
    """The jobs and tenants a fault on ``node``/``gpu_index`` at ``at`` hit, from the cluster's
    stored snapshots (the last before ``at``, those up to ``HIT_WINDOW`` after) and its stored
    scheduler events, each with its tenant, state now and GPU-hours lost (its GPUs times the
    time since it started, for a job that then failed, was preempted or evicted: no checkpoints
    are known). ``loaded`` keeps the documents decoded so far by snapshot id, so a cycle that
    follows many incidents decodes each stored snapshot once (and a snapshot read before for
    the node is not decoded again: :mod:`diagnosis.actions.oncall.windows`)."""

    loaded = DecodedSnapshots() if loaded is None else loaded
    hits = window_hits(cluster, node, gpu_index, at, loaded)
    rows = loaded.jobs(cluster, hits)
    jobs = []
    for job_id in sorted(hits):
        hit = hits[job_id]
        doc_job = hit["job"]
        row = rows.get(job_id)
        tenant = row.tenant.name if row is not None and row.tenant else doc_job.get("tenant")
        state = row.state if row is not None else doc_job.get("state")
        started = (row.started_at if row is not None else None) or parse_time(
            doc_job.get("started") or ""
        )
        gpus = (
            row.gpus
            if row is not None
            else sum(len(p.get("gpus") or ()) for p in doc_job.get("allocation") or ())
        )
        lost = 0.0
        if state in ("failed", "preempted", "evicted") and started is not None and started < at:
            lost = round(gpus * (at - started).total_seconds() / 3600, 2)
        jobs.append(
            {
                "id": job_id,
                "name": (row.name if row is not None else doc_job.get("name")) or job_id,
                "tenant": tenant,
                "queue": doc_job.get("queue"),
                "pool": (row.pool if row is not None else None) or doc_job.get("pool"),
                "state": state,
                "gang": bool(row.gang if row is not None else doc_job.get("gang")),
                "gpus": gpus,
                "gpus_here": hit["gpus"],
                "why": hit["why"],
                "events": hit.get("events", []),
                "gpu_hours_lost": lost,
            }
        )
    return {
        "jobs": jobs,
        "tenants": sorted({j["tenant"] for j in jobs if j.get("tenant")}),
        "gpu_hours_lost": round(sum(j["gpu_hours_lost"] for j in jobs), 2),
        "at": iso(at),
    }


def window_hits(
    cluster: Cluster, node: str, gpu_index: int | None, at: datetime, loaded: DecodedSnapshots
) -> dict[str, dict[str, Any]]:
    """:func:`hit_jobs_from_history` of a fault, from the window ``loaded`` reads; computed once
    per cycle and fault (the cycle needs them first to read the jobs hit, then to describe them)."""
    key = (node, gpu_index, at)
    if key not in loaded.hits:
        documents, events = window_documents(cluster, node, at, loaded)
        events += [
            {
                "time": iso(e["time"]),
                "kind": e["kind"],
                "job": e["job_external_id"],
                "node": e["node"],
            }
            for e in loaded.stored_events(cluster, node, at)
        ]
        loaded.hits[key] = hit_jobs_from_history(node, gpu_index, at, documents, events)
    return loaded.hits[key]
