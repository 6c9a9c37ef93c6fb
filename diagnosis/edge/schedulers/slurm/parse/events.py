"""Events read off Slurm's job and node records (Slurm keeps no event stream), and the cursor
that says where the previous read stopped."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from diagnosis.edge.schedulers.slurm.parse.jobs import ParsedJobs
from diagnosis.edge.schedulers.slurm.parse.nodes import node_drain, node_records, node_state
from diagnosis.edge.schedulers.slurm.parse.values import epoch_time, int_value, text_value

# -- events --------------------------------------------------------------------------------------

CURSOR_VERSION = 1
ENDED_KINDS = {"completed": "completed", "failed": "failed", "preempted": "preempted"}


@dataclass(frozen=True)
class EventCursor:
    """Where the previous read stopped: its time (epoch s) and the pending reason it saw for each
    pending job (a reason is reported again only when it changes)."""

    time: int | None = None
    pending: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> EventCursor:
        """The cursor stored last time; a missing or unreadable one starts afresh."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except ValueError:
            return cls()
        if not isinstance(data, dict) or data.get("v") != CURSOR_VERSION:
            return cls()
        pending = data.get("pending")
        return cls(
            time=int_value(data.get("t")),
            pending={str(k): str(v) for k, v in pending.items()}
            if isinstance(pending, dict)
            else {},
        )

    def dump(self) -> str:
        return json.dumps(
            {"v": CURSOR_VERSION, "t": self.time, "pending": dict(self.pending)},
            separators=(",", ":"),
            sort_keys=True,
        )


def _event(
    epoch: int, kind: str, key: str, *, job=None, node=None, reason="", message=""
) -> dict[str, Any]:
    return {
        "time": epoch_time(epoch),
        "kind": kind,
        "job": job,
        "node": node,
        "reason": reason,
        "message": message,
        "dedup_key": key,
    }


def derive_events(
    jobs: ParsedJobs,
    nodes_document: Mapping[str, Any],
    cursor: EventCursor,
    *,
    now: int,
    overlap_s: int = 300,
) -> tuple[list[dict[str, Any]], EventCursor]:
    """Slurm keeps no event stream; events are read off job and node records.

    - ``submitted``/``started``/``completed``/``failed``/``preempted`` at the job's own times
      (the reason keeps Slurm's state word, e.g. ``CANCELLED``, ``TIMEOUT``), for times since
      the cursor (less ``overlap_s`` for clock skew; dedup keys absorb the repeats);
    - ``failed_scheduling`` when a pending job shows a reason it did not show last time
      (``Resources``, ``Priority``, ``Dependency``, ``QOSMaxGRESPerUser``, ``AssocGrpGRES``,
      ``ReqNodeNotAvail``, ...), at the time it was seen, with Slurm's description as message;
    - ``node_drained`` for a drained or draining node, at the time its reason was set.
    """
    since = None if cursor.time is None else cursor.time - overlap_s
    events: list[dict[str, Any]] = []
    pending: dict[str, str] = {}

    def recent(epoch: int) -> bool:
        return epoch > 0 and (since is None or epoch >= since)

    for job in jobs.jobs:
        ident = job["id"]
        facts = jobs.native[ident]
        native = facts["native_state"]
        if recent(facts["submit_epoch"]):
            events.append(
                _event(
                    facts["submit_epoch"],
                    "submitted",
                    f"job:{ident}:submitted:{facts['submit_epoch']}",
                    job=ident,
                    reason="Submitted",
                    message=f"job {ident} submitted to partition {job['pool']}",
                )
            )
        if recent(facts["start_epoch"]):
            events.append(
                _event(
                    facts["start_epoch"],
                    "started",
                    f"job:{ident}:started:{facts['start_epoch']}",
                    job=ident,
                    reason="Started",
                    message=f"job {ident} started on {facts['nodes'] or '?'}",
                )
            )
        if job["state"] in ENDED_KINDS and recent(facts["end_epoch"]):
            exit_code = facts["exit_code"]
            detail = f" (exit code {exit_code >> 8}:{exit_code & 0xFF})" if exit_code else ""
            events.append(
                _event(
                    facts["end_epoch"],
                    ENDED_KINDS[job["state"]],
                    f"job:{ident}:{native}:{facts['end_epoch']}",
                    job=ident,
                    reason=native,
                    message=f"job {ident} ended {native}{detail}",
                )
            )
        reason = job["pending_reason"]
        if reason:
            pending[ident] = reason
            if cursor.pending.get(ident) != reason:
                message = facts["description"] or f"job {ident} pending: {reason}"
                events.append(
                    _event(
                        now,
                        "failed_scheduling",
                        f"job:{ident}:pending:{reason}:{now}",
                        job=ident,
                        reason=reason,
                        message=message,
                    )
                )
    for record in node_records(nodes_document):
        drain = node_drain(record)
        name = text_value(record.get("name"))
        if drain is None or not name:
            continue
        reason, changed = drain
        by = text_value(record.get("reason_set_by_user"))
        state = node_state(record)
        events.append(
            _event(
                changed or now,
                "node_drained",
                f"node:{name}:drain:{changed or reason}",
                node=name,
                reason=reason or "DRAIN",
                message=f"node {name} {'draining' if state == 'cordoned' else 'drained'}"
                + (f" by {by}" if by else "")
                + (f": {reason}" if reason else ""),
            )
        )
    events.sort(key=lambda e: (e["time"], e["dedup_key"]))
    return events, EventCursor(time=now, pending=pending)
