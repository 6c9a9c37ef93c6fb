"""``{% load live %}``: the "updated N s ago" line a live page polls (diagnosis/pages/live.py).

``{% live_status cluster cycle %}`` renders it for the cycle the page shows; put the part of
the page that should follow new cycles in ``<div id="live-region" ...>`` as
``templates/diagnosis/includes/live_region_attrs.html`` describes.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings
from django.utils import timezone

register = template.Library()


@register.inclusion_tag("diagnosis/includes/live_status.html", takes_context=True)
def live_status(context: template.Context, cluster: Any, cycle: Any) -> dict[str, Any]:
    return {"cluster": cluster, "cycle": cycle, "request": context.get("request")}


@register.simple_tag
def live_poll_seconds() -> int:
    """How often a live page asks whether a new cycle landed (``GPUOBS_LIVE_POLL_SECONDS``)."""
    return settings.GPUOBS_LIVE_POLL_SECONDS


@register.filter
def live_state(cycle: Any, cluster: Any) -> str:
    """What the live line's dot says (docs/ui.md "Live updates"): ``error`` while the cluster's
    last collection failed, ``stale`` when the newest good cycle is older than two cycle
    intervals, ``none`` before the first, else ``ok`` -- never a green dot beside old data."""
    if cycle is None:
        return "none"
    if getattr(cluster, "status", "") == "error":
        return "error"
    stale_after = 2 * settings.GPUOBS_CYCLE_SECONDS
    if (age_seconds(cycle.ran_at) or 0) > stale_after:
        return "stale"
    return "ok"


@register.filter
def age_seconds(moment: Any) -> float | None:
    """Seconds from ``moment`` to now (None for no moment)."""
    if moment is None:
        return None
    return max(0.0, (timezone.now() - moment).total_seconds())
