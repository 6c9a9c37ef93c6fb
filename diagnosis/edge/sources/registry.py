"""The metric sources gpuobs knows, declared in one place (healthchecks' ``TRANSPORTS``).

Each entry is a :class:`SourceSpec`: a stable id (a cluster's ``metrics_kind``; the model's
choices come from here, in this order), a label, where its collector and its declared settings
are, as ``"module:attribute"``, imported on first use (so one source's missing dependency never
breaks the others), and whether its collector can fan out into shards. Adding a source is one
entry here and its own module (docs/adding-a-source.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diagnosis.core import plugins
from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.errors import CollectError
from diagnosis.edge.sources import ClusterLike, Collector


class DuplicateSourceError(plugins.DuplicatePluginError):
    """Two metric sources claim the same id: a start-up error."""


@dataclass(frozen=True)
class SourceSpec:
    """A metric source as the registry declares it.

    ``collect``: ``"module:function"``, the collector. ``config``: ``"module:NAME"`` of the
    :class:`ConfigSpec` the source's module declares for ``metrics_config``. ``shards``: the
    collector takes a ``shard_runner`` (big clusters fan out by node pool, DESIGN.md section 3).
    """

    id: str
    label: str
    collect: str
    config: str
    shards: bool = False

    def _load(self, target: str) -> Any:
        try:
            return plugins.load(target)
        except ImportError as exc:
            raise CollectError(
                f"metrics source {self.id!r} is not available: {exc}", permanent=True
            ) from exc

    def collector(self) -> Collector:
        return self._load(self.collect)

    def config_spec(self) -> ConfigSpec:
        return self._load(self.config)


SOURCES: plugins.Registry[SourceSpec] = plugins.Registry(
    [
        SourceSpec(
            "sim",
            "Built-in simulator",
            collect="diagnosis.edge.sim.source:collect",
            config="diagnosis.edge.sim.source:CONFIG",
        ),
        SourceSpec(
            "prometheus",
            "Prometheus",
            collect="diagnosis.edge.sources.prometheus:collect",
            config="diagnosis.edge.sources.prometheus.config:CONFIG",
            shards=True,
        ),
        SourceSpec(
            "slurm_tres",
            "Slurm GPU TRES (sstat gres/gpuutil)",
            collect="diagnosis.edge.sources.slurm_tres:collect",
            config="diagnosis.edge.sources.slurm_tres:CONFIG",
        ),
        SourceSpec(
            "none",
            "None (scheduler only)",
            collect="diagnosis.edge.sources.scheduler_only:collect",
            config="diagnosis.edge.sources.scheduler_only:CONFIG",
        ),
    ],
    what="metrics source",
    error=DuplicateSourceError,
)


def source_spec(kind: str) -> SourceSpec:
    """The declared source of a ``metrics_kind``, or a permanent :class:`CollectError`."""
    spec = SOURCES.get(kind)
    if spec is None:
        raise CollectError(f"no collector for metrics source {kind!r} yet", permanent=True)
    return spec


def collector_for(cluster: ClusterLike) -> Collector:
    """The collector of a cluster's metrics source."""
    return source_spec(cluster.metrics_kind).collector()
