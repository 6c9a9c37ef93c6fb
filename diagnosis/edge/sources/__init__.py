"""Metric sources: integrations that measure a cluster's GPUs for one cycle (the edge).

A source is keyed by the cluster's ``metrics_kind`` and declared in
:mod:`diagnosis.edge.sources.registry`. It never reads the scheduler: the edge's collection
(:func:`diagnosis.edge.collection.collect_snapshot`) reads the scheduler adapter, gives the
source the nodes, GPUs and jobs it is to measure as a :class:`MetricsRequest`, and joins the
source's :class:`Measurement` with the adapter's state into the ``gpuobs.snapshot/v1`` document
(:func:`diagnosis.edge.assemble.snapshot_document`). A source's ``measure(request)`` returns a
Measurement or raises :class:`~diagnosis.edge.errors.CollectError`. A source that fans out
declares its ``shard(payload) -> dict`` function and runs its payloads through
``request.shard_runner``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

ShardRunner = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
"""Runs a collection's shard payloads (each carrying its ``source`` id) and returns their
results in order: :func:`diagnosis.edge.sources.registry.run_shard` one after another here, a
Celery group a command waits for (``diagnosis.tasks.run_collect_shards``), or one that raises
:class:`ShardsDeferred` (a scheduled cycle's chord). A source calls it with no I/O of its own
before it (its payloads come from the request alone), so a collection can stop there and be
finished elsewhere (:func:`diagnosis.edge.collection.start_collection`)."""


class ShardsDeferred(Exception):
    """Raised by a :data:`ShardRunner` that sends the shards elsewhere instead of waiting for
    them (a Celery chord): the collection stops with their ``payloads``."""

    def __init__(self, payloads: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(payloads)} shards sent elsewhere")
        self.payloads = payloads


class ClusterLike(Protocol):
    name: str
    scheduler_kind: str
    scheduler_config: Mapping[str, Any]
    metrics_kind: str
    metrics_config: Mapping[str, Any]


@dataclass(frozen=True)
class MetricsRequest:
    """What a source is asked to measure: the cluster's ``metrics_config`` (``config``), the time
    to measure at, and the scheduler's ``nodes``, ``gpus`` (without metrics) and ``jobs``.

    ``measured``: what the scheduler itself measured (the simulator's GPU statistics).
    ``read_job_usage``: the scheduler's accounting of running jobs' GPU use, per job id, when its
    adapter offers one (Slurm's ``sstat``); None otherwise. ``shard_runner``: where to run the
    shard payloads of a source that fans out (None: here, one after another).
    """

    cluster: str
    scheduler_kind: str
    config: Any  # the cluster's metrics_config as stored (a source checks it)
    as_of: datetime
    nodes: Sequence[Mapping[str, Any]]
    gpus: Sequence[Mapping[str, Any]]
    jobs: Sequence[Mapping[str, Any]]
    measured: Mapping[str, Any] = field(default_factory=dict)
    read_job_usage: Callable[[Sequence[str]], dict[str, dict[str, float]]] | None = None
    shard_runner: ShardRunner | None = None


@dataclass(frozen=True)
class Measurement:
    """What a source measured. ``gpus``: the snapshot's ``gpus[]`` (the scheduler's entries joined
    with the metrics). ``node_values``: per node name, values set on its ``nodes[]`` entry
    (measured ``topology``, ``cpu_util``). ``window_s``: the metrics' window, when they have one.
    ``collection``: the source's report (``source``, coverage, ``judgeable``, ``problems``...)
    that opens the snapshot's ``collection`` section; None: the snapshot has no such section."""

    gpus: list[dict[str, Any]]
    node_values: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    window_s: int | None = None
    collection: dict[str, Any] | None = None


Measure = Callable[[MetricsRequest], Measurement]
Shard = Callable[[Mapping[str, Any]], dict[str, Any]]
