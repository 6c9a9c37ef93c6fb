"""The snapshot's fixed words (docs/snapshot.md), defined once: the format id, node states,
GPU health, job states, event kinds, and RFC 3339 times.

Everything that writes or reads a ``gpuobs.snapshot/v1`` document (the loader, the simulator,
the sources and adapters, the Django choices) takes its words from here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

SNAPSHOT_FORMAT = "gpuobs.snapshot/v1"
DEFAULT_WINDOW_S = 900

NODE_STATES = ("ready", "cordoned", "drained", "down")
UNAVAILABLE_NODE_STATES = ("cordoned", "drained", "down")  # nothing new is placed there
GPU_HEALTH = ("ok", "unhealthy")
JOB_STATES = ("pending", "running", "completed", "failed", "preempted")
LIVE_JOB_STATES = ("pending", "running")
EVENT_KINDS = (
    "submitted",
    "scheduled",
    "failed_scheduling",
    "started",
    "preempted",
    "evicted",
    "completed",
    "failed",
    "node_cordoned",
    "node_drained",
    "xid",
)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time with a zone designator (``Z``/``z`` or an offset), as an aware UTC
    datetime; None when absent or unparsable. Fractions beyond microseconds (Alertmanager and
    Go write nanoseconds) are cut to microseconds."""
    moment = _read_time(value)
    if moment is None or moment.tzinfo is None:
        return None
    return moment.astimezone(UTC)


def time_problem(value: Any) -> str | None:
    """Why :func:`parse_time` refuses ``value``, as the words an error message goes on with:
    ``"has no time zone"`` (a date-time without ``Z`` or an offset) or ``"is not an RFC 3339
    time"``; None when it is a valid time."""
    moment = _read_time(value)
    if moment is None:
        return "is not an RFC 3339 time"
    return "has no time zone" if moment.tzinfo is None else None


def _read_time(value: Any) -> datetime | None:
    """An RFC 3339 date-time as written, zone or none; None when it is not one."""
    if not isinstance(value, str) or "T" not in value.upper():
        return None
    text = value.strip()
    if text[-1] in "zZ":
        text = text[:-1] + "+00:00"
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[: min(digits, 6)]}{rest[digits:]}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def format_time(moment: datetime) -> str:
    """An aware datetime as RFC 3339 UTC with ``Z``: whole seconds, or the fraction it has
    (``2026-11-29T08:00:00Z``, ``2026-11-29T08:00:00.25Z``)."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no time zone")
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    return text + "Z"
