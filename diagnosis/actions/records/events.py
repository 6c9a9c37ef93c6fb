"""Scheduler events sent to the API: validated, de-duplicated and stored once; and which of the
stored evictions a node's drain caused."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from diagnosis.choices import SchedulerEventKind
from diagnosis.core.vocabulary import parse_time, time_problem
from diagnosis.edge.schedulers.base import EventBatch
from diagnosis.models import (
    Cluster,
    SchedulerEvent,
)


class SchedulerEventError(ValueError):
    """A normalized scheduler event lacks a field or has it in the wrong form (names the field)."""


@dataclass(frozen=True)
class RecordedEvents:
    """What :func:`record_scheduler_events` did: rows added, events already stored, the cursor."""

    stored: int
    duplicates: int
    cursor: str


def _event_time(value: Any, where: str) -> datetime:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise SchedulerEventError(f"{where}.time has no time zone: {value!r}")
        return value
    moment = parse_time(value)
    if moment is None:
        raise SchedulerEventError(f"{where}.time {time_problem(value)}: {value!r}")
    return moment


def _event_dedup_key(event: Mapping[str, Any], moment: datetime) -> str:
    """The adapter's own key, or (when it gives none) a digest of what the event says."""
    key = str(event.get("dedup_key") or "")
    if not key:
        fields = [moment.isoformat(), *(str(event.get(f) or "") for f in _EVENT_TEXT_FIELDS)]
        key = "sha256:" + hashlib.sha256("\x1f".join(fields).encode()).hexdigest()
    if len(key) > 255:  # keep it unique but within the column
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return key


_EVENT_TEXT_FIELDS = ("kind", "job", "node", "reason", "message")


def _scheduler_event(cluster: Cluster, event: Mapping[str, Any], where: str) -> SchedulerEvent:
    if not isinstance(event, Mapping):
        raise SchedulerEventError(f"{where} is not an object: {event!r}")
    if event.get("time") in (None, ""):
        raise SchedulerEventError(f"{where}.time is missing")
    moment = _event_time(event["time"], where)
    kind = event.get("kind")
    if kind not in SchedulerEventKind.values:
        known = ", ".join(SchedulerEventKind.values)
        raise SchedulerEventError(f"{where}.kind {kind!r} is not one of: {known}")
    return SchedulerEvent(
        cluster=cluster,
        time=moment,
        kind=kind,
        job_external_id=str(event.get("job") or "")[:255],
        node=str(event.get("node") or "")[:253],
        reason=str(event.get("reason") or "")[:255],
        message=str(event.get("message") or ""),
        dedup_key=_event_dedup_key(event, moment),
    )


def record_scheduler_events(cluster: Cluster, batch: EventBatch) -> RecordedEvents:
    """Store a scheduler adapter's normalized events and advance the cluster's event cursor,
    in one transaction.

    Idempotent on ``(cluster, dedup_key)``: an event already stored (or repeated in the batch)
    changes nothing, so a redelivered batch or a cursor that re-reads does no harm. Each event is
    stored at its own ``time``, so events that arrive out of order still sort right. An event
    without a ``dedup_key`` is keyed by a digest of its content. A batch whose cursor is None
    leaves the stored cursor as it was. A malformed event raises :class:`SchedulerEventError`
    naming it and stores nothing.
    """
    rows: dict[str, SchedulerEvent] = {}
    for number, event in enumerate(batch.events):
        row = _scheduler_event(cluster, event, f"events[{number}]")
        rows.setdefault(row.dedup_key, row)
    with transaction.atomic():
        locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
        known = set(
            SchedulerEvent.objects.filter(cluster=locked, dedup_key__in=list(rows)).values_list(
                "dedup_key", flat=True
            )
        )
        new = [row for key, row in rows.items() if key not in known]
        SchedulerEvent.objects.bulk_create(new, batch_size=500, ignore_conflicts=True)
        if batch.cursor is not None and batch.cursor != locked.event_cursor:
            locked.event_cursor = batch.cursor
            locked.save(update_fields=["event_cursor"])
        cluster.event_cursor = locked.event_cursor
    return RecordedEvents(
        stored=len(new),
        duplicates=len(batch.events) - len(new),
        cursor=locked.event_cursor,
    )


# -- evictions a drain caused --------------------------------------------------------------------

EVICTION_KINDS = (SchedulerEventKind.PREEMPTED, SchedulerEventKind.EVICTED)
# How long after the snapshot a drain was decided on its evictions may come (cluster time).
DRAIN_EVICTION_WINDOW = timedelta(hours=1)
_INCIDENT_IN_MESSAGE = re.compile(r"\bincident (\d+)\b")


def drain_evictions(
    cluster: Cluster,
    node: str,
    since: datetime,
    *,
    incident_id: int | None = None,
    until: datetime | None = None,
    events: Iterable[Mapping[str, Any]] = (),
) -> dict[str, datetime]:
    """``job id -> time`` of the eviction and preemption events that the drain of ``node``
    caused: the stored ones and ``events`` (a snapshot's, ``{time, kind, job, node, message}``)
    of those kinds from ``since`` (the cluster's time when the drain was decided: the snapshot
    it was computed from) to ``until`` (default :data:`DRAIN_EVICTION_WINDOW` later), on that
    node -- the event's node, or, for an event that names none, the node named in its message
    (``node gpu-100 drained: ...``). A message that names another incident than ``incident_id``
    is another drain's."""
    until = until or since + DRAIN_EVICTION_WINDOW
    stored = (
        SchedulerEvent.objects.filter(
            cluster=cluster, kind__in=EVICTION_KINDS, time__gte=since, time__lte=until
        )
        .exclude(job_external_id="")
        .filter(Q(node=node) | Q(node="", message__contains=node))
        .values_list("job_external_id", "node", "message", "time")
    )
    given = [
        (str(e.get("job") or ""), str(e.get("node") or ""), str(e.get("message") or ""), moment)
        for e in events
        if e.get("kind") in EVICTION_KINDS and (moment := parse_time(e.get("time"))) is not None
    ]
    named = re.compile(rf"(?<![\w.-]){re.escape(node)}(?![\w.-])")
    found: dict[str, datetime] = {}
    for job, where, message, moment in sorted([*stored, *given], key=lambda row: row[3]):
        if not job or not since <= moment <= until:
            continue
        if where != node and (where or not named.search(message)):
            continue
        other = _INCIDENT_IN_MESSAGE.search(message)
        if incident_id is not None and other and int(other.group(1)) != incident_id:
            continue
        found.setdefault(job, moment)
    return found
