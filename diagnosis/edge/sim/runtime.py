"""The built-in simulator of a cluster, kept per process (the embedded default), its settings,
and the changes it accepts.

A sim cluster's ``scheduler_config`` (:data:`CONFIG`)::

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
from typing import Any, Protocol

from diagnosis.core.simulate import scenarios
from diagnosis.core.simulate.policy import (
    DrainNode,
    RequeueJob,
    ResumeNode,
    SetPlacement,
    SetQueueWeight,
)
from diagnosis.core.simulate.simulator import Simulator
from diagnosis.core.vocabulary import parse_time
from diagnosis.edge.config import ConfigSpec, Setting
from diagnosis.edge.errors import CollectError, ConfigError
from diagnosis.edge.schedulers.base import ChangeError
from diagnosis.edge.schedulers.targets import target_name

SCENARIOS = {
    "seed": scenarios.seed_scenario,
    "showcase": scenarios.rule_showcase_scenario,
    "small": scenarios.small_scenario,
}
DEFAULT_SPEED = 60.0


def _known_scenario(name: str) -> str:
    if name not in SCENARIOS:
        raise ValueError(f"unknown sim scenario {name!r} (known: {', '.join(SCENARIOS)})")
    return name


def _rfc3339(value: str) -> str:
    if parse_time(value) is None:
        raise ValueError(f"expected an RFC 3339 time with a time zone, got {value!r}")
    return value


CONFIG = ConfigSpec(
    (
        Setting("scenario", str, "seed", "the scenario the simulator runs", check=_known_scenario),
        Setting("seed", int, 0, "the scenario's random seed"),
        Setting(
            "clock",
            str,
            "wall",
            "wall: scaled wall time; step: step_s a collection",
            choices=("wall", "step"),
        ),
        Setting("speed", float, DEFAULT_SPEED, "simulated seconds per wall second (wall clock)"),
        Setting("step_s", float, 60, "simulated seconds per collection (step clock)"),
        Setting(
            "started_at",
            str,
            None,
            "RFC 3339 wall time of simulated second 0 (default: this process's first collection)",
            check=_rfc3339,
        ),
        Setting("changes", list, (), "the changes applied so far, replayed at their times"),
    ),
    what="scheduler_config",
)


class SimClusterLike(Protocol):
    name: str
    scheduler_config: Mapping[str, Any]


@dataclass(frozen=True)
class SimCluster:
    """A simulated cluster as the runtime needs it: its name and its ``scheduler_config``."""

    name: str
    scheduler_config: Mapping[str, Any]


def settings_of(cluster: SimClusterLike) -> dict[str, Any]:
    """The cluster's checked ``scheduler_config`` (:data:`CONFIG`), or a permanent
    :class:`CollectError` naming every bad key."""
    try:
        return CONFIG.parse(cluster.scheduler_config)
    except ConfigError as exc:
        raise CollectError(f"sim {exc}", permanent=True) from exc


def change_from_dict(change: Mapping[str, Any]):
    """The simulator's change object for a change dict, or :class:`ChangeError`."""
    kind = change.get("kind")
    try:
        if kind == "placement-policy":
            return SetPlacement(target_name(change), str(change["to"]))
        if kind == "queue-weight":
            return SetQueueWeight(target_name(change), float(change["to"]))
        if kind == "drain-node":
            reason = str(change.get("reason") or "drained by gpuobs")
            return DrainNode(target_name(change), reason)
        if kind == "resume-node":
            return ResumeNode(target_name(change))
        if kind == "gang-release":
            return RequeueJob(
                target_name(change), str(change.get("reason") or "requeued by gpuobs")
            )
    except KeyError as exc:
        raise ChangeError(f"{kind}: missing {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ChangeError(f"{kind}: {exc}") from None
    raise ChangeError(f"unknown change kind {kind!r}")


@dataclass
class SimRuntime:
    key: tuple[Any, ...]
    simulator: Simulator
    started_at: datetime
    applied_changes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


_RUNTIMES: dict[str, SimRuntime] = {}
_RUNTIMES_LOCK = threading.Lock()


def runtime_for(cluster: SimClusterLike) -> SimRuntime:
    """The process's simulator of a cluster, built (and brought up to date) when needed."""
    config = settings_of(cluster)
    started_at = parse_time(config["started_at"]) if config["started_at"] else None
    key = (config["scenario"], config["seed"], config["started_at"])
    with _RUNTIMES_LOCK:
        runtime = _RUNTIMES.get(cluster.name)
        if runtime is None or runtime.key != key:
            scenario = SCENARIOS[config["scenario"]](config["seed"])
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
    cluster: SimClusterLike,
    runtime: SimRuntime,
    now: datetime | None = None,
    previous_as_of: datetime | None = None,
) -> float:
    """The simulated second to collect at. In ``step`` mode: one step past the previous
    snapshot (so a rebuilt simulator resumes where the cluster was, not at zero)."""
    config = settings_of(cluster)
    if config["clock"] == "step":
        position = runtime.simulator.now
        if previous_as_of is not None:
            position = max(position, (previous_as_of - runtime.started_at).total_seconds())
        return position + float(config["step_s"])
    now = now or datetime.now(UTC)
    elapsed = max(0.0, (now - runtime.started_at).total_seconds())
    return max(runtime.simulator.now, elapsed * float(config["speed"]))


def cluster_time(
    cluster: SimClusterLike,
    runtime: SimRuntime,
    now: datetime | None = None,
    previous_as_of: datetime | None = None,
) -> float:
    """The simulated second the cluster is at now, without stepping it: a ``wall`` clock's
    position at ``now`` (the wall time unless told); a ``step`` clock's latest snapshot
    (``previous_as_of``, the stored state). Never before the simulator's own position. A change
    is validated and applied there, whichever process runs it (one that just started included)."""
    position = runtime.simulator.now
    if previous_as_of is not None:
        position = max(position, (previous_as_of - runtime.started_at).total_seconds())
    if settings_of(cluster)["clock"] == "step":
        return position
    elapsed = max(0.0, ((now or datetime.now(UTC)) - runtime.started_at).total_seconds())
    return max(position, elapsed * float(settings_of(cluster)["speed"]))


def catch_up_changes(cluster: SimClusterLike, runtime: SimRuntime, until: float) -> None:
    """Apply recorded changes not yet applied in this process, each at its simulated time. A
    record that cannot be replayed is a permanent :class:`CollectError`."""
    changes = settings_of(cluster)["changes"]
    simulator = runtime.simulator
    for number, record in enumerate(changes[runtime.applied_changes :], runtime.applied_changes):
        at = min(max(float(record.get("at", simulator.now)), simulator.now), until)
        simulator.run_until(at)
        try:
            change = change_from_dict(record["change"])
        except ChangeError as exc:
            raise CollectError(
                f"sim changes[{number}] cannot be replayed: {exc}", permanent=True
            ) from exc
        simulator.apply(change)
        runtime.applied_changes += 1


def snapshot_document(
    cluster: SimClusterLike, *, now: datetime | None = None, previous_as_of: datetime | None = None
) -> dict[str, Any]:
    """The cluster's snapshot document at its clock's time: the simulator runs there first,
    replaying the recorded changes on the way (what the sim source and the sim scheduler's
    ``read_state`` read)."""
    runtime = runtime_for(cluster)
    with runtime.lock:
        until = target_time(cluster, runtime, now, previous_as_of)
        try:
            catch_up_changes(cluster, runtime, until)
            return runtime.simulator.snapshot(at=until)
        except (ValueError, KeyError) as exc:
            raise CollectError(f"simulator failed: {exc}") from exc
