"""One cycle's collection of a cluster (docs/architecture.md#one-cycle): its scheduler adapter's
state and events, its metrics source's measurement of the nodes, GPUs and jobs that state lists,
joined into one ``gpuobs.snapshot/v1`` document (:func:`diagnosis.edge.assemble.snapshot_document`).

Every scheduler (the simulator too) is read through its adapter; every source is given what to
measure (:class:`~diagnosis.edge.sources.MetricsRequest`) and never reads the scheduler. What the
adapter declares of its scheduler (its :class:`~diagnosis.edge.schedulers.base.Capabilities`) is
written into the snapshot's ``scheduler`` block here, for every adapter alike
(:func:`scheduler_block`): ``gang_advice``, the admission setting that stops partial gangs
(docs/snapshot.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from diagnosis.core.vocabulary import format_time, parse_time
from diagnosis.edge.assemble import snapshot_document
from diagnosis.edge.errors import CollectError, SchedulerError
from diagnosis.edge.schedulers.base import Capabilities, JobUsage, OwnClock
from diagnosis.edge.schedulers.registry import adapter_for, capabilities_of
from diagnosis.edge.sources import ClusterLike, MetricsRequest, ShardRunner
from diagnosis.edge.sources.registry import source_spec


def collect_snapshot(
    cluster: ClusterLike,
    *,
    previous_as_of: datetime | None = None,
    now: datetime | None = None,
    shard_runner: ShardRunner | None = None,
) -> dict[str, Any]:
    """The cluster's snapshot document, as of now or of the scheduler's own clock when it keeps
    one (the simulator). ``previous_as_of``: the time of the cluster's last good snapshot (None
    for the first). ``shard_runner`` runs the shards of a source that fans out (a Celery group in
    production; None: here). A scheduler or source failure is a :class:`CollectError`."""
    spec = source_spec(cluster.metrics_kind)
    if spec.schedulers is not None and cluster.scheduler_kind not in spec.schedulers:
        raise CollectError(
            f"metrics source {spec.id} needs scheduler_kind {' or '.join(spec.schedulers)}, "
            f"not {cluster.scheduler_kind!r}",
            permanent=True,
        )
    measure = spec.measurer()
    cursor = getattr(cluster, "event_cursor", "") or None
    at = (now or datetime.now(UTC)).replace(microsecond=0)
    try:
        adapter = adapter_for(
            cluster.scheduler_kind, cluster.scheduler_config or {}, cluster=cluster.name
        )
        if isinstance(adapter, OwnClock):
            problem = adapter.wall_time_problem() if spec.wall_clock else None
            if problem:
                raise CollectError(problem, permanent=True)
            adapter.follow(now=now, previous_as_of=previous_as_of)
        state = adapter.read_state()
        batch = adapter.read_events(cursor)
        as_of = state.as_of or format_time(at)
        moment = parse_time(as_of)
        if moment is None:
            raise CollectError(
                f"the scheduler's state has no RFC 3339 as_of: {as_of!r}", permanent=True
            )
        measurement = measure(
            MetricsRequest(
                cluster=cluster.name,
                scheduler_kind=cluster.scheduler_kind,
                config=cluster.metrics_config,
                as_of=moment,
                nodes=state.nodes,
                gpus=state.gpus,
                jobs=state.jobs,
                measured=state.measured,
                read_job_usage=adapter.read_job_usage if isinstance(adapter, JobUsage) else None,
                shard_runner=shard_runner,
            )
        )
    except SchedulerError as exc:
        raise CollectError(f"scheduler: {exc}", permanent=exc.permanent) from exc
    log = getattr(adapter, "log", None)
    return snapshot_document(
        cluster.name,
        as_of=as_of,
        scheduler=scheduler_block(state.scheduler, adapter.capabilities),
        nodes=state.nodes,
        queues=state.queues,
        jobs=state.jobs,
        events=batch.events,
        measurement=measurement,
        reads={
            "scheduler": cluster.scheduler_kind,
            "event_cursor": batch.cursor,
            "events": len(batch.events),
            "commands": list(getattr(log, "commands", []) or []),
            **({"refused": list(state.refused)} if state.refused else {}),
        },
    )


def with_declared_traits(document: Any) -> Any:
    """A snapshot document read from a file (written by hand, by another tool or by an older
    gpuobs) with what its scheduler kind's adapter declares filled into its ``scheduler`` block,
    as a collection writes it (:func:`scheduler_block`). Anything that is not such a document
    is returned as it is, for the loader to name what is wrong with it."""
    if not isinstance(document, Mapping):
        return document
    scheduler = document.get("scheduler")
    if not isinstance(scheduler, Mapping) or not isinstance(scheduler.get("kind"), str):
        return document
    block = scheduler_block(scheduler, capabilities_of(scheduler["kind"]))
    return {**document, "scheduler": block}


def scheduler_block(scheduler: Mapping[str, Any], capabilities: Capabilities) -> dict[str, Any]:
    """The snapshot's ``scheduler`` block: the adapter's, with the ``gang_advice`` the adapter
    declares (unless the block carries its own; none where it declares none)."""
    block = dict(scheduler)
    advice = capabilities.gang_advice
    if advice is not None and "gang_advice" not in block:
        block["gang_advice"] = advice.as_snapshot()
    return block
