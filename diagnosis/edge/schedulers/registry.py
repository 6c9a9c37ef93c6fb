"""The scheduler adapters gpuobs knows, declared in one place (healthchecks' ``TRANSPORTS``).

Each entry is an :class:`AdapterSpec`: a stable id (a cluster's ``scheduler_kind``; the model's
choices come from here, in this order), a label, and where its code and its declared settings
are, as ``"module:attribute"``, imported on first use, so one integration's missing dependency
(the ``kubernetes`` client) never breaks the others. Adding an adapter is one entry here and
its own package (docs/adding-a-scheduler.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from diagnosis.core import plugins
from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.errors import SchedulerError
from diagnosis.edge.schedulers.base import Capabilities, SchedulerAdapter


class DuplicateAdapterError(plugins.DuplicatePluginError):
    """Two scheduler adapters claim the same id: a start-up error."""


@dataclass(frozen=True)
class AdapterSpec:
    """A scheduler adapter as the registry declares it.

    ``adapter``: ``"module:Class"`` of a :class:`SchedulerAdapter`, built as
    ``Class(scheduler_config, cluster=name)``. ``config``: ``"module:NAME"`` of the
    :class:`ConfigSpec` the adapter's module declares for ``scheduler_config``.
    ``change_log``: the adapter keeps the changes it accepts in the cluster's
    ``scheduler_config["changes"]`` (its ``ChangeResult.record``, persisted by the caller).
    ``mirrored``: the adapter keeps a list/watch mirror of the cluster in its process, so the
    cluster's cycles go to the one process that holds it (a mirror queue, docs/operations.md).
    """

    id: str
    label: str
    adapter: str
    config: str
    change_log: bool = False
    mirrored: bool = False

    def _load(self, target: str) -> Any:
        try:
            return plugins.load(target)
        except ImportError as exc:
            raise SchedulerError(
                f"scheduler adapter {self.id!r} is not available: {exc}", permanent=True
            ) from exc

    def adapter_class(self) -> type[SchedulerAdapter]:
        return self._load(self.adapter)

    def config_spec(self) -> ConfigSpec:
        return self._load(self.config)

    def build(self, config: Mapping[str, Any] | None, *, cluster: str = "") -> SchedulerAdapter:
        return self.adapter_class()(config or {}, cluster=cluster)  # type: ignore[call-arg]


ADAPTERS: plugins.Registry[AdapterSpec] = plugins.Registry(
    [
        AdapterSpec(
            "sim",
            "Built-in simulator",
            adapter="diagnosis.edge.sim.scheduler:SimScheduler",
            config="diagnosis.edge.sim.runtime:CONFIG",
            change_log=True,
        ),
        AdapterSpec(
            "slurm",
            "Slurm",
            adapter="diagnosis.edge.schedulers.slurm.adapter:SlurmAdapter",
            config="diagnosis.edge.schedulers.slurm.adapter:CONFIG",
        ),
        AdapterSpec(
            "volcano",
            "Volcano",
            adapter="diagnosis.edge.schedulers.kubernetes.volcano:VolcanoAdapter",
            config="diagnosis.edge.schedulers.kubernetes.volcano:CONFIG",
            mirrored=True,
        ),
        AdapterSpec(
            "kueue",
            "Kueue",
            adapter="diagnosis.edge.schedulers.kubernetes.kueue:KueueAdapter",
            config="diagnosis.edge.schedulers.kubernetes.kueue:CONFIG",
            mirrored=True,
        ),
        AdapterSpec(
            "yarn",
            "YARN",
            adapter="diagnosis.edge.schedulers.yarn.adapter:YarnAdapter",
            config="diagnosis.edge.schedulers.yarn.adapter:CONFIG",
        ),
        AdapterSpec(
            "kai",
            "NVIDIA KAI scheduler",
            adapter="diagnosis.edge.schedulers.kubernetes.kai:KaiAdapter",
            config="diagnosis.edge.schedulers.kubernetes.kai:CONFIG",
            mirrored=True,
        ),
    ],
    what="scheduler adapter",
    error=DuplicateAdapterError,
)


def adapter_spec(kind: str) -> AdapterSpec:
    """The declared adapter of a ``scheduler_kind``, or a permanent :class:`SchedulerError`."""
    spec = ADAPTERS.get(kind)
    if spec is None:
        known = ", ".join(sorted(ADAPTERS))
        raise SchedulerError(f"no scheduler adapter {kind!r} (known: {known})", permanent=True)
    return spec


def adapter_for(
    kind: str, config: Mapping[str, Any] | None, *, cluster: str = ""
) -> SchedulerAdapter:
    """A configured adapter for a cluster's ``scheduler_kind`` and ``scheduler_config``."""
    return adapter_spec(kind).build(config, cluster=cluster)


def is_mirrored(kind: str) -> bool:
    """Whether a ``scheduler_kind``'s adapter keeps a list/watch mirror (False when unknown)."""
    spec = ADAPTERS.get(kind)
    return spec is not None and spec.mirrored


def capabilities_of(kind: str) -> Capabilities:
    """What a ``scheduler_kind``'s adapter declares it can do and what its snapshots carry;
    none of it for a kind that is unknown or whose adapter cannot load."""
    try:
        return adapter_spec(kind).adapter_class().capabilities
    except SchedulerError:
        return Capabilities()
