"""Where a user lands after logging in, and what the menu offers them (docs/ui.md "Menus").

The menu shows only what the user's roles can use (``diagnosis.roles``): a tenant-scoped
manager reads the overview's cluster-wide figures, their tenants' findings, the incidents that
hit their tenants' jobs and the fairness report, never recommendations (``diagnosis.access``
hides every row of those from them, so the page would be empty). The pages still check access
themselves: the menu is a courtesy, not the lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_safe

from diagnosis.access import clusters_for_user
from diagnosis.roles import can_administer, can_read, is_tenant_scoped

User = AbstractBaseUser | AnonymousUser


def _reads_whole_cluster(user: User) -> bool:
    return can_read(user) and not is_tenant_scoped(user)


@dataclass(frozen=True)
class MenuItem:
    """One entry of a cluster's menu: the page's ``section`` (what a view puts in its context
    to mark the entry current), its label, its URL name (taking the cluster's name) and who
    sees it."""

    section: str
    label: Any  # a lazy translation
    url_name: str
    shown_to: Callable[[User], bool]


CLUSTER_MENU: tuple[MenuItem, ...] = (
    MenuItem("findings", _("Findings"), "diagnosis:findings", can_read),
    # issue 19, items 1-3: hardware, queues, jobs (a manager: their tenants' queues and jobs)
    MenuItem("nodes", _("Nodes"), "diagnosis:nodes", can_read),
    MenuItem("queues", _("Queues"), "diagnosis:queues", can_read),
    MenuItem("jobs", _("Jobs"), "diagnosis:jobs", can_read),
    MenuItem("incidents", _("Incidents"), "diagnosis:incidents", can_read),
    MenuItem(
        "recommendations", _("Recommendations"), "diagnosis:recommendations", _reads_whole_cluster
    ),
    MenuItem("fairness", _("Fairness"), "diagnosis:fairness", can_read),
)


# the entries the cluster list links beside each cluster's name
CLUSTER_LIST_LINKS = ("findings", "incidents", "fairness")


def menu(request: HttpRequest) -> dict[str, Any]:
    """Context processor: ``cluster_menu`` (the entries this user may use), ``cluster_links``
    (those of them the cluster list shows per cluster), ``admin_menu`` (whether the Admin
    link shows: the admin site lets only staff in) and ``people_menu`` (the admin role's People
    page)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {
            "cluster_menu": (),
            "cluster_links": (),
            "admin_menu": False,
            "people_menu": False,
            "autopilot_menu": False,
        }
    items = tuple(item for item in CLUSTER_MENU if item.shown_to(user))
    return {
        "cluster_menu": items,
        "cluster_links": tuple(item for item in items if item.section in CLUSTER_LIST_LINKS),
        "admin_menu": user.is_staff,
        "people_menu": can_administer(user),  # diagnosis/pages/people.py
        "autopilot_menu": _reads_whole_cluster(user),  # diagnosis/pages/autopilot.py
    }


def landing_url(user: User) -> str:
    """A tenant-scoped manager's first page is their tenants' fairness report (in the first of
    their clusters, by name); everyone else starts at the cluster list."""
    if is_tenant_scoped(user):
        first = clusters_for_user(user).order_by("name").values_list("name", flat=True).first()
        if first is not None:
            return reverse("diagnosis:fairness", args=[first])
    return resolve_url("diagnosis:cluster_list")


@require_safe
def landing(request: HttpRequest) -> HttpResponseRedirect:
    """``LOGIN_REDIRECT_URL``: after a login without ``?next=``, the page the role starts at."""
    return HttpResponseRedirect(landing_url(request.user))
