"""The period a report covers: a preset (the last 24 hours, 7 or 30 days) or a custom range,
parsed from untrusted input with errors that name the field."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.utils import timezone

from diagnosis.core.vocabulary import format_time

PRESETS: dict[str, timedelta] = {
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
PRESET_LABELS: dict[str, str] = {"24h": "Last 24 hours", "7d": "Last 7 days", "30d": "Last 30 days"}
DEFAULT_PRESET = "24h"
LONGEST = timedelta(days=366)


class PeriodError(ValueError):
    """A period that cannot be read; ``field`` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class ReportPeriod:
    """``(start, end]`` in UTC. ``preset`` is the preset it came from (None: a custom range)."""

    start: datetime
    end: datetime
    preset: str | None = None

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def label(self) -> str:
        if self.preset:
            return PRESET_LABELS[self.preset]
        return f"{minute_stamp(self.start)} – {minute_stamp(self.end)}"

    def query(self) -> dict[str, str]:
        """The exact range as query parameters (what a download link carries)."""
        return {"from": format_time(self.start), "to": format_time(self.end)}

    def as_dict(self) -> dict[str, Any]:
        return {"from": format_time(self.start), "to": format_time(self.end), "preset": self.preset}

    @classmethod
    def preset_ending(cls, preset: str, end: datetime) -> ReportPeriod:
        if preset not in PRESETS:
            known = ", ".join(PRESETS)
            raise PeriodError("period", f"unknown preset {preset!r} (known: {known})")
        end = end.astimezone(UTC).replace(microsecond=0)
        return cls(end - PRESETS[preset], end, preset)

    @classmethod
    def parse(
        cls, query: Mapping[str, Any], *, default_end: datetime | Callable[[], datetime]
    ) -> ReportPeriod:
        """From ``period`` (a preset) or ``from`` and ``to`` (ISO 8601 dates or times; a date
        means its midnight, a time without zone is in the reader's zone: :func:`parse_moment`).
        Without either, the default preset ending at ``default_end`` (the newest data, or now;
        a callable is called only then)."""
        start_text = _text(query.get("from"))
        end_text = _text(query.get("to"))
        preset = _text(query.get("period"))
        if start_text or end_text:
            if not (start_text and end_text):
                missing = "to" if start_text else "from"
                raise PeriodError(missing, "a custom range needs both from and to")
            start = parse_moment(start_text, "from")
            end = parse_moment(end_text, "to")
            if end <= start:
                raise PeriodError("to", "must be after from")
            if end - start > LONGEST:
                raise PeriodError("to", f"a period is at most {LONGEST.days} days")
            return cls(start, end, None)
        end = default_end() if callable(default_end) else default_end
        return cls.preset_ending(preset or DEFAULT_PRESET, end)


def parse_moment(text: str, field: str) -> datetime:
    """An ISO 8601 date or date-time as an aware UTC datetime. Wider than RFC 3339
    (:func:`diagnosis.core.vocabulary.parse_time`) on purpose: people type these ranges, so a
    date is its midnight and a time without a zone is a time in the reader's zone (their
    chosen one, docs/ui.md "Clocks and time zones"; UTC for a machine, an e-mail or anyone who
    chose none), and a space may stand for the ``T``."""
    zone = timezone.get_current_timezone()
    try:
        if len(text) == 10:
            moment = datetime.combine(date.fromisoformat(text), time(0), tzinfo=zone)
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise PeriodError(field, f"not an ISO 8601 date or time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.astimezone(UTC)


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        value = value[-1] if value else ""
    return str(value).strip() if value is not None else ""


def minute_stamp(moment: datetime) -> str:
    """A moment as people read it in a report: ``2026-11-29 08:00 UTC``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
