"""The collector of clusters without a metrics source (``metrics_kind`` ``none``): a snapshot
from the scheduler adapter alone.

Nodes, queues, jobs (with their GPU allocations) and the events since the cluster's cursor come
from the adapter (``scheduler_kind``: ``slurm``, ``volcano``, ``kueue``, ``sim``); every node's
GPUs are present in the snapshot, with no metrics, so allocation, fragmentation, gang and
starvation rules judge while the metric rules say they cannot. The snapshot is as of now, or of
the scheduler's own clock when it keeps one (the simulator). The ``collection`` section carries
the new event cursor (``run_cluster_cycle`` stores the events and the cursor) and what the
adapter ran.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from diagnosis.core.vocabulary import SNAPSHOT_FORMAT, format_time
from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.errors import CollectError, SchedulerError
from diagnosis.edge.schedulers.registry import adapter_for
from diagnosis.edge.sources import ClusterLike

CONFIG = ConfigSpec((), what="metrics_config")  # no settings: the scheduler's are all it reads


def collect(
    cluster: ClusterLike,
    *,
    previous_as_of: datetime | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """One snapshot document of the cluster's scheduler, as of now."""

    cursor = getattr(cluster, "event_cursor", "") or None
    at = (now or datetime.now(UTC)).replace(microsecond=0)
    try:
        adapter = adapter_for(
            cluster.scheduler_kind, cluster.scheduler_config or {}, cluster=cluster.name
        )
        state = adapter.read_state()
        batch = adapter.read_events(cursor)
    except SchedulerError as exc:
        raise CollectError(f"scheduler: {exc}", permanent=exc.permanent) from exc
    log = getattr(adapter, "log", None)
    return {
        "format": SNAPSHOT_FORMAT,
        "cluster": cluster.name,
        "as_of": state.as_of or format_time(at),
        "scheduler": dict(state.scheduler),
        "nodes": list(state.nodes),
        "gpus": list(state.gpus),
        "queues": list(state.queues),
        "jobs": list(state.jobs),
        "events": list(batch.events),
        "collection": {
            "source": "none",
            "scheduler": cluster.scheduler_kind,
            "event_cursor": batch.cursor,
            "events": len(batch.events),
            "commands": list(getattr(log, "commands", []) or []),
        },
    }
