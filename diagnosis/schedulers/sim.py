"""The built-in simulator as a scheduler that accepts changes (placement policy, queue weight,
node drain), effective from its next scheduling pass.

A change is a plain dict, as recommendations carry it::

    {"kind": "placement-policy", "target": "pool:a100", "to": "binpack"}
    {"kind": "queue-weight", "target": "queue:research", "to": 4}
    {"kind": "drain-node", "target": "node:gpu-017", "reason": "Xid 79"}
    {"kind": "resume-node", "target": "node:gpu-017"}

:func:`apply` checks it against the running simulator and returns the record to append to the
cluster's ``scheduler_config["changes"]`` (the caller persists it), so that every process
replays the same changes at the same simulated times.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diagnosis.simulate.policy import DrainNode, ResumeNode, SetPlacement, SetQueueWeight
from diagnosis.sources import ClusterLike, CollectError
from diagnosis.sources.sim import runtime_for


class ChangeError(ValueError):
    """A change the scheduler cannot take (unknown target, bad value)."""


def _target(change: Mapping[str, Any], prefix: str) -> str:
    target = str(change.get("target", ""))
    if not target.startswith(prefix) or len(target) == len(prefix):
        raise ChangeError(
            f"{change.get('kind')}: target must look like {prefix}NAME, got {target!r}"
        )
    return target[len(prefix) :]


def change_from_dict(change: Mapping[str, Any]):
    """The simulator's change object for a change dict, or :class:`ChangeError`."""
    kind = change.get("kind")
    try:
        if kind == "placement-policy":
            return SetPlacement(_target(change, "pool:"), str(change["to"]))
        if kind == "queue-weight":
            return SetQueueWeight(_target(change, "queue:"), float(change["to"]))
        if kind == "drain-node":
            reason = str(change.get("reason") or "drained by gpuobs")
            return DrainNode(_target(change, "node:"), reason)
        if kind == "resume-node":
            return ResumeNode(_target(change, "node:"))
    except KeyError as exc:
        raise ChangeError(f"{kind}: missing {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ChangeError(f"{kind}: {exc}") from None
    raise ChangeError(f"unknown change kind {kind!r}")


def current_value(cluster: ClusterLike, change: Mapping[str, Any]) -> Any:
    """What the change's target is set to now (for the diff shown before applying)."""
    simulator = runtime_for(cluster).simulator
    parsed = change_from_dict(change)
    try:
        simulator.validate_change(parsed)
    except (KeyError, ValueError) as exc:
        raise ChangeError(f"{change.get('kind')}: {exc.args[0] if exc.args else exc}") from None
    if isinstance(parsed, SetPlacement):
        return simulator.placement.get(parsed.pool)
    if isinstance(parsed, SetQueueWeight):
        return simulator.queues[simulator.queue_number[parsed.queue]].weight
    return simulator.node_state_of(parsed.node)


def apply(cluster: ClusterLike, change: Mapping[str, Any], *, dry_run: bool) -> dict[str, Any]:
    """Check a change against the simulator; unless ``dry_run``, apply it from the next pass.

    Returns the record ``{"at": simulated seconds, "change": change}`` to persist.
    """
    runtime = runtime_for(cluster)
    parsed = change_from_dict(change)
    with runtime.lock:
        simulator = runtime.simulator
        try:
            simulator.validate_change(parsed)
        except (KeyError, ValueError) as exc:
            raise ChangeError(f"{change.get('kind')}: {exc.args[0] if exc.args else exc}") from None
        record = {"at": simulator.now, "change": dict(change)}
        if not dry_run:
            simulator.apply(parsed)
            runtime.applied_changes += 1
    return record


__all__ = ["ChangeError", "CollectError", "apply", "change_from_dict", "current_value"]
