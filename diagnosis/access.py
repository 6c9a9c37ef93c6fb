"""Access-checked reads: the only way pages, the API and exports reach cluster-scoped rows.

A view never calls ``Model.objects.get`` on a cluster-scoped model itself (STYLE.md habit 6); it
asks one of these helpers, which answer 404 for what does not exist *or* may not be seen, so a
URL never tells an outsider which clusters, tenants or jobs exist.

Who reads what (the roles of docs/architecture.md#roles-and-security, ``diagnosis.roles``;
docs/fairness.md):

- no role: nothing (no cluster, so every cluster page is a 404 and every list is empty);
- ``viewer``, ``sre``, ``oncall``, ``admin``: every cluster and everything in it;
- a ``manager`` and nothing more (:func:`~diagnosis.roles.is_tenant_scoped`): the clusters where
  they manage a tenant, and there only the rows of their tenants (``Tenant.managers``):
  the tenants themselves, their jobs, the findings whose ``tenant`` is theirs (a job's, a set of
  jobs all of theirs, an Xid on a GPU only their jobs hold, ``tenant:``), the incidents whose
  jobs are all theirs, and their rows of the fairness report. Findings about a pool, node or the
  whole cluster concern every tenant there and are not shown to a manager; the cluster-wide
  figures (capacity, utilization, the GPU-hour breakdown of the cluster) are.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404

from diagnosis.models import (
    ApiToken,
    Cluster,
    ClusterCycle,
    Finding,
    Incident,
    Job,
    Recommendation,
    Tenant,
)
from diagnosis.roles import can_read, is_tenant_scoped

User = AbstractBaseUser | AnonymousUser
M = TypeVar("M", bound=Model)


def _require_login(user: User) -> None:
    # LoginRequiredMiddleware already sends anonymous visitors to the login page; this is the
    # second lock on the same door, for any caller that bypasses the middleware.
    if not user.is_authenticated:
        raise PermissionDenied("log in to read clusters")


def _one_or_404(rows: QuerySet[M], what: str, **lookup: Any) -> M:
    """The one row of ``rows`` that ``lookup`` names, or a 404 saying there is no such ``what``
    (the same answer whether it does not exist or the user may not see it)."""
    try:
        return rows.get(**lookup)
    except rows.model.DoesNotExist:
        raise Http404(f"no such {what}") from None


def _managed_tenants(user: User) -> QuerySet[Tenant]:
    return Tenant.objects.filter(managers=user)


def clusters_for_user(user: User) -> QuerySet[Cluster]:
    """The clusters a user may read: every cluster for a reading role, the clusters of their
    tenants for a tenant-scoped manager, none without a role."""
    _require_login(user)
    if not can_read(user):
        return Cluster.objects.none()
    if is_tenant_scoped(user):
        return Cluster.objects.filter(pk__in=_managed_tenants(user).values("cluster_id"))
    return Cluster.objects.all()


def get_cluster_for_user(user: User, name: str) -> Cluster:
    """The cluster called ``name``, or 404 when there is none the user may read."""
    return _one_or_404(clusters_for_user(user), "cluster", name=name)


def clusters_for_sender(credential: object, kind: str) -> QuerySet[Cluster]:
    """The clusters a machine credential may write ``kind`` to (a
    :class:`~diagnosis.choices.SenderKind`: topology, events, alerts): those its hashed API
    token names, when the token names the kind (``manage.py api_token create --cluster C --kind
    K``). Any other credential (a session, a plain DRF token, a staff or superuser account, a
    model permission) writes nowhere (docs/integrations.md#senders-are-scoped)."""
    if not isinstance(credential, ApiToken) or not credential.may_send(kind):
        return Cluster.objects.none()
    return credential.clusters.all()


def get_cluster_for_sender(credential: object, name: str, kind: str) -> Cluster:
    """The cluster called ``name`` if the credential may write ``kind`` to it, else 404."""
    return _one_or_404(clusters_for_sender(credential, kind), "cluster", name=name)


def cycles_for_user(user: User, cluster: Cluster | None = None) -> QuerySet[ClusterCycle]:
    """The stored diagnosis cycles (cluster-wide rollups) of one cluster, or of every cluster the
    user may read (``cluster=None``). ``cluster`` must come from :func:`get_cluster_for_user`."""
    if cluster is None:
        return ClusterCycle.objects.filter(cluster__in=clusters_for_user(user))
    _require_login(user)
    if not can_read(user):
        return ClusterCycle.objects.none()
    return ClusterCycle.objects.filter(cluster=cluster)


def _tenant_scoped(user: User, rows: QuerySet, managers_lookup: str) -> QuerySet:
    """``rows`` as the user may read them: none without a reading role; for a tenant-scoped
    manager, those whose ``managers_lookup`` names them."""
    _require_login(user)
    if not can_read(user):
        return rows.none()
    if is_tenant_scoped(user):
        return rows.filter(**{managers_lookup: user})
    return rows


def tenants_for_user(user: User, cluster: Cluster) -> QuerySet[Tenant]:
    """The tenants of a cluster the user may see: all for a reading role, their own for a
    tenant-scoped manager."""
    return _tenant_scoped(user, Tenant.objects.filter(cluster=cluster), "managers")


def get_tenant_for_user(user: User, cluster: Cluster, name: str) -> Tenant:
    """One tenant of the cluster by name, or 404 (also when it is someone else's)."""
    return _one_or_404(tenants_for_user(user, cluster), "tenant", name=name)


def jobs_for_user(user: User, cluster: Cluster) -> QuerySet[Job]:
    """The job records of a cluster the user may see (a manager: their tenants' jobs)."""
    return _tenant_scoped(user, Job.objects.filter(cluster=cluster), "tenant__managers")


def get_job_for_user(user: User, cluster: Cluster, external_id: str) -> Job:
    """One job of the cluster by the scheduler's id, or 404 (also another tenant's job)."""
    return _one_or_404(jobs_for_user(user, cluster), "job", external_id=external_id)


def findings_for_user(user: User, cluster: Cluster) -> QuerySet[Finding]:
    """Every finding of a cluster the user may read, in any state (a manager: those whose
    ``tenant`` is one of theirs)."""
    return _tenant_scoped(user, Finding.objects.filter(cluster=cluster), "tenant__managers")


def get_finding_for_user(user: User, cluster: Cluster, finding_id: int) -> Finding:
    """One finding of the cluster, or 404 (also when the id belongs to another cluster or to a
    tenant the user may not see)."""
    return _one_or_404(findings_for_user(user, cluster), "finding", pk=finding_id)


HIDDEN_JOB = "(another tenant's job)"
HIDDEN_TENANT = "(another tenant)"


def _evidence_scope(user: User, cluster_id: int) -> tuple[frozenset[str], frozenset[str]]:
    """The job ids and tenant names of ``cluster`` a tenant-scoped user may not see (cached on
    the user object for the request)."""
    cache = getattr(user, "_gpuobs_evidence_scope", None)
    if cache is None:
        cache = user._gpuobs_evidence_scope = {}
    if cluster_id not in cache:
        tenants = Tenant.objects.filter(cluster_id=cluster_id).exclude(managers=user)
        jobs = Job.objects.filter(cluster_id=cluster_id).exclude(tenant__managers=user)
        cache[cluster_id] = (
            frozenset(jobs.values_list("external_id", flat=True)),
            frozenset(tenants.values_list("name", flat=True)),
        )
    return cache[cluster_id]


def _redact(value: object, jobs: frozenset[str], tenants: frozenset[str]) -> object:
    if isinstance(value, str):
        return HIDDEN_JOB if value in jobs else HIDDEN_TENANT if value in tenants else value
    if isinstance(value, list):
        return [_redact(item, jobs, tenants) for item in value]
    if isinstance(value, dict):
        if value.get("tenant") in tenants or value.get("id") in jobs or value.get("job") in jobs:
            return {"id": HIDDEN_JOB}
        return {key: _redact(item, jobs, tenants) for key, item in value.items()}
    return value


def evidence_for_user(user: User, cluster_id: int, evidence: object) -> object:
    """A finding's evidence as ``user`` may read it: whole for a reading role; for a
    tenant-scoped manager, every job and tenant of someone else replaced by a placeholder,
    in any shape the rules give it (a job's record, an id in a list, a tenant's name)."""
    if not is_tenant_scoped(user):
        return evidence
    jobs, tenants = _evidence_scope(user, cluster_id)
    return _redact(evidence, jobs, tenants)


def subject_for_user(user: User, cluster_id: int, subject: str) -> str:
    """A finding's subject (``job:…``, ``jobs:a+b``, ``tenant:…``) as ``user`` may read it: for
    a tenant-scoped manager, another tenant's job or tenant in it is the placeholder (which
    pages show as text, never as a link)."""
    prefix, sep, name = str(subject).partition(":")
    if not sep or not is_tenant_scoped(user):
        return subject
    jobs, tenants = _evidence_scope(user, cluster_id)
    parts = name.split("+") if prefix == "jobs" else [name]
    return f"{prefix}:" + "+".join(str(_redact(part, jobs, tenants)) for part in parts)


_NAME = re.compile(r"\w[\w.\-/]*\w|\w")


def text_for_user(user: User, cluster_id: int, text: str) -> str:
    """Free text a rule or the cycle wrote about jobs (a finding's or an incident's summary) as
    ``user`` may read it: for a tenant-scoped manager, each name in it that is another tenant's
    job or tenant becomes the placeholder."""
    if not text or not is_tenant_scoped(user):
        return text
    jobs, tenants = _evidence_scope(user, cluster_id)
    return _NAME.sub(lambda m: str(_redact(m.group(0), jobs, tenants)), str(text))


def incidents_for_user(user: User, cluster: Cluster) -> QuerySet[Incident]:
    """The incidents of a cluster the user may read (a manager: those whose jobs are all of their
    tenants, as ``details.tenants`` lists them, and none of unknown tenant)."""
    _require_login(user)
    if not can_read(user):
        return Incident.objects.none()
    incidents = Incident.objects.filter(cluster=cluster)
    if is_tenant_scoped(user):
        mine = set(tenants_for_user(user, cluster).values_list("name", flat=True))
        visible = [
            pk
            for pk, tenants, jobs in incidents.values_list(
                "pk", "details__tenants", "details__jobs"
            )
            if isinstance(tenants, list)
            and tenants
            and set(tenants) <= mine
            # a job of unknown tenant (only its id known) is nobody's: never assumed theirs
            and all(isinstance(j, dict) and j.get("tenant") for j in jobs or ())
        ]
        incidents = incidents.filter(pk__in=visible)
    return incidents


def get_incident_for_user(user: User, cluster: Cluster, incident_id: int) -> Incident:
    """One incident of the cluster, or 404."""
    return _one_or_404(incidents_for_user(user, cluster), "incident", pk=incident_id)


def recommendations_for_user(
    user: User, cluster: Cluster | None = None
) -> QuerySet[Recommendation]:
    """The recommendations of one cluster, or of every cluster the user may read
    (``cluster=None``). They change cluster-wide settings (placement, queue weights, drains), so
    a tenant-scoped manager sees none. ``cluster`` must come from :func:`get_cluster_for_user`."""
    _require_login(user)
    if not can_read(user) or is_tenant_scoped(user):
        return Recommendation.objects.none()
    if cluster is None:
        return Recommendation.objects.filter(cluster__in=clusters_for_user(user))
    return Recommendation.objects.filter(cluster=cluster)


def get_recommendation_for_user(
    user: User, cluster: Cluster | None, recommendation_id: int
) -> Recommendation:
    """One recommendation (of ``cluster``, when given), or 404."""
    return _one_or_404(
        recommendations_for_user(user, cluster).select_related("cluster"),
        "recommendation",
        pk=recommendation_id,
    )
