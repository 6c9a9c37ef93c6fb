"""The scheduler adapter protocol (the edge): read state, read events, apply a change.

An adapter speaks its scheduler's language (Slurm commands, Kubernetes objects) and answers in
the snapshot's vocabulary (DESIGN.md section 4): ``read_state`` gives the ``nodes``, ``queues``,
``jobs`` and ``scheduler`` sections of a ``gpuobs.snapshot/v1`` document as plain dicts;
``read_events`` gives normalized ``events`` entries (plus a ``dedup_key`` each) and a cursor to
continue from; ``apply`` makes (or, with ``dry_run``, only checks and shows) one change.

Adapters are registered by stable id in :data:`ADAPTERS` and imported lazily. They are built from
the cluster's ``scheduler_config``; secrets come from the environment (names given in the
config, e.g. ``"token_env": "SLURM_JWT"``), never from the database in clear, and never shown
back.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from diagnosis.edge.errors import SchedulerError


@dataclass(frozen=True)
class Capabilities:
    read_state: bool = True
    read_events: bool = True
    change_kinds: frozenset[str] = frozenset()  # e.g. {"placement-policy", "queue-weight"}
    dry_run: bool = True  # can check a change without making it


@dataclass(frozen=True)
class SchedulerState:
    """The scheduler's part of a snapshot, in the snapshot's vocabulary."""

    nodes: list[dict[str, Any]]
    queues: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    scheduler: dict[str, Any] = field(default_factory=dict)  # {"kind", "placement": {pool: p}}


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
    """

    applied: bool
    dry_run: bool
    before: Any
    after: Any
    command: str
    message: str = ""


@runtime_checkable
class SchedulerAdapter(Protocol):
    id: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def read_state(self) -> SchedulerState: ...

    def read_events(self, cursor: str | None) -> EventBatch: ...

    def apply(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult: ...


ADAPTERS: dict[str, str] = {
    # id -> "module:Class"; each class takes (config: Mapping[str, Any]).
    "slurm": "diagnosis.edge.schedulers.slurm.adapter:SlurmAdapter",
    "volcano": "diagnosis.edge.schedulers.kubernetes.volcano:VolcanoAdapter",
    "kueue": "diagnosis.edge.schedulers.kubernetes.kueue:KueueAdapter",
}


def adapter_class(kind: str) -> type:
    target = ADAPTERS.get(kind)
    if target is None:
        known = ", ".join(sorted(ADAPTERS))
        raise SchedulerError(f"no scheduler adapter {kind!r} (known: {known})", permanent=True)
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SchedulerError(
            f"scheduler adapter {kind!r} is not available: {exc}", permanent=True
        ) from exc
    return getattr(module, attribute)


def adapter_for(kind: str, config: Mapping[str, Any]) -> SchedulerAdapter:
    """A configured adapter for a cluster's ``scheduler_kind`` and ``scheduler_config``."""
    return adapter_class(kind)(config)
