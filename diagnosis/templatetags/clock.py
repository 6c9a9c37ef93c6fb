"""``{% load clock %}``: every time a page shows, in the reader's zone and labelled with it
(docs/ui.md "Clocks and time zones").

- ``{{ finding.first_seen|moment }}`` → ``2026-12-01 22:05:07 UTC+8``, in a ``<time>`` whose
  ``datetime`` is the UTC instant and whose tooltip names the zone and the UTC time;
  ``|moment:"minute"`` drops the seconds (a period's bounds), ``|moment:"time"`` the date.
- ``{{ rec.approved_at|on_clock:clock }}``: a wall-clock moment (a person's step, an audit row)
  on the page's cluster clock (:class:`~diagnosis.pages.support.cluster_clock.ClusterClock`),
  the wall time in its tooltip when the two differ.
- ``{% time_zone_choices as zones %}``: the header list's zones.
- ``{% cluster_clock_note cluster %}``: on a simulated cluster's pages, which clock they show.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

from diagnosis.pages.support.cluster_clock import simulated_clock
from diagnosis.pages.support.time_zone import choices, zone_label

register = template.Library()

FORMATS = {"seconds": "%Y-%m-%d %H:%M:%S", "minute": "%Y-%m-%d %H:%M", "time": "%H:%M:%S"}
NONE = mark_safe('<span class="none">—</span>')


def local_text(value: datetime, style: str = "seconds") -> str:
    """``value`` in the reader's zone as ``2026-12-01 22:05:07 UTC+8`` (plain text: a chart
    label, a ``title``)."""
    local = timezone.localtime(value)
    return f"{local.strftime(FORMATS.get(style, FORMATS['seconds']))} {zone_label(local)}"


def _utc_text(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _time_element(value: datetime, style: str, title: str) -> SafeString:
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        title,
        local_text(value, style),
    )


@register.filter
def moment(value: Any, style: str = "seconds") -> SafeString:
    """A moment in the reader's zone, labelled; ``—`` for none."""
    if not isinstance(value, datetime):
        return NONE
    zone = timezone.get_current_timezone_name()
    return _time_element(value, style, f"{zone} · {_utc_text(value)}")


@register.filter
def moment_text(value: Any) -> str:
    """:func:`local_text` for a template (a ``title``); empty for none."""
    return local_text(value) if isinstance(value, datetime) else ""


@register.filter
def on_clock(value: Any, clock: Any) -> SafeString:
    """A wall-clock moment on the page's cluster clock (``clock``; none: as it is)."""
    if not isinstance(value, datetime):
        return NONE
    shown = clock.at(value) if clock is not None else value
    if shown == value:
        return moment(value)
    title = gettext("cluster clock; on the wall clock %(wall)s") % {"wall": local_text(value)}
    return _time_element(shown, "seconds", title)


@register.filter
def zone_of(value: Any) -> str:
    """The label of the reader's zone at ``value`` (now without one): ``UTC+8``."""
    return zone_label(timezone.localtime(value if isinstance(value, datetime) else None))


@register.simple_tag
def time_zone_choices() -> list[str]:
    return choices(timezone.get_current_timezone_name())


@register.inclusion_tag("diagnosis/includes/cluster_clock_note.html")
def cluster_clock_note(cluster: Any) -> dict[str, Any]:
    """The line a simulated cluster's pages carry: its times are the cluster's clock, not
    the wall clock (none for a cluster on the wall clock)."""
    clock = simulated_clock(cluster) if cluster is not None else None
    return {"clock": clock}
