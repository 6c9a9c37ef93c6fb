"""The time range a page's charts cover: a preset (the last hour, 6 or 24 hours, 7 days) or a
custom ``from``/``to``, in snapshot time, and the picker that chooses it
(``templates/diagnosis/includes/range_picker.html``; docs/ui.md "Time range").

A preset ends at the page's newest data (the latest good snapshot), not at the wall clock, so a
simulated cluster whose clock runs ahead or behind still shows its last hour. Custom bounds are
parsed as the fairness report's are (:func:`diagnosis.reports.period.parse_moment`: a date is
its midnight, a time without a zone is in the reader's zone), and the picker's inputs are
24-hour text in that zone (``2026-12-01 14:05``), never the browser's locale-formatted
``datetime-local`` (a 12-hour clock beside 24-hour times on the page).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.http import QueryDict
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from diagnosis.pages.support.time_zone import zone_label
from diagnosis.reports.period import PeriodError, parse_moment

RANGE_PRESETS: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
RANGE_LABELS: dict[str, Any] = {
    "1h": _("1 h"),
    "6h": _("6 h"),
    "24h": _("24 h"),
    "7d": _("7 d"),
}
LONGEST_RANGE = timedelta(days=31)
INPUT_FORMAT = "%Y-%m-%d %H:%M"  # the picker's 24-hour text, in the reader's zone


@dataclass(frozen=True)
class TimeRange:
    """``(start, end]`` in UTC snapshot time; ``preset`` None for a custom range."""

    start: datetime
    end: datetime
    preset: str | None

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @classmethod
    def parse(
        cls, query: Mapping[str, Any], *, default_end: datetime, default_preset: str = "24h"
    ) -> TimeRange:
        """From ``range`` (a preset) or ``from`` and ``to``; an unknown preset is the default
        one (links are typed by people), a broken custom bound a :class:`PeriodError`."""
        start_text = str(query.get("from") or "").strip()
        end_text = str(query.get("to") or "").strip()
        if start_text or end_text:
            if not (start_text and end_text):
                raise PeriodError("to" if start_text else "from", _("both from and to are needed"))
            start, end = parse_moment(start_text, "from"), parse_moment(end_text, "to")
            if end <= start:
                raise PeriodError("to", _("must be after from"))
            if end - start > LONGEST_RANGE:
                raise PeriodError("to", _("a range is at most 31 days"))
            return cls(start, end, None)
        preset = str(query.get("range") or "")
        if preset not in RANGE_PRESETS:
            preset = default_preset
        end = default_end.astimezone(UTC)
        return cls(end - RANGE_PRESETS[preset], end, preset)


@dataclass(frozen=True)
class PresetLink:
    key: str
    label: Any
    query: str  # the page's query string with this preset (other parameters kept)
    current: bool


@dataclass(frozen=True)
class RangePicker:
    """What ``includes/range_picker.html`` shows: preset links, the custom bounds as 24-hour
    text in the reader's zone (``zone``, its label), the other query parameters as hidden
    fields (a page's filters survive a change of range) and the error of a custom range that
    could not be read."""

    time_range: TimeRange
    presets: tuple[PresetLink, ...]
    from_value: str
    to_value: str
    kept: tuple[tuple[str, str], ...]
    error: str = ""
    zone: str = "UTC"

    @property
    def current_label(self) -> Any:
        """The chosen preset's label ("24 h"); empty for a custom range."""
        return next((preset.label for preset in self.presets if preset.current), "")


RANGE_PARAMETERS = ("range", "from", "to", "page")


def range_picker(query: QueryDict, time_range: TimeRange, error: str = "") -> RangePicker:
    """The picker for a page whose query is ``query`` and whose charts show ``time_range``."""
    kept = query.copy()
    for name in RANGE_PARAMETERS:
        kept.pop(name, None)
    presets = []
    for key in RANGE_PRESETS:
        with_preset = kept.copy()
        with_preset["range"] = key
        presets.append(
            PresetLink(key, RANGE_LABELS[key], with_preset.urlencode(), time_range.preset == key)
        )
    return RangePicker(
        time_range=time_range,
        presets=tuple(presets),
        from_value=input_value(time_range.start),
        to_value=input_value(time_range.end),
        kept=tuple((name, value) for name, values in kept.lists() for value in values),
        error=error,
        zone=zone_label(timezone.localtime(time_range.end)),
    )


def input_value(moment: datetime) -> str:
    """A bound as the picker's text shows it: 24-hour, in the reader's zone."""
    return timezone.localtime(moment).strftime(INPUT_FORMAT)
