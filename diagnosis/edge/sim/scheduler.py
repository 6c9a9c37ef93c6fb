"""The built-in simulator as a scheduler adapter (the ``sim`` entry of
:mod:`diagnosis.edge.schedulers.registry`): it reads the simulated cluster's state and events
and accepts changes (placement policy, queue weight, node drain and resume), effective from its
next scheduling pass.

A change is a plain dict, as recommendations carry it::

    {"kind": "placement-policy", "target": "pool:a100", "to": "binpack"}
    {"kind": "queue-weight", "target": "queue:research", "to": 4}
    {"kind": "drain-node", "target": "node:gpu-017", "reason": "Xid 79"}
    {"kind": "resume-node", "target": "node:gpu-017"}
    {"kind": "gang-release", "target": "job:sweep-gang-a", "to": "requeued"}

A gang release reads the job as ``partial`` (pending with pods bound), ``pending``, ``running``
or its end state, and requeues it (admitted whole from then on).

The simulator lives in this process (:mod:`diagnosis.edge.sim.runtime`), but every process must
see the same cluster: :meth:`SimScheduler.apply` therefore returns, with the change it made, the
record ``{"at": simulated seconds, "change": change}`` (``ChangeResult.record``) that the caller
appends to the cluster's ``scheduler_config["changes"]``, which other processes replay at the
same simulated times. The caller builds the adapter from the cluster's latest
``scheduler_config`` (for a write: under the cluster's row lock), so the changes other processes
recorded are caught up first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

from diagnosis.core.simulate.policy import RequeueJob, SetPlacement, SetQueueWeight
from diagnosis.edge.errors import CollectError, SchedulerError
from diagnosis.edge.schedulers.base import (
    Capabilities,
    ChangeError,
    ChangeResult,
    EventBatch,
    GangAdvice,
    SchedulerState,
    parse_config,
    same_value,
)
from diagnosis.edge.schedulers.targets import TARGET_KINDS
from diagnosis.edge.sim.runtime import (
    CONFIG,
    DEFAULT_SPEED,
    SimCluster,
    SimRuntime,
    catch_up_changes,
    change_from_dict,
    cluster_time,
    runtime_for,
    snapshot_document,
)

GPU_FIELDS = ("node", "index", "uuid", "health")  # what a scheduler knows of a GPU


# The simulator's own gang admission policy (the gang-release advisory).
GANG_ADVICE = GangAdvice(
    "Simulator: admit gangs all-or-nothing (`gang_admission: all-or-nothing`, the simulator's "
    "policy; as Kueue `waitForPodsReady` with a timeout and requeue)."
)


class SimScheduler:
    id: ClassVar[str] = "sim"
    capabilities: ClassVar[Capabilities] = Capabilities(
        change_kinds=frozenset(TARGET_KINDS), dry_run=True, gang_advice=GANG_ADVICE
    )

    def __init__(self, config: Mapping[str, Any] | None, *, cluster: str = "") -> None:
        parse_config(CONFIG, config)
        self.cluster = SimCluster(name=cluster, scheduler_config=dict(config or {}))
        self._read: dict[str, Any] | None = None
        self._now: datetime | None = None
        self._previous_as_of: datetime | None = None

    # -- reading ---------------------------------------------------------------------------------

    def follow(self, *, now: datetime | None, previous_as_of: datetime | None) -> None:
        """Read at the simulated time of ``now`` (a wall clock) or one step past
        ``previous_as_of`` (a step clock whose simulator this process rebuilds); a change is
        checked and applied at the cluster's clock (``previous_as_of`` for a step clock)."""
        self._now, self._previous_as_of = now, previous_as_of

    def wall_time_problem(self) -> str | None:
        """Why the simulated times are not wall times: a wall clock faster than real time."""
        config = self.cluster.scheduler_config
        clock = config.get("clock", "wall")
        if clock != "step" and float(config.get("speed", DEFAULT_SPEED)) != 1.0:
            return (
                "a simulated scheduler with Prometheus metrics must run in real time: set "
                'scheduler_config "speed": 1 (or "clock": "step")'
            )
        return None

    def _snapshot(self) -> dict[str, Any]:
        try:
            return snapshot_document(
                self.cluster, now=self._now, previous_as_of=self._previous_as_of
            )
        except CollectError as exc:
            raise SchedulerError(str(exc), permanent=exc.permanent) from exc

    def read_state(self) -> SchedulerState:
        """The simulated cluster at its clock's time (the simulator runs there first), without
        GPU metrics; ``as_of`` is the simulated time. The simulator's own GPU statistics (what
        the ``sim`` metrics source reports) are the state's ``measured``."""
        document = self._read = self._snapshot()
        return SchedulerState(
            nodes=list(document.get("nodes") or []),
            queues=list(document.get("queues") or []),
            jobs=list(document.get("jobs") or []),
            scheduler=dict(document.get("scheduler") or {}),
            gpus=[
                {key: gpu[key] for key in GPU_FIELDS if key in gpu}
                for gpu in document.get("gpus") or []
            ],
            as_of=document.get("as_of"),
            measured={
                "gpus": list(document.get("gpus") or []),
                "window_s": document.get("window_s"),
            },
        )

    def read_events(self, cursor: str | None) -> EventBatch:
        """The events of the window that the last ``read_state`` read (a fresh read when there
        was none); the cursor is that read's simulated time. Stored events are told apart by
        their content, so the windows' overlap stores nothing twice."""
        document = self._read if self._read is not None else self._snapshot()
        self._read = None
        return EventBatch(events=list(document.get("events") or []), cursor=document.get("as_of"))

    # -- changing --------------------------------------------------------------------------------

    def apply(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
        """Check a change against the simulator, caught up with the recorded changes; unless
        ``dry_run``, apply it from the next pass and return the record to persist. With
        ``"from"`` in the change, a target whose value is no longer that is a conflict."""
        write = {k: v for k, v in change.items() if k != "from"}  # "from": a guard, not a write
        command = "sim apply " + json.dumps(write, sort_keys=True)
        expected = change.get("to", "drained" if change.get("kind") == "drain-node" else None)
        parsed = change_from_dict(write)
        try:
            runtime = runtime_for(self.cluster)
            with runtime.lock:
                before = self._current_value(runtime, parsed, write)
                check_from(change, before)
                record = {"at": runtime.simulator.now, "change": write}
                if not dry_run:
                    runtime.simulator.apply(parsed)
                    runtime.applied_changes += 1
        except CollectError as exc:
            raise SchedulerError(str(exc), permanent=exc.permanent) from exc
        if dry_run:
            message = "dry run: the simulator takes this change"
        else:
            message = "recorded: effective from the simulator's next scheduling pass"
        return ChangeResult(
            applied=not dry_run,
            dry_run=dry_run,
            before=before,
            after=expected,
            command=command,
            message=message,
            record=None if dry_run else record,
        )

    def _current_value(self, runtime: SimRuntime, parsed: Any, change: Mapping[str, Any]) -> Any:
        """What the change's target is set to now: the simulator brought to the cluster's clock
        (:func:`~diagnosis.edge.sim.runtime.cluster_time`; a process that just built it is at
        second 0), the changes recorded by other processes taking effect on the way, and a
        scheduling pass there."""
        simulator = runtime.simulator
        now = cluster_time(self.cluster, runtime, self._now, self._previous_as_of)
        catch_up_changes(self.cluster, runtime, now)
        simulator.run_until(now)
        try:
            simulator.validate_change(parsed)
        except (KeyError, ValueError) as exc:
            raise ChangeError(f"{change.get('kind')}: {exc.args[0] if exc.args else exc}") from None
        if isinstance(parsed, SetPlacement):
            return simulator.placement.get(parsed.pool)
        if isinstance(parsed, SetQueueWeight):
            return simulator.queues[simulator.queue_number[parsed.queue]].weight
        if isinstance(parsed, RequeueJob):
            return gang_state(simulator.job_by_id[parsed.job])
        return simulator.node_state_of(parsed.node)


def gang_state(job: Any) -> str:
    """A simulated job as a gang release sees it: ``partial`` while pending with pods bound."""
    if job.state == "pending" and job.pods:
        return "partial"
    return str(job.state)


def check_from(change: Mapping[str, Any], value: Any) -> None:
    """Refuse a change whose ``from`` is no longer the target's value (a conflict)."""
    if "from" in change and not same_value(change["from"], value):
        raise SchedulerError(
            f"{change.get('kind')} {change.get('target')}: the target changed since the "
            f"recommendation (now {value!r}, expected {change['from']!r})",
            conflict=True,
        )
