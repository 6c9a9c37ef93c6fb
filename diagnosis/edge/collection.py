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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from diagnosis.core.vocabulary import format_time, parse_time
from diagnosis.edge.assemble import snapshot_document
from diagnosis.edge.errors import CollectError, SchedulerError
from diagnosis.edge.schedulers.base import Capabilities, JobUsage, OwnClock
from diagnosis.edge.schedulers.registry import adapter_for, capabilities_of
from diagnosis.edge.sources import ClusterLike, MetricsRequest, ShardRunner, ShardsDeferred
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
    reading = read_scheduler(cluster, previous_as_of=previous_as_of, now=now)
    return measure_reading(reading, shard_runner=shard_runner)


@dataclass(frozen=True)
class PendingCollection:
    """A collection stopped where its source fans out: the shard ``payloads`` to run anywhere
    and, JSON-ready, what :func:`resume_collection` needs to finish it with their results."""

    payloads: list[dict[str, Any]]
    reading: dict[str, Any]


def start_collection(
    cluster: ClusterLike, *, previous_as_of: datetime | None = None
) -> dict[str, Any] | PendingCollection:
    """:func:`collect_snapshot` without waiting for shards: the whole document when the source
    does not fan out, else the :class:`PendingCollection` its shards' results finish."""
    reading = read_scheduler(cluster, previous_as_of=previous_as_of)
    try:
        return measure_reading(reading, shard_runner=defer_shards)
    except ShardsDeferred as deferred:
        return PendingCollection(deferred.payloads, reading.as_dict())


def resume_collection(reading: Mapping[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """The document of a :class:`PendingCollection` (its ``reading``), finished with its shards'
    ``results`` in the order of its payloads (a failed shard's ``{"error"}`` fails it, as in
    :func:`collect_snapshot`)."""

    def shard_results(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(payloads) != len(results):
            raise CollectError(
                f"{len(results)} shard results for a collection of {len(payloads)} shards",
                permanent=False,
            )
        return results

    return measure_reading(SchedulerReading.from_dict(reading), shard_runner=shard_results)


def defer_shards(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shard runner of :func:`start_collection`: stops the collection with the payloads."""
    raise ShardsDeferred(payloads)


@dataclass(frozen=True)
class SchedulerReading:
    """What a collection read of the scheduler, for its metrics source to measure; JSON-ready
    (:meth:`as_dict`) but for ``read_job_usage`` (the adapter's, of a source that never fans
    out)."""

    cluster: str
    scheduler_kind: str
    metrics_kind: str
    metrics_config: Any
    as_of: str
    scheduler: dict[str, Any]
    nodes: list[Any]
    gpus: list[Any]
    jobs: list[Any]
    queues: list[Any]
    events: list[Any]
    measured: dict[str, Any]
    reads: dict[str, Any]
    read_job_usage: Callable[[Sequence[str]], dict[str, dict[str, float]]] | None = None
    command_log: Any = None  # the adapter's log of commands, read again once measured

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _LIVE}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SchedulerReading:
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name not in _LIVE})


_LIVE = frozenset({"read_job_usage", "command_log"})  # the adapter's own: never carried


def read_scheduler(
    cluster: ClusterLike, *, previous_as_of: datetime | None = None, now: datetime | None = None
) -> SchedulerReading:
    """The scheduler's state and events for one collection (the adapter followed to the wall
    time first when it keeps its own clock and the source measures the real world)."""
    spec = source_spec(cluster.metrics_kind)
    if spec.schedulers is not None and cluster.scheduler_kind not in spec.schedulers:
        raise CollectError(
            f"metrics source {spec.id} needs scheduler_kind {' or '.join(spec.schedulers)}, "
            f"not {cluster.scheduler_kind!r}",
            permanent=True,
        )
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
    except SchedulerError as exc:
        raise CollectError(f"scheduler: {exc}", permanent=exc.permanent) from exc
    as_of = state.as_of or format_time(at)
    if parse_time(as_of) is None:
        raise CollectError(
            f"the scheduler's state has no RFC 3339 as_of: {as_of!r}", permanent=True
        )
    log = getattr(adapter, "log", None)
    return SchedulerReading(
        cluster=cluster.name,
        scheduler_kind=cluster.scheduler_kind,
        metrics_kind=cluster.metrics_kind,
        metrics_config=cluster.metrics_config,
        as_of=as_of,
        scheduler=scheduler_block(state.scheduler, adapter.capabilities),
        nodes=list(state.nodes),
        gpus=list(state.gpus),
        jobs=list(state.jobs),
        queues=list(state.queues),
        events=list(batch.events),
        measured=dict(state.measured or {}),
        reads={
            "scheduler": cluster.scheduler_kind,
            "event_cursor": batch.cursor,
            "events": len(batch.events),
            "commands": list(getattr(log, "commands", []) or []),
            **({"refused": list(state.refused)} if state.refused else {}),
        },
        read_job_usage=adapter.read_job_usage if isinstance(adapter, JobUsage) else None,
        command_log=log,
    )


def measure_reading(
    reading: SchedulerReading, *, shard_runner: ShardRunner | None = None
) -> dict[str, Any]:
    """The snapshot document of a scheduler reading, measured by the cluster's metrics source."""
    measure = source_spec(reading.metrics_kind).measurer()
    try:
        measurement = measure(
            MetricsRequest(
                cluster=reading.cluster,
                scheduler_kind=reading.scheduler_kind,
                config=reading.metrics_config,
                as_of=parse_time(reading.as_of),
                nodes=reading.nodes,
                gpus=reading.gpus,
                jobs=reading.jobs,
                measured=reading.measured,
                read_job_usage=reading.read_job_usage,
                shard_runner=shard_runner,
            )
        )
    except SchedulerError as exc:  # the adapter's job usage read (Slurm's sstat)
        raise CollectError(f"scheduler: {exc}", permanent=exc.permanent) from exc
    return snapshot_document(
        reading.cluster,
        as_of=reading.as_of,
        scheduler=reading.scheduler,
        nodes=reading.nodes,
        queues=reading.queues,
        jobs=reading.jobs,
        events=reading.events,
        measurement=measurement,
        reads={**reading.reads, **_commands(reading.command_log)},
    )


def _commands(log: Any) -> dict[str, list[Any]]:
    """The commands an adapter ran, its sstat reads while measured too (none: nothing)."""
    return {"commands": list(log.commands or [])} if getattr(log, "commands", None) else {}


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
