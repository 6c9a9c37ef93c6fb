"""Live updates (docs/ui.md "Live updates"): a page that shows the latest cycle polls a small
fragment with htmx; when a newer good cycle has landed, the answer carries the
``HX-Trigger: gpuobs:new-cycle`` header and the page's ``#live-region`` fetches itself again
(``hx-select``), so the figures change without a reload. A cluster's pages poll that cluster's
fragment; the cluster list, many clusters on one page, polls the fleet's (the newest good cycle
of any cluster the reader may see)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from diagnosis.access import cycles_for_user, get_cluster_for_user
from diagnosis.models import Cluster, ClusterCycle

NEW_CYCLE_EVENT = "gpuobs:new-cycle"


def latest_good_cycle(request: HttpRequest, cluster: Cluster | None) -> ClusterCycle | None:
    """The newest good cycle the user may read, of ``cluster`` or (None) of every cluster they
    may read: what a live page compares against. The fleet's is the one stored last (the
    highest id): a new cycle of any cluster changes it, whatever each cluster's clock says."""
    good = cycles_for_user(request.user, cluster).filter(ok=True)
    good = good.only("id", "cluster_id", "as_of", "ran_at")
    if cluster is None:
        return good.order_by("-id").first()
    return good.order_by("-as_of", "-id").first()


def _status(request: HttpRequest, cluster: Cluster | None) -> HttpResponse:
    cycle = latest_good_cycle(request, cluster)
    response = render(
        request, "diagnosis/includes/live_status.html", {"cluster": cluster, "cycle": cycle}
    )
    shown = request.GET.get("cycle", "")
    if cycle is not None and shown != str(cycle.pk):
        response["HX-Trigger"] = NEW_CYCLE_EVENT
    return response


@require_safe
def live_status(request: HttpRequest, name: str) -> HttpResponse:
    """``?cycle=ID``: the cycle the page shows. Answers the "updated N s ago" line of the newest
    good cycle, and the new-cycle trigger when that is not the one the page shows."""
    return _status(request, get_cluster_for_user(request.user, name))


@require_safe
def fleet_live_status(request: HttpRequest) -> HttpResponse:
    """The same for the cluster list: ``?cycle=ID`` against the newest good cycle of any
    cluster the reader may see."""
    return _status(request, None)
