"""The stored snapshots a fault's hits are read from (the last before it and those of its hit
window), as :func:`diagnosis.core.incident_hits.hit_jobs_from_history` reads them for one node.

A followed incident reads its window every cycle until the window is over (``hit_settled``):
~11 stored snapshots, each ~12 MB of JSON at 16,384 GPUs (0.3-0.5 s to decode). A stored
snapshot never changes, so what an incident's node needs of it -- the jobs with a pod there,
the events that may name it -- is kept in the worker process across cycles, by snapshot and
node (bounded, least recently used out): a cycle decodes only the snapshots it has not read
for that node yet, most cycles just the newest one (issue #17).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from diagnosis.core.incident_hits import HIT_WINDOW, jobs_by_node, on_node
from diagnosis.models import Cluster, Snapshot

# (snapshot, node) entries kept per worker process; one is a node's few jobs and events
CACHED_READS = 4096

_reads: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()


class DecodedSnapshots:
    """The stored snapshots one cycle decoded, indexed by node (:func:`jobs_by_node`), by id.
    ``at_hand`` are documents the caller holds already (the cycle's own snapshot, just
    stored): they are indexed from memory, never decompressed and decoded again."""

    def __init__(self, at_hand: Mapping[int, Mapping[str, Any]] | None = None) -> None:
        self._at_hand = dict(at_hand or {})
        self._indexed: dict[int, dict[str, Any]] = {}

    def indexed(self, snapshot: Snapshot) -> dict[str, Any]:
        if snapshot.pk not in self._indexed:
            document = self._at_hand.pop(snapshot.pk, None) or snapshot.load_document()
            self._indexed[snapshot.pk] = jobs_by_node(document)
        return self._indexed[snapshot.pk]


def window_documents(
    cluster: Cluster, node: str, at: datetime, loaded: DecodedSnapshots
) -> tuple[list[dict[str, Any]], list[Mapping[str, Any]]]:
    """The window snapshots of a fault on ``node`` at ``at`` (oldest first) as
    :func:`~diagnosis.core.incident_hits.hit_jobs_from_history` reads them (time and the jobs
    on the node), and their events that may concern the node (naming it or no node).
    ``loaded`` keeps the snapshots this cycle decoded."""
    snapshots = Snapshot.objects.filter(cluster=cluster).defer("document")
    chosen = list(snapshots.filter(as_of__lt=at).order_by("-as_of")[:1])
    chosen += list(snapshots.filter(as_of__gte=at, as_of__lte=at + HIT_WINDOW).order_by("as_of"))
    documents: list[dict[str, Any]] = []
    events: list[Mapping[str, Any]] = []
    for snapshot in chosen:
        read = _read_for_node(snapshot, node, loaded)
        documents.append({"as_of": read["as_of"], "jobs": read["jobs"]})
        events += read["events"]
    return documents, events


def _read_for_node(snapshot: Snapshot, node: str, loaded: DecodedSnapshots) -> dict[str, Any]:
    # the stored row's identity: an id alone could name another row in another database
    key = (snapshot._state.db, snapshot.pk, snapshot.created_at, snapshot.json_bytes, node)
    read = _reads.get(key)
    if read is not None:
        _reads.move_to_end(key)
        return read
    indexed = loaded.indexed(snapshot)
    read = {
        **on_node(indexed, node),
        "events": [e for e in indexed["events"] if e.get("node") in (None, "", node)],
    }
    _reads[key] = read
    while len(_reads) > CACHED_READS:
        _reads.popitem(last=False)
    return read
