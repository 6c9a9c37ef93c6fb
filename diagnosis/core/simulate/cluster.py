"""What the simulated cluster is made of: pools of nodes, their GPUs and topology, and queues.

Specs are frozen descriptions; the :class:`~diagnosis.core.simulate.simulator.Simulator` turns them
into mutable state. Nodes keep the order of their pools, so each pool is one contiguous run of
node numbers inside the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

DEFAULT_START = datetime(2026, 11, 29, 0, 0, 0, tzinfo=UTC)

# Power envelope per GPU model (idle watts, board power in watts), matched on the model name
# (longest key first); the default is an A100-class board.
GPU_POWER_W: dict[str, tuple[float, float]] = {
    "A100": (55.0, 400.0),
    "A800": (55.0, 400.0),
    "H100 PCIE": (60.0, 350.0),
    "H100": (70.0, 700.0),
    "H200": (75.0, 700.0),
    "H800": (70.0, 700.0),
    "H20": (60.0, 400.0),
    "L40S": (35.0, 350.0),
    "L4": (16.0, 72.0),
    "V100": (40.0, 300.0),
    "T4": (10.0, 70.0),
}
DEFAULT_GPU_POWER_W = (55.0, 400.0)


def gpu_power_envelope(model: str) -> tuple[float, float]:
    """(idle W, board power W) for a GPU model name such as ``A100-SXM4-80GB``."""
    name = model.upper()
    for key in sorted(GPU_POWER_W, key=len, reverse=True):
        if key in name:
            return GPU_POWER_W[key]
    return DEFAULT_GPU_POWER_W


@dataclass(frozen=True)
class NodeSpec:
    """One node. ``nvlink_domains`` lists groups of GPU indexes joined by NVLink (None: PCIe
    only, each GPU its own domain); ``numa`` gives the NUMA node of each GPU (None: unknown)."""

    name: str
    gpus: int = 8
    gpu_model: str = "A100-SXM4-80GB"
    nvlink_domains: tuple[tuple[int, ...], ...] | None = None
    numa: tuple[int, ...] | None = None
    cpu_cores: int = 128
    memory_gib: int = 1024

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ValueError(f"node {self.name}: gpus must be >= 0")
        if self.nvlink_domains is not None:
            listed = [g for domain in self.nvlink_domains for g in domain]
            if len(set(listed)) != len(listed) or any(not 0 <= g < self.gpus for g in listed):
                raise ValueError(f"node {self.name}: NVLink domains must name distinct GPUs")
        if self.numa is not None and len(self.numa) != self.gpus:
            raise ValueError(f"node {self.name}: numa must give one NUMA node per GPU")

    def domain_of_gpu(self) -> tuple[int, ...]:
        """NVLink domain number of each GPU; a GPU outside every domain gets a domain alone
        (numbered after the listed ones), so that "one domain" always means "joined by NVLink"."""
        domains = [-1] * self.gpus
        for d, group in enumerate(self.nvlink_domains or ()):
            for g in group:
                domains[g] = d
        next_domain = len(self.nvlink_domains or ())
        for g in range(self.gpus):
            if domains[g] < 0:
                domains[g] = next_domain
                next_domain += 1
        return tuple(domains)

    def numa_of_gpu(self) -> tuple[int, ...]:
        return self.numa if self.numa is not None else (0,) * self.gpus


# The DGX/HGX A100-SXM4-80GB layout (../shared/data/topology): all 8 GPUs on NVSwitch, NUMA
# split 0-3 / 4-7.
A100_SXM4_TOPOLOGY = {
    "nvlink_domains": (tuple(range(8)),),
    "numa": (0, 0, 0, 0, 1, 1, 1, 1),
}


@dataclass(frozen=True)
class PoolSpec:
    name: str
    nodes: tuple[NodeSpec, ...]

    @classmethod
    def uniform(
        cls,
        name: str,
        count: int,
        *,
        gpus: int = 8,
        gpu_model: str = "A100-SXM4-80GB",
        nvlink_domains: tuple[tuple[int, ...], ...] | None = None,
        numa: tuple[int, ...] | None = None,
        cpu_cores: int = 128,
        memory_gib: int = 1024,
        node_prefix: str | None = None,
        first_number: int = 0,
    ) -> PoolSpec:
        """``count`` identical nodes named ``<prefix>-000``, ``<prefix>-001``... (prefix: the
        pool name)."""
        prefix = node_prefix or name
        width = max(3, len(str(first_number + count - 1)))
        return cls(
            name,
            tuple(
                NodeSpec(
                    f"{prefix}-{first_number + i:0{width}d}",
                    gpus=gpus,
                    gpu_model=gpu_model,
                    nvlink_domains=nvlink_domains,
                    numa=numa,
                    cpu_cores=cpu_cores,
                    memory_gib=memory_gib,
                )
                for i in range(count)
            ),
        )

    @property
    def gpus(self) -> int:
        return sum(node.gpus for node in self.nodes)


@dataclass(frozen=True)
class QueueSpec:
    """A scheduler queue owned by a tenant. ``weight`` drives fair share; ``deserved_gpus`` is its
    entitlement and ``capability_gpus`` a hard cap on the GPUs its jobs may hold."""

    name: str
    tenant: str | None = None
    weight: float = 1.0
    deserved_gpus: float | None = None
    capability_gpus: float | None = None

    @property
    def owner(self) -> str:
        return self.tenant or self.name


@dataclass(frozen=True)
class ClusterSpec:
    pools: tuple[PoolSpec, ...]
    queues: tuple[QueueSpec, ...] = ()
    name: str = "sim"
    start: datetime = DEFAULT_START

    def __post_init__(self) -> None:
        if not self.pools:
            raise ValueError("a cluster needs at least one pool")
        names = [node.name for node in self.nodes()]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique across pools")
        pool_names = [pool.name for pool in self.pools]
        if len(set(pool_names)) != len(pool_names):
            raise ValueError("pool names must be unique")
        if self.start.tzinfo is None:
            raise ValueError("start must carry a time zone")

    def nodes(self) -> Iterable[NodeSpec]:
        for pool in self.pools:
            yield from pool.nodes

    @property
    def gpus(self) -> int:
        return sum(pool.gpus for pool in self.pools)
