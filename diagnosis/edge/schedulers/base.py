"""The scheduler adapter protocol (the edge): read state, read events, apply a change.

An adapter speaks its scheduler's language (Slurm commands, Kubernetes objects, the built-in
simulator) and answers in the snapshot's vocabulary (docs/snapshot.md): ``read_state`` gives
the ``nodes``, ``queues``, ``jobs`` and ``scheduler`` sections of a ``gpuobs.snapshot/v1``
document as plain dicts; ``read_events`` gives normalized ``events`` entries (plus a
``dedup_key`` each) and a cursor to continue from; ``apply`` makes (or, with ``dry_run``, only
checks and shows) one change.

Adapters are declared by stable id in :mod:`diagnosis.edge.schedulers.registry` and imported
lazily. Each is built from the cluster's ``scheduler_config`` (and told the cluster's name),
which it checks against the :class:`~diagnosis.edge.config.ConfigSpec` its module declares
(:func:`parse_config`); secrets come from the environment (names given in the config, e.g.
``"kubeconfig_env": "KUBECONFIG"``), never from the database in clear, and never shown back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol, runtime_checkable

from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.errors import ConfigError, SchedulerError


class ChangeError(SchedulerError):
    """A change the scheduler cannot take (a target it does not have, a value it refuses):
    always permanent, retrying cannot help."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


@dataclass(frozen=True)
class GangAdvice:
    """How an admin keeps the scheduler from holding part of a gang: the exact admission
    setting and where it goes, which the ``gang-release`` advisory quotes. It reaches the core
    in the snapshot's ``scheduler.gang_advice`` (docs/snapshot.md), written by the collection
    (:func:`diagnosis.edge.collection.scheduler_block`)."""

    setting: str

    def as_snapshot(self) -> dict[str, str]:
        """``scheduler.gang_advice`` of a snapshot."""
        return {"setting": self.setting}


@dataclass(frozen=True)
class Capabilities:
    read_state: bool = True
    read_events: bool = True
    change_kinds: frozenset[str] = frozenset()  # e.g. {"placement-policy", "queue-weight"}
    dry_run: bool = True  # can check a change without making it
    # Its snapshots can carry a queue hierarchy (``scheduler.queue_parents``, ``cohorts``).
    queue_tree: bool = False
    # The admission setting that stops partial gangs (None: the core's generic advice).
    gang_advice: GangAdvice | None = None


@dataclass(frozen=True)
class SchedulerState:
    """The scheduler's part of a snapshot, in the snapshot's vocabulary.

    ``gpus``: the GPUs the scheduler itself knows (``node``, ``index``, ``uuid``, ``health``;
    no metrics) -- most know none, and the snapshot then has every node's GPUs, healthy.
    ``as_of``: the scheduler's own time of this state (RFC 3339) when it keeps a clock of its
    own (the simulator); None: the state is as of now. ``measured``: what the scheduler itself
    measures, for a metrics source that reads it (the simulator's ``gpus`` with their statistics
    and its ``window_s``); empty for real schedulers. ``refused``: the records the scheduler
    reported that this read left out, each named with why (``job 17: allocated on node 'gpu2',
    which the nodes read does not list``); the rest of the cluster is read, and the cycle
    records them as a degraded status (docs/integrations.md, "Records left out").
    """

    nodes: list[dict[str, Any]]
    queues: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    scheduler: dict[str, Any] = field(default_factory=dict)  # {"kind", "placement": {pool: p}}
    gpus: list[dict[str, Any]] = field(default_factory=list)
    as_of: str | None = None
    measured: Mapping[str, Any] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EventBatch:
    """Normalized events (``time, kind, job, node, reason, message, dedup_key``) read since a
    cursor, and the cursor to pass next time (opaque to callers)."""

    events: list[dict[str, Any]]
    cursor: str | None


@dataclass(frozen=True)
class ChangeResult:
    """What ``apply`` did (or, in dry run, would do).

    ``command`` is the exact write, as a person would run it (``scontrol update ...``, the JSON
    patch of a Kubernetes object); ``before``/``after`` the target's value around it.
    ``record``: for an adapter that keeps its changes in the cluster's
    ``scheduler_config["changes"]`` (the simulator, which replays them), the entry the caller
    appends there, in the transaction that holds the cluster's row; None for the others.
    """

    applied: bool
    dry_run: bool
    before: Any
    after: Any
    command: str
    message: str = ""
    record: Mapping[str, Any] | None = None


@runtime_checkable
class SchedulerAdapter(Protocol):
    """Built as ``Adapter(scheduler_config, cluster=name)``; a bad config is a permanent
    :class:`SchedulerError` naming the key."""

    id: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def read_state(self) -> SchedulerState: ...

    def read_events(self, cursor: str | None) -> EventBatch: ...

    def apply(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult: ...


@runtime_checkable
class OwnClock(Protocol):
    """An adapter whose scheduler keeps a clock of its own (the simulator). Before a read it is
    told the wall time and the time of the cluster's last good snapshot (to resume from after a
    restart); ``wall_time_problem`` says why its times are not wall times (None: they are),
    which a metrics source reading the real world (Prometheus) cannot work with."""

    def follow(self, *, now: datetime | None, previous_as_of: datetime | None) -> None: ...

    def wall_time_problem(self) -> str | None: ...


@runtime_checkable
class JobUsage(Protocol):
    """An adapter whose scheduler accounts each running job's GPU use (Slurm's ``gres/gpuutil``
    and ``gres/gpumem`` TRES): per job id, ``gpuutil`` (%, summed over tasks) and ``gpumem``
    (bytes). A read failure is a :class:`SchedulerError`."""

    def read_job_usage(self, job_ids: Sequence[str]) -> dict[str, dict[str, float]]: ...


def parse_config(spec: ConfigSpec, raw: Any) -> dict[str, Any]:
    """``raw`` checked against an adapter's declared settings (:meth:`ConfigSpec.parse`), or a
    permanent :class:`SchedulerError` naming every bad key as ``scheduler_config.KEY``."""
    try:
        return spec.parse(raw)
    except ConfigError as exc:
        if raw is not None and not isinstance(raw, Mapping):
            raise SchedulerError(f"{spec.what} must be an object", permanent=True) from exc
        problems = "; ".join(f"{spec.what}.{problem}" for problem in exc.problems)
        raise SchedulerError(problems, permanent=True) from exc


# -- values as adapters report them --------------------------------------------------------------


def observed_value(value: Any) -> Any:
    """A value as adapters report it, made comparable with a recommendation's ``from``/``to``:
    a node record's ``state``; Kubernetes' ``schedulable`` as the snapshot's ``ready``; numbers
    as floats."""
    if isinstance(value, Mapping):
        value = value.get("state")
    if value == "schedulable":
        return "ready"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def same_value(a: Any, b: Any) -> bool:
    """Whether two reported values say the same (weights compared as numbers)."""
    a, b = observed_value(a), observed_value(b)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b)
    return a == b
