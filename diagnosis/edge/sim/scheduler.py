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

from diagnosis.core.simulate.policy import SetPlacement, SetQueueWeight
from diagnosis.edge.sim.runtime import ChangeError, change_from_dict, runtime_for
from diagnosis.edge.sources import ClusterLike


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
