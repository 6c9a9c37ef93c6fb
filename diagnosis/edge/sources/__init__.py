"""Collectors: integrations that produce a cluster's snapshot for one cycle (the edge).

A collector is keyed by the cluster's ``metrics_kind`` (the built-in simulator serves as both
metrics source and scheduler, ``sim``). ``collector(cluster, previous_as_of=...)`` returns a
``gpuobs.snapshot/v1`` document or raises :class:`CollectError`; ``previous_as_of`` is the time
of the cluster's last good snapshot (None for the first). Collectors are imported lazily, so a
missing optional dependency of one integration never breaks the others.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from diagnosis.edge.errors import CollectError


class ClusterLike(Protocol):
    name: str
    scheduler_kind: str
    scheduler_config: Mapping[str, Any]
    metrics_kind: str
    metrics_config: Mapping[str, Any]


Collector = Callable[..., dict[str, Any]]

COLLECTORS: dict[str, str] = {
    "sim": "diagnosis.edge.sim.source:collect",
    "none": "diagnosis.edge.sources.scheduler_only:collect",
    "prometheus": "diagnosis.edge.sources.prometheus:collect",
}


def collector_for(cluster: ClusterLike) -> Collector:
    """The collector of a cluster's metrics source."""
    target = COLLECTORS.get(cluster.metrics_kind)
    if target is None:
        raise CollectError(
            f"no collector for metrics source {cluster.metrics_kind!r} yet", permanent=True
        )
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
