"""Live updates (docs/ui.md "Live updates"): a page that shows a cluster's latest cycle polls
this small fragment with htmx; when a newer good cycle has landed, the answer carries the
``HX-Trigger: gpuobs:new-cycle`` header and the page's ``#live-region`` fetches itself again
(``hx-select``), so the figures change without a reload."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from diagnosis.access import cycles_for_user, get_cluster_for_user
from diagnosis.models import Cluster, ClusterCycle

NEW_CYCLE_EVENT = "gpuobs:new-cycle"


def latest_good_cycle(request: HttpRequest, cluster: Cluster) -> ClusterCycle | None:
    """The newest good cycle the user may read (what a live page compares against)."""
    return (
        cycles_for_user(request.user, cluster)
        .filter(ok=True)
        .only("id", "cluster_id", "as_of", "ran_at")
        .order_by("-as_of", "-id")
        .first()
    )


@require_safe
def live_status(request: HttpRequest, name: str) -> HttpResponse:
    """``?cycle=ID``: the cycle the page shows. Answers the "updated N s ago" line of the newest
    good cycle, and the new-cycle trigger when that is not the one the page shows."""
    cluster = get_cluster_for_user(request.user, name)
    cycle = latest_good_cycle(request, cluster)
    response = render(
        request, "diagnosis/includes/live_status.html", {"cluster": cluster, "cycle": cycle}
    )
    shown = request.GET.get("cycle", "")
    if cycle is not None and shown != str(cycle.pk):
        response["HX-Trigger"] = NEW_CYCLE_EVENT
    return response
