"""Access-checked reads: the only way pages (and later the API) reach cluster-scoped rows.

A view never calls ``Model.objects.get`` on a cluster-scoped model itself (STYLE.md habit 6); it
asks one of these helpers, which answer 404 for what does not exist *or* may not be seen, so a
URL never tells an outsider which clusters exist. For now every logged-in user may read every
cluster; the roles of DESIGN.md section 10 (viewer, sre, oncall, manager, admin) will narrow
these helpers, and only these helpers.
"""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from diagnosis.models import Cluster, ClusterCycle, Finding

User = AbstractBaseUser | AnonymousUser


def _require_login(user: User) -> None:
    # LoginRequiredMiddleware already sends anonymous visitors to the login page; this is the
    # second lock on the same door, for any caller that bypasses the middleware.
    if not user.is_authenticated:
        raise PermissionDenied("log in to read clusters")


def clusters_for_user(user: User) -> QuerySet[Cluster]:
    """The clusters a user may read (every cluster, for any logged-in user, for now)."""
    _require_login(user)
    return Cluster.objects.all()


def get_cluster_for_user(user: User, name: str) -> Cluster:
    """The cluster called ``name``, or 404 when there is none the user may read."""
    try:
        return clusters_for_user(user).get(name=name)
    except Cluster.DoesNotExist:
        raise Http404("no such cluster") from None


def cycles_for_user(user: User, cluster: Cluster | None = None) -> QuerySet[ClusterCycle]:
    """The stored diagnosis cycles (rollups) of one cluster, or of every cluster the user may
    read (``cluster=None``)."""
    if cluster is None:
        return ClusterCycle.objects.filter(cluster__in=clusters_for_user(user))
    _require_login(user)
    return ClusterCycle.objects.filter(cluster=cluster)


def findings_for_user(user: User, cluster: Cluster) -> QuerySet[Finding]:
    """Every finding of a cluster the user may read, in any state."""
    _require_login(user)
    return Finding.objects.filter(cluster=cluster)


def get_finding_for_user(user: User, cluster: Cluster, finding_id: int) -> Finding:
    """One finding of the cluster, or 404 (also when the id belongs to another cluster)."""
    try:
        return findings_for_user(user, cluster).get(pk=finding_id)
    except Finding.DoesNotExist:
        raise Http404("no such finding") from None
