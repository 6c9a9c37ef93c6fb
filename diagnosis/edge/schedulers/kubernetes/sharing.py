"""GPUs a device-plugin node shares by time-slicing or MPS (docs/integrations.md, "GPUs: DRA first,
the device plugin as fallback"): how many physical GPUs the node has and how many replicas each
is advertised as, from GPU Feature Discovery's labels, and which GPU each pod's replicas are on.
Pure functions over the API's plain dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from diagnosis.edge.schedulers.kubernetes.client import labels

# GPU Feature Discovery's labels of a device-plugin node that shares its GPUs by time-slicing or
# MPS (NVIDIA k8s-device-plugin: README, "Shared Access to GPUs" and "Catalog of Labels"; the
# labeller in internal/lm): the physical GPUs, how many replicas each is advertised as (the
# node's allocatable ``nvidia.com/gpu`` is their product), the strategy (``none``,
# ``time-slicing`` or ``mps``); the product label then ends in ``-SHARED``.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
SHARED_PRODUCT_SUFFIX = "-SHARED"


def _label_count(node: Mapping[str, Any], name: str) -> int | None:
    text = str(labels(node).get(name) or "")
    return int(text) if text.isdigit() else None


def node_sharing(node: Mapping[str, Any], advertised: int) -> dict[str, Any] | None:
    """How a device-plugin node shares its GPUs, from its GPU Feature Discovery labels:
    ``{"strategy", "replicas", "gpus"}`` (``gpus``: the physical GPUs, ``nvidia.com/gpu.count``,
    else the advertised replicas over ``nvidia.com/gpu.replicas``); None for a node whose GPUs
    are not shared (``replicas`` absent or 1)."""
    replicas = _label_count(node, GPU_REPLICAS_LABEL)
    if replicas is None or replicas <= 1:
        return None
    gpus = _label_count(node, GPU_COUNT_LABEL) or -(-advertised // replicas)
    if gpus <= 0:
        return None
    strategy = str(labels(node).get(SHARING_STRATEGY_LABEL) or "time-slicing")
    return {"strategy": strategy, "replicas": replicas, "gpus": gpus}


def replica_placement(
    pods: Iterable[tuple[str, str, int]],
    node_gpus: Mapping[str, int],
    replicas: Mapping[str, int],
) -> dict[str, tuple[list[int], float]]:
    """Pod uid -> (GPU indexes, share) for pods ``(uid, node, replicas asked)`` holding replicas
    of shared GPUs, given in order of binding: each replica goes to the GPU of the node with the
    fewest replicas taken (the lowest index first), as the device plugin's default
    ``distributed`` allocation of replicated devices does (internal/rm/allocate.go). A pod asking
    k replicas holds min(k, GPUs) GPUs, each a share of k / (replicas x those GPUs); a guess:
    Kubernetes does not say which replicas a pod got. A pod asking more replicas than the node
    has left gets none."""
    used: dict[str, list[int]] = {}
    placed: dict[str, tuple[list[int], float]] = {}
    for uid, node, asked in pods:
        count, per_gpu = node_gpus[node], replicas[node]
        slots = used.setdefault(node, [0] * count)
        if sum(slots) + asked > count * per_gpu:
            continue
        held: set[int] = set()
        for _ in range(asked):
            index = min(
                (i for i in range(count) if slots[i] < per_gpu), key=lambda i: (slots[i], i)
            )
            slots[index] += 1
            held.add(index)
        placed[uid] = (sorted(held), round(min(1.0, asked / (per_gpu * len(held))), 6))
    return placed
