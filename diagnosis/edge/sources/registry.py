"""The metric sources gpuobs knows, declared in one place (healthchecks' ``TRANSPORTS``).

Each entry is a :class:`SourceSpec`: a stable id (a cluster's ``metrics_kind``; the model's
choices come from here, in this order), a label, where its ``measure`` function, its declared
settings and (for a source that fans out) its ``shard`` function are, as ``"module:attribute"``,
imported on first use (so one source's missing dependency never breaks the others), and what it
needs of the scheduler. :func:`run_shard` runs any source's shard payload. Adding a source is
one entry here and its own module (docs/adding-a-source.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from diagnosis.core import plugins
from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.errors import CollectError, IntegrationError
from diagnosis.edge.sources import Measure, Shard


class DuplicateSourceError(plugins.DuplicatePluginError):
    """Two metric sources claim the same id: a start-up error."""


@dataclass(frozen=True)
class SourceSpec:
    """A metric source as the registry declares it.

    ``measure``: ``"module:function"``, its :data:`~diagnosis.edge.sources.Measure`.
    ``config``: ``"module:NAME"`` of the :class:`ConfigSpec` the source's module declares for
    ``metrics_config``. ``shard``: ``"module:function"`` of its
    :data:`~diagnosis.edge.sources.Shard` when it fans out (big clusters by node pool,
    docs/architecture.md#one-cycle): each payload it makes carries ``"source": id``.
    ``schedulers``: the scheduler kinds it can measure with (None: any). ``wall_clock``: its
    metrics are of the real world's time, so a scheduler with a clock of its own must follow
    the wall time.
    """

    id: str
    label: str
    measure: str
    config: str
    shard: str | None = None
    schedulers: tuple[str, ...] | None = None
    wall_clock: bool = False

    def _load(self, target: str) -> Any:
        try:
            return plugins.load(target)
        except ImportError as exc:
            raise CollectError(
                f"metrics source {self.id!r} is not available: {exc}", permanent=True
            ) from exc

    @property
    def shards(self) -> bool:
        return self.shard is not None

    def measurer(self) -> Measure:
        return self._load(self.measure)

    def sharder(self) -> Shard:
        if self.shard is None:
            raise CollectError(f"metrics source {self.id!r} does not shard", permanent=True)
        return self._load(self.shard)

    def config_spec(self) -> ConfigSpec:
        return self._load(self.config)


SOURCES: plugins.Registry[SourceSpec] = plugins.Registry(
    [
        SourceSpec(
            "sim",
            "Built-in simulator",
            measure="diagnosis.edge.sim.source:measure",
            config="diagnosis.edge.sim.source:CONFIG",
            schedulers=("sim",),
        ),
        SourceSpec(
            "prometheus",
            "Prometheus",
            measure="diagnosis.edge.sources.prometheus:measure",
            config="diagnosis.edge.sources.prometheus.config:CONFIG",
            shard="diagnosis.edge.sources.prometheus:collect_shard",
            wall_clock=True,
        ),
        SourceSpec(
            "slurm_tres",
            "Slurm GPU TRES (sstat gres/gpuutil)",
            measure="diagnosis.edge.sources.slurm_tres:measure",
            config="diagnosis.edge.sources.slurm_tres:CONFIG",
            schedulers=("slurm",),
        ),
        SourceSpec(
            "none",
            "None (scheduler only)",
            measure="diagnosis.edge.sources.scheduler_only:measure",
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


def run_shard(payload: Mapping[str, Any]) -> dict[str, Any]:
    """One shard payload collected by the source it names (its ``source``), as that source's
    JSON-ready result, or ``{"error", "permanent"}``: an unknown source, one that does not
    shard or cannot load, a malformed payload or a failed read come back as values."""
    kind = payload.get("source") if isinstance(payload, Mapping) else None
    try:
        shard = source_spec(str(kind)).sharder()
        return shard(payload)
    except IntegrationError as exc:
        return {"error": str(exc), "permanent": exc.permanent}
    except (KeyError, TypeError, ValueError) as exc:
        return {"error": f"malformed {kind} shard payload: {exc!r}", "permanent": True}
