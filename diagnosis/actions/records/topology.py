"""The per-node topology store: record an uploaded ``nvidia-smi topo -m`` (parsed at the edge by
:mod:`diagnosis.edge.topology`), and merge the stored topology into a cluster's snapshots.

Precedence, most direct first: a node's own upload, then the node-exporter textfile metric (the
Prometheus source puts it in the document), then what the scheduler adapter read (Slurm
``gres.conf``, Kubernetes labels). A stored topology whose GPU count differs from the node's is
not used (the hardware changed or the upload is stale), nor is one the snapshot loader would
refuse (a row written before the upload checks, or by hand): the collection notes name the node,
and the cluster's cycle goes on without it (docs/architecture.md#one-cycle).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from diagnosis.core.snapshot import topology_errors
from diagnosis.edge.topology import TopologyError, parse_topo_matrix
from diagnosis.models import Cluster, NodeTopology

NODE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?\Z")


@transaction.atomic
def record_node_topology(
    cluster: Cluster, node: str, text: str | bytes, *, user=None, now: datetime | None = None
) -> tuple[NodeTopology, bool]:
    """Parse and store one node's ``nvidia-smi topo -m`` output (replacing its previous one).
    Returns the row and whether it was created; raises
    :class:`~diagnosis.edge.topology.TopologyError` (nothing stored) for text that is no matrix,
    a node name that is none (``gpu-121\\n``), or one node more than the cluster's bound
    (``GPUOBS_TOPOLOGY_MAX_NODES``)."""
    if not NODE_NAME.match(node):
        raise TopologyError(f"node: {node[:64]!r} is not a node name")
    topology = parse_topo_matrix(text)
    Cluster.objects.select_for_update().filter(pk=cluster.pk).first()  # one upload at a time
    check_room_for(cluster, node)
    raw = text.decode("utf-8") if isinstance(text, bytes) else text
    row, created = NodeTopology.objects.update_or_create(
        cluster=cluster,
        node=node,
        defaults={
            "gpus": topology.gpus,
            "nvlink_domains": [list(d) for d in topology.nvlink_domains],
            "numa": None if topology.numa is None else list(topology.numa),
            "raw_text": raw,
            "uploaded_at": now or timezone.now(),
            "uploaded_by": user if getattr(user, "is_authenticated", False) else None,
        },
    )
    return row, created


def check_room_for(cluster: Cluster, node: str) -> None:
    """Raise :class:`~diagnosis.edge.topology.TopologyError` when ``node`` would be one node
    more than the cluster may store (``GPUOBS_TOPOLOGY_MAX_NODES``; two indexed queries)."""
    stored = NodeTopology.objects.filter(cluster=cluster)
    if (
        not stored.filter(node=node).exists()
        and stored.count() >= settings.GPUOBS_TOPOLOGY_MAX_NODES
    ):
        raise TopologyError(
            f"cluster {cluster.name} already stores the topology of "
            f"{settings.GPUOBS_TOPOLOGY_MAX_NODES} nodes (GPUOBS_TOPOLOGY_MAX_NODES)"
        )


def merge_stored_topology(cluster: Cluster, document: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot document with each node's stored topology (one query for the cluster)."""
    stored = {row.node: row for row in NodeTopology.objects.filter(cluster=cluster)}
    if not stored:
        return dict(document)
    merged = dict(document)
    notes: list[str] = []
    nodes = []
    for node in document.get("nodes") or []:
        row = stored.get(node.get("name")) if isinstance(node, Mapping) else None
        if row is None:
            nodes.append(node)
            continue
        if row.gpus != node.get("gpus"):
            notes.append(
                f"uploaded topology of {row.node} lists {row.gpus} GPUs, the scheduler "
                f"{node.get('gpus')}: not used"
            )
            nodes.append(node)
            continue
        problem = _unusable(row)
        if problem is not None:
            notes.append(f"uploaded topology of {row.node} is invalid ({problem}): not used")
            nodes.append(node)
            continue
        nodes.append({**node, "topology": row.snapshot_topology()})
    merged["nodes"] = nodes
    if notes:
        collection = dict(merged.get("collection") or {})
        collection["notes"] = [*(collection.get("notes") or []), *notes]
        merged["collection"] = collection
    return merged


def _unusable(row: NodeTopology) -> str | None:
    """Why a stored topology cannot join a snapshot (its first problem), or None."""
    try:
        topology = row.snapshot_topology()
    except (TypeError, ValueError) as exc:  # a stored value that is no list of lists
        return f"{type(exc).__name__}: {str(exc)[:100]}"
    errors = topology_errors(topology, row.gpus)
    return errors[0][:200] if errors else None
