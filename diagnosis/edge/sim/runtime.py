"""The built-in simulator of a cluster, kept per process (the embedded default), and the
changes it accepts.

A sim cluster's ``scheduler_config``::

    {"scenario": "seed", "seed": 0, "speed": 60, "clock": "wall",
     "started_at": "2026-11-29T08:00:00Z", "step_s": 60,
     "changes": [{"at": 5400.0, "change": {"kind": "placement-policy", ...}}]}

``clock: "wall"``: simulated time is the wall time since ``started_at`` (default: when this
process first collected) times ``speed`` (a simulated hour per wall minute at 60).
``clock: "step"``: every collection advances ``step_s`` simulated seconds (scripts, tests).
Each process keeps its simulator in memory; a process that has none (a new worker) rebuilds it
from the scenario, the seed and the recorded ``changes``, which it replays at their simulated
times, so every process sees the same cluster.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from diagnosis.core.simulate import scenarios
from diagnosis.core.simulate.policy import DrainNode, ResumeNode, SetPlacement, SetQueueWeight
from diagnosis.core.simulate.simulator import Simulator
from diagnosis.edge.sources import ClusterLike, CollectError


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


SCENARIOS = {
    "seed": scenarios.seed_scenario,
    "showcase": scenarios.rule_showcase_scenario,
    "small": scenarios.small_scenario,
}
DEFAULT_SPEED = 60.0


@dataclass
class SimRuntime:
    key: tuple[Any, ...]
    simulator: Simulator
    started_at: datetime
    applied_changes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


_RUNTIMES: dict[str, SimRuntime] = {}
_RUNTIMES_LOCK = threading.Lock()


def parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise CollectError(f"sim started_at {value!r} has no time zone", permanent=True)
    return parsed


def runtime_for(cluster: ClusterLike) -> SimRuntime:
    """The process's simulator of a cluster, built (and brought up to date) when needed."""
    config = cluster.scheduler_config or {}
    scenario_name = config.get("scenario", "seed")
    factory = SCENARIOS.get(scenario_name)
    if factory is None:
        known = ", ".join(SCENARIOS)
        raise CollectError(
            f"unknown sim scenario {scenario_name!r} (known: {known})", permanent=True
        )
    started_at = parse_time(config["started_at"]) if config.get("started_at") else None
    key = (scenario_name, int(config.get("seed", 0)), config.get("started_at"))
    with _RUNTIMES_LOCK:
        runtime = _RUNTIMES.get(cluster.name)
        if runtime is None or runtime.key != key:
            scenario = factory(int(config.get("seed", 0)))
            start = started_at or datetime.now(UTC).replace(microsecond=0)
            scenario = replace(scenario, spec=replace(scenario.spec, start=start))
            runtime = SimRuntime(key=key, simulator=scenario.build(), started_at=start)
            _RUNTIMES[cluster.name] = runtime
    return runtime


def forget(cluster_name: str) -> None:
    """Drop a process's simulator (tests; a cluster whose config was reset)."""
    with _RUNTIMES_LOCK:
        _RUNTIMES.pop(cluster_name, None)


def target_time(
    cluster: ClusterLike,
    runtime: SimRuntime,
    now: datetime | None = None,
    previous_as_of: datetime | None = None,
) -> float:
    """The simulated second to collect at. In ``step`` mode: one step past the previous
    snapshot (so a rebuilt simulator resumes where the cluster was, not at zero)."""
    config = cluster.scheduler_config or {}
    if config.get("clock", "wall") == "step":
        position = runtime.simulator.now
        if previous_as_of is not None:
            position = max(position, (previous_as_of - runtime.started_at).total_seconds())
        return position + float(config.get("step_s", 60))
    now = now or datetime.now(UTC)
    elapsed = max(0.0, (now - runtime.started_at).total_seconds())
    return max(runtime.simulator.now, elapsed * float(config.get("speed", DEFAULT_SPEED)))


def catch_up_changes(cluster: ClusterLike, runtime: SimRuntime, until: float) -> None:
    """Apply recorded changes not yet applied in this process, each at its simulated time."""
    changes = (cluster.scheduler_config or {}).get("changes", [])
    simulator = runtime.simulator
    for record in changes[runtime.applied_changes :]:
        at = min(max(float(record.get("at", simulator.now)), simulator.now), until)
        simulator.run_until(at)
        simulator.apply(change_from_dict(record["change"]))
        runtime.applied_changes += 1
