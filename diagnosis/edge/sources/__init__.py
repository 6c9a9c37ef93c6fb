"""Metric sources: integrations that produce a cluster's snapshot for one cycle (the edge).

A source is keyed by the cluster's ``metrics_kind`` and declared in
:mod:`diagnosis.edge.sources.registry`. Its collector, ``collect(cluster, previous_as_of=...)``,
returns a ``gpuobs.snapshot/v1`` document or raises
:class:`~diagnosis.edge.errors.CollectError`; ``previous_as_of`` is the time of the cluster's
last good snapshot (None for the first). A source that can shard also takes
``shard_runner=``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol


class ClusterLike(Protocol):
    name: str
    scheduler_kind: str
    scheduler_config: Mapping[str, Any]
    metrics_kind: str
    metrics_config: Mapping[str, Any]


Collector = Callable[..., dict[str, Any]]
