"""Scheduler events and node topologies posted to a cluster, received cheaply and stored apart
from the request (docs/operations.md, "Inbound webhooks").

The receiver validates the post whole (the serializer for events, the ``nvidia-smi topo -m``
parser for a topology: pure, bounded by the body's size), stores it as one
:class:`~diagnosis.models.InboundClusterBatch` row and answers 202 naming it; after the commit it
sends ``diagnosis.tasks.record_cluster_batch``, which stores the events (de-duplicated against
those known) or replaces the node's topology, and writes what it did into the batch's
``result``. A batch is claimed before it is read, so a redelivered task reads it once; storing
is idempotent anyway (events by their key, a topology by its node, an older upload never
replacing a newer one). A batch whose task was never sent (Redis away at the commit) or died is
read by the sweep beat sends every period (:func:`record_pending_cluster_batches`). In the
embedded mode the task runs in the sending process, right after the commit."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Model, Q
from django.utils import timezone

from diagnosis.actions.enqueue import RECORD_CLUSTER_BATCH, send_robustly_on_commit
from diagnosis.actions.records.events import SchedulerEventError, record_scheduler_events
from diagnosis.actions.records.topology import NODE_NAME, check_room_for, record_node_topology
from diagnosis.edge.schedulers.base import EventBatch
from diagnosis.edge.topology import TopologyError, parse_topo_matrix
from diagnosis.models import (
    Cluster,
    InboundClusterBatch,
    InboundKind,
    InboundState,
    NodeTopology,
)

logger = logging.getLogger(__name__)

# a batch claimed longer ago than a task may live belongs to a dead task: another may take it
CLAIM_STALE_S_AFTER_TIME_LIMIT = 5
# a batch whose task has not claimed it this long is read by the sweep (its send was lost)
SWEEP_AFTER_S = 5
MAX_ATTEMPTS = 5


def claim_batch(model: type[Model], batch_id: int) -> bool:
    """Take a pending stored batch (an alert or a cluster batch) for this task, in one
    ``UPDATE``: False when another task holds a live claim on it or it is read already."""
    now = timezone.now()
    stale = now - timedelta(
        seconds=settings.CELERY_TASK_TIME_LIMIT + CLAIM_STALE_S_AFTER_TIME_LIMIT
    )
    return (
        model.objects.filter(pk=batch_id, state=InboundState.PENDING)
        .filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=stale))
        .update(claimed_at=now, attempts=F("attempts") + 1)
        == 1
    )


def _store(batch: InboundClusterBatch) -> InboundClusterBatch:
    """Save a new batch and send its task once it commits (a refused send leaves it to the
    sweep)."""
    with transaction.atomic():
        batch.save()
        send_robustly_on_commit(RECORD_CLUSTER_BATCH, (batch.pk,))
    return batch


def receive_scheduler_events(
    sender: Any, cluster: Cluster, events: list[dict[str, Any]]
) -> InboundClusterBatch:
    """Store a validated batch of normalized events (``EventBatchSerializer.normalized``) for
    the worker: one row, whatever the batch's size or the cluster's."""
    stored = [
        {**event, "time": event["time"].isoformat()}
        if hasattr(event.get("time"), "isoformat")
        else dict(event)
        for event in events
    ]
    return _store(
        InboundClusterBatch(
            sender=sender if getattr(sender, "is_authenticated", False) else None,
            cluster=cluster,
            kind=InboundKind.EVENTS,
            payload={"events": stored},
            items=len(stored),
        )
    )


def receive_node_topology(
    sender: Any, cluster: Cluster, node: str, text: bytes
) -> tuple[InboundClusterBatch, dict[str, Any]]:
    """Check one node's ``nvidia-smi topo -m`` text and store it for the worker; returns the
    batch and what the matrix says (GPUs, NVLink domains, NUMA). Raises
    :class:`~diagnosis.edge.topology.TopologyError` (nothing stored) for a node name that is
    none, text that is no matrix, or one node more than the cluster may store."""
    if not NODE_NAME.match(node):
        raise TopologyError(f"node: {node[:64]!r} is not a node name")
    topology = parse_topo_matrix(text)
    if b"\x00" in text:  # PostgreSQL stores no NUL, in text or JSON
        raise TopologyError("topology text holds a NUL character")
    check_room_for(cluster, node)  # the worker checks again, under the cluster's lock
    parsed = {
        "gpus": topology.gpus,
        "nvlink_domains": [list(d) for d in topology.nvlink_domains],
        "numa": None if topology.numa is None else list(topology.numa),
    }
    batch = _store(
        InboundClusterBatch(
            sender=sender if getattr(sender, "is_authenticated", False) else None,
            cluster=cluster,
            kind=InboundKind.TOPOLOGY,
            node=node,
            payload={"text": text.decode("utf-8")},
            items=1,
        )
    )
    return batch, parsed


def record_cluster_batch(batch_id: int) -> dict[str, Any]:
    """Store one received batch (the task's body); says what it did. A batch that can never be
    stored (an event the store refuses, a topology past ``GPUOBS_TOPOLOGY_MAX_NODES``) is
    ``failed`` with the reason at once; any other error leaves it pending for the next task or
    the sweep, and ``failed`` after :data:`MAX_ATTEMPTS`. Idempotent: a batch already read, or
    held by a live task, is left alone."""
    if not claim_batch(InboundClusterBatch, batch_id):
        return {"batch": batch_id, "outcome": "taken"}
    batch = InboundClusterBatch.objects.select_related("cluster", "sender").get(pk=batch_id)
    try:
        result = _record(batch)
    except (SchedulerEventError, TopologyError) as exc:  # this batch can never be stored
        _finish(batch_id, InboundState.FAILED, {"errors": [str(exc)]}, error=str(exc))
        return {"batch": batch_id, "outcome": "refused"}
    except Exception as exc:  # released for another try, never a silent stall
        gave_up = batch.attempts >= MAX_ATTEMPTS
        stopped = {
            "state": InboundState.FAILED if gave_up else InboundState.PENDING,
            "claimed_at": None,
            "processed_at": timezone.now() if gave_up else None,
            "error": f"{type(exc).__name__}: {exc}"[:2000],
        }
        try:
            InboundClusterBatch.objects.filter(pk=batch_id).update(**stopped)
        except DatabaseError:  # the connection broke under it: once more on a new one
            connection.close()
            InboundClusterBatch.objects.filter(pk=batch_id).update(**stopped)
        raise
    _finish(batch_id, InboundState.DONE, result)
    return {"batch": batch_id, "outcome": "recorded", **result}


def _finish(batch_id: int, state: str, result: dict[str, Any], *, error: str = "") -> None:
    InboundClusterBatch.objects.filter(pk=batch_id).update(
        state=state, processed_at=timezone.now(), result=result, error=error[:2000]
    )


def _record(batch: InboundClusterBatch) -> dict[str, Any]:
    if batch.kind == InboundKind.EVENTS:
        recorded = record_scheduler_events(
            batch.cluster, EventBatch(events=list(batch.payload["events"]), cursor=None)
        )
        return {"stored": recorded.stored, "duplicates": recorded.duplicates}
    newer = NodeTopology.objects.filter(
        cluster=batch.cluster, node=batch.node, uploaded_at__gt=batch.received_at
    ).exists()
    if newer:  # read after a later upload of the node: that one stands
        return {"topology": "superseded"}
    row, created = record_node_topology(
        batch.cluster, batch.node, batch.payload["text"], user=batch.sender, now=batch.received_at
    )
    return {
        "topology": "created" if created else "replaced",
        "gpus": row.gpus,
        "nvlink_domains": row.nvlink_domains,
        "numa": row.numa,
    }


def record_pending_cluster_batches(limit: int = 50) -> list[int]:
    """The sweep (beat, every period): read the batches no task has taken for a while (a send
    lost with Redis, a task that died), oldest first, for at most half a task's soft time limit;
    returns the ids of those it stored."""
    began = time.monotonic()
    before = timezone.now() - timedelta(seconds=SWEEP_AFTER_S)
    ids = list(
        InboundClusterBatch.objects.filter(state=InboundState.PENDING, received_at__lt=before)
        .order_by("received_at")
        .values_list("pk", flat=True)[:limit]
    )
    finished = []
    for pk in ids:
        if time.monotonic() - began > settings.CELERY_TASK_SOFT_TIME_LIMIT / 2:
            break
        try:
            if record_cluster_batch(pk)["outcome"] == "recorded":
                finished.append(pk)
        except Exception:  # recorded on the batch by record_cluster_batch
            logger.exception("inbound batch %s not stored", pk)
            break
    return finished
