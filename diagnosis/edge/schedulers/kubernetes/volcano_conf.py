"""The volcano-scheduler configuration (its ConfigMap's ``volcano-scheduler.conf``): which GPU
placement the binpack plugin gives, how to change it, and which plugin shares the cluster among
queues (``capacity`` by deserved, ``proportion`` by weight). Pure functions over the parsed
YAML."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from diagnosis.edge.schedulers.kubernetes.client import quantity

BINPACK = "binpack"


def _binpack_plugin(conf: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for tier in conf.get("tiers") or ():
        for plugin in (tier or {}).get("plugins") or ():
            if (plugin or {}).get("name") == BINPACK:
                return plugin
    return None


def _resources(arguments: Mapping[str, Any]) -> list[str]:
    listed = str(arguments.get("binpack.resources") or "")
    return [r.strip() for r in listed.split(",") if r.strip()]


QUEUE_SHARE_PLUGINS = ("capacity", "proportion")


def queue_share_plugin(conf: Mapping[str, Any]) -> str | None:
    """Which plugin divides the cluster among queues: ``capacity`` (by ``deserved``, with
    hierarchical queues) or ``proportion`` (by ``weight``); None when neither is enabled."""
    enabled = {
        (plugin or {}).get("name")
        for tier in conf.get("tiers") or ()
        for plugin in (tier or {}).get("plugins") or ()
    }
    return next((name for name in QUEUE_SHARE_PLUGINS if name in enabled), None)


def placement_of(conf: Mapping[str, Any], gpu_resource: str) -> str:
    """``binpack`` when the binpack plugin scores GPUs (its weight and the GPU's weight > 0),
    else ``spread`` (nodeorder's least-requested spreads pods)."""
    plugin = _binpack_plugin(conf)
    if plugin is None:
        return "spread"
    arguments = plugin.get("arguments") or {}
    weight = quantity(arguments.get("binpack.weight", 1)) or 0
    gpu_weight = quantity(arguments.get(f"binpack.resources.{gpu_resource}", 1)) or 0
    if weight > 0 and gpu_resource in _resources(arguments) and gpu_weight > 0:
        return "binpack"
    return "spread"


def with_placement(
    conf: Mapping[str, Any], policy: str, gpu_resource: str, gpu_weight: int
) -> dict[str, Any]:
    """A copy of the scheduler configuration whose binpack plugin packs (or no longer packs) GPUs.

    ``binpack``: the plugin (added to the last tier if absent) gets ``binpack.resources``
    including the GPU resource and ``binpack.resources.<gpu>: gpu_weight``, and a positive
    ``binpack.weight``. ``spread``: the GPU resource leaves ``binpack.resources`` and its weight
    key goes; CPU and memory packing stay as they were.
    """
    new = json.loads(json.dumps(conf))  # a deep copy of plain YAML data
    plugin = _binpack_plugin(new)
    if plugin is None:
        if policy == "spread":
            return new
        tiers = new.setdefault("tiers", [])
        if not tiers:
            tiers.append({"plugins": []})
        plugin = {"name": BINPACK}
        tiers[-1].setdefault("plugins", []).append(plugin)
    arguments = dict(plugin.get("arguments") or {})
    resources = [r for r in _resources(arguments) if r != gpu_resource]
    weight_key = f"binpack.resources.{gpu_resource}"
    arguments.pop(weight_key, None)
    if policy == "binpack":
        resources.append(gpu_resource)
        arguments[weight_key] = gpu_weight
        if (quantity(arguments.get("binpack.weight", 1)) or 0) <= 0:
            arguments["binpack.weight"] = 10
    if resources:
        arguments["binpack.resources"] = ", ".join(resources)
    else:
        arguments.pop("binpack.resources", None)
    if arguments:
        plugin["arguments"] = arguments
    else:
        plugin.pop("arguments", None)
    return new
