"""The reader's time zone (docs/ui.md "Clocks and time zones"): UTC unless they chose another
with the header's list, kept in the browser (the ``gpuobs_time_zone`` cookie, like the
language's). Every time a page shows is written in it and labelled with it
(:mod:`diagnosis.templatetags.clock`); what is stored and what the API, CSV and e-mails carry
stays UTC.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from functools import cache

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

COOKIE = "gpuobs_time_zone"
COOKIE_AGE_S = 365 * 24 * 3600
# The header's list: UTC first, then zones of the places GPU clusters are run from. Any other
# IANA name is accepted too (the browser's own zone, which the header's script offers).
OFFERED = (
    "UTC",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Asia/Singapore",
    "Asia/Kolkata",
    "Europe/London",
    "Europe/Berlin",
    "America/New_York",
    "America/Chicago",
    "America/Los_Angeles",
    "Australia/Sydney",
)


@cache
def known_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) | {"UTC"}


def zone_named(name: str | None) -> tzinfo | None:
    """The zone of an IANA name (``Asia/Shanghai``), None for anything else: a cookie or form
    value is never handed to the zone database unchecked (a path such as ``../../etc/x``)."""
    if not name or name not in known_zones():
        return None
    return UTC if name == "UTC" else zoneinfo.ZoneInfo(name)


def zone_label(moment: datetime) -> str:
    """A moment's zone as a label that cannot be misread: ``UTC``, ``UTC+8``, ``UTC+5:30``,
    ``UTC-4`` (its offset on that day, daylight saving included; abbreviations such as CST
    name three zones)."""
    offset = moment.utcoffset()
    if offset is None or not offset:
        return "UTC"
    minutes = int(offset.total_seconds() // 60)
    sign, minutes = ("+" if minutes > 0 else "-"), abs(minutes)
    hours, rest = divmod(minutes, 60)
    return f"UTC{sign}{hours}" + (f":{rest:02d}" if rest else "")


def choices(current: str) -> list[str]:
    """The header list's zones: the offered ones, and the reader's own if it is another."""
    return list(OFFERED) if current in OFFERED else [*OFFERED, current]


class ReaderTimeZoneMiddleware:
    """Activates the zone of the reader's cookie for the request (UTC without one, or with one
    that names no zone)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        zone = zone_named(request.COOKIES.get(COOKIE))
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
