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
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import Model, Q, QuerySet
from django.db.models.fields.json import KeyTransform
from django.http import Http404
from django.utils.translation import gettext

from diagnosis.choices import JobState
from diagnosis.core.text import SUMMARY_TEXT_KEY, Text
from diagnosis.models import (
    ApiToken,
    Cluster,
    ClusterCycle,
    Finding,
    InboundClusterBatch,
    InboundKind,
    Incident,
    Job,
    JobForecast,
    Recommendation,
    RemediationPolicy,
    Tenant,
)
from diagnosis.roles import can_read, is_tenant_scoped
from diagnosis.rule_catalog import RULE_TEXT

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


def get_inbound_batch_for_sender(
    credential: object, cluster: str, batch_id: int
) -> InboundClusterBatch:
    """A received events or topology batch of ``cluster`` if the credential may send that kind
    there (:func:`clusters_for_sender`), else 404."""
    allowed = [
        kind
        for kind in InboundKind.values
        if clusters_for_sender(credential, kind).filter(name=cluster).exists()
    ]
    return _one_or_404(
        InboundClusterBatch.objects.filter(cluster__name=cluster, kind__in=allowed),
        "batch",
        pk=batch_id,
    )


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


def fleet_tenants_for_user(user: User) -> QuerySet[Tenant]:
    """The tenants of every cluster the user may read, as :func:`tenants_for_user` scopes them
    (the fleet's cross-cluster report)."""
    clusters = clusters_for_user(user)
    return _tenant_scoped(user, Tenant.objects.filter(cluster__in=clusters), "managers")


def get_tenant_for_user(user: User, cluster: Cluster, name: str) -> Tenant:
    """One tenant of the cluster by name, or 404 (also when it is someone else's)."""
    return _one_or_404(tenants_for_user(user, cluster), "tenant", name=name)


def jobs_for_user(user: User, cluster: Cluster) -> QuerySet[Job]:
    """The job records of a cluster the user may see (a manager: their tenants' jobs)."""
    return _tenant_scoped(user, Job.objects.filter(cluster=cluster), "tenant__managers")


def get_job_for_user(user: User, cluster: Cluster, external_id: str) -> Job:
    """One job of the cluster by the scheduler's id, or 404 (also another tenant's job)."""
    return _one_or_404(jobs_for_user(user, cluster), "job", external_id=external_id)


def forecasts_for_user(user: User, cluster: Cluster) -> QuerySet[JobForecast]:
    """The start-time forecasts of the pending jobs of a cluster the user may see (a manager:
    their tenants' jobs), with their jobs."""
    rows = JobForecast.objects.filter(cluster=cluster, job__state=JobState.PENDING)
    return _tenant_scoped(user, rows, "job__tenant__managers").select_related("job")


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

# A name in free text: a run of word characters, dots, dashes, colons and slashes
# ("research/research-tp", "gpu-100/3", "2026-11-29T08:00:00Z").
_NAME = re.compile(r"\w[\w.\-:/]*\w|\w")
# Free text's words that name nothing: a number with a fraction (a share), a date or a time.
_NO_NAME = re.compile(
    r"\d+\.\d+|\d{4}-\d\d-\d\d(T\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)?)?|\d\d:\d\d(:\d\d)?Z?"
)


class TextScope:
    """What a tenant-scoped manager may read by name in one cluster's texts (timelines, event
    reasons and messages, notes, summaries, subjects, evidence).

    First an allowlist, read once: their tenants' names and gpuobs's own rule ids. Every other
    word of a text is shown unless it is the name of another tenant of the cluster
    (:data:`HIDDEN_TENANT`) or the id or name of a job of the cluster's that is not one of
    theirs (:data:`HIDDEN_JOB`): looked up, with the jobs' tenants, for the words the texts hold
    (one query for each text with words not seen before), never by reading every job of a
    tenant (theirs: 3,000 jobs of 30 days read on every request before, issue #35) nor of the
    others. A word that names a job of theirs is shown, whatever other job it also names. Node
    names, states, numbers and plain words stay readable."""

    def __init__(
        self,
        cluster_id: int,
        shown: frozenset[str],
        tenants: frozenset[str],
        own_tenant_ids: frozenset[int],
    ) -> None:
        self.cluster_id = cluster_id
        self.shown = shown
        self.tenants = tenants  # the cluster's other tenants (few): a plain word may be one
        self.own_tenant_ids = own_tenant_ids
        self._known: dict[str, str] = {}  # word -> itself or its placeholder

    @classmethod
    def read(cls, user: User, cluster_id: int) -> TextScope:
        mine = dict(
            Tenant.objects.filter(cluster_id=cluster_id, managers=user).values_list("id", "name")
        )
        shown: set[str] = set(RULE_TEXT)  # gpuobs's own rule ids
        shown.update(mine.values())
        shown.discard("")
        every = Tenant.objects.filter(cluster_id=cluster_id).values_list("name", flat=True)
        return cls(cluster_id, frozenset(shown), frozenset(every) - shown, frozenset(mine))

    def _learn(self, words: set[str]) -> None:
        """Look the words not seen yet up among the cluster's jobs (ids and names)."""
        new = {w for w in words if w not in self._known}
        if not new:
            return
        jobs = Job.objects.filter(cluster_id=self.cluster_id)
        named = Q(external_id__in=new) | Q(name__in=new)
        own: set[str] = set()
        others: set[str] = set()
        rows = jobs.filter(named).values_list("external_id", "name", "tenant_id")
        for external_id, name, tenant_id in rows:
            names = own if tenant_id in self.own_tenant_ids else others
            names.update(word for word in (external_id, name) if word in new)
        for word in new:
            self._known[word] = HIDDEN_JOB if word in others and word not in own else word

    def _words(self, token: str) -> list[str]:
        """The words of one name that need a look-up: the name itself and, for "a/b", each
        part."""
        if token in self.shown or token in self.tenants or _NO_NAME.fullmatch(token):
            return []
        parts = [p for p in token.split("/") if p] if "/" in token else []
        return [token, *(w for p in parts for w in self._words(p))]

    def name(self, token: str) -> str:
        """One name as the manager may read it."""
        if token in self.shown:
            return token
        if token in self.tenants:
            return HIDDEN_TENANT
        if _NO_NAME.fullmatch(token):
            return token
        self._learn(set(self._words(token)))
        if self._known[token] != token or "/" not in token:
            return self._known[token]
        return "/".join(self.name(part) if part else part for part in token.split("/"))

    def learn(self, texts: Iterable[str]) -> None:
        """Look up every word of ``texts`` at once (one query for a page of them)."""
        self._learn(
            {w for text in texts if text for m in _NAME.finditer(text) for w in self._words(m[0])}
        )

    def text(self, text: str) -> str:
        """Free text with every name the manager may not read replaced."""
        self.learn([text])
        return _NAME.sub(lambda m: self.name(m.group(0)), text)

    def value(self, value: object) -> object:
        """A stored value (evidence, details) in any shape: strings as :meth:`text`; a record of
        another tenant's job (its ``tenant``, ``id`` or ``job`` hidden) is the placeholder."""
        self.learn(_strings(value))  # every word of it looked up at once
        return self._value(value)

    def _value(self, value: object) -> object:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self._value(item) for item in value]
        if isinstance(value, dict):
            if any(
                isinstance(value.get(key), str) and self.text(value[key]) != value[key]
                for key in ("tenant", "id", "job")
            ):
                return {"id": HIDDEN_JOB}
            return {
                self.text(key) if isinstance(key, str) else key: self._value(item)
                for key, item in value.items()
            }
        return value


def _strings(value: object) -> Iterator[str]:
    """Every string in a stored value, dictionary keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)


def scope_for_user(user: User, cluster_id: int) -> TextScope | None:
    """The :class:`TextScope` of a tenant-scoped manager in a cluster (read once per request:
    cached on the user object); None for everyone else, who reads every text whole."""
    if not is_tenant_scoped(user):
        return None
    cache = getattr(user, "_gpuobs_text_scope", None)
    if cache is None:
        cache = user._gpuobs_text_scope = {}
    if cluster_id not in cache:
        cache[cluster_id] = TextScope.read(user, cluster_id)
    return cache[cluster_id]


def prime_texts_for_user(user: User, cluster_id: int, texts: Iterable[str]) -> None:
    """Before a page shows many texts (a list's summaries, a timeline) through
    :func:`text_for_user`: their words looked up at once, not one query per text."""
    scope = scope_for_user(user, cluster_id)
    if scope is not None:
        scope.learn(texts)


def evidence_for_user(user: User, cluster_id: int, evidence: object) -> object:
    """A finding's evidence (or any stored record about jobs) as ``user`` may read it: whole for
    a reading role; for a tenant-scoped manager, through :class:`TextScope`. The summary's
    stored template (:data:`~diagnosis.core.text.SUMMARY_TEXT_KEY`) is no evidence: left out."""
    if isinstance(evidence, dict) and SUMMARY_TEXT_KEY in evidence:
        evidence = {k: v for k, v in evidence.items() if k != SUMMARY_TEXT_KEY}
    scope = scope_for_user(user, cluster_id)
    return evidence if scope is None else scope.value(evidence)


def stored_summary_text(finding: Any) -> Text | None:
    """The template and values a finding's summary was written from (docs/ui.md "Language"):
    kept aside by a page that scoped the evidence (``summary_text``), else in the evidence;
    None for a finding written before summaries had one."""
    kept = getattr(finding, "summary_text", None)
    if isinstance(kept, Text):
        return kept
    if isinstance(kept, dict):  # the list pages' annotation (:func:`with_summary_text`)
        return Text.from_json(kept)
    deferred = getattr(finding, "get_deferred_fields", None)
    if deferred is not None and "evidence" in deferred():
        return None  # never one query per finding: such a page annotates it
    evidence = getattr(finding, "evidence", None)
    return Text.from_json(evidence.get(SUMMARY_TEXT_KEY)) if isinstance(evidence, dict) else None


def with_summary_text(findings: QuerySet[Finding]) -> QuerySet[Finding]:
    """Findings whose evidence is deferred, with their summary's stored template annotated
    (``summary_text``) for :func:`summary_for_user`: read in the same query."""
    return findings.annotate(summary_text=KeyTransform(SUMMARY_TEXT_KEY, "evidence"))


def summary_for_user(user: User | None, cluster_id: int | None, finding: Any) -> str:
    """A finding's summary in the active language as ``user`` may read it: its template
    translated (``gettext``) with its values, each value through the manager's
    :class:`TextScope` as :func:`text_for_user` treats the stored English summary; that English
    summary when the finding has no template or the translation does not fit its values. No
    user or cluster (a page rendered without a request): the text whole, as today."""
    english = "" if getattr(finding, "summary", None) is None else str(finding.summary)
    scoped = user is not None and cluster_id is not None
    stored = stored_summary_text(finding)
    if stored is not None:
        scope = scope_for_user(user, cluster_id) if scoped else None
        if scope is not None:
            scope.learn(stored.strings())
            stored = stored.map_strings(scope.text)
        try:
            return stored.render(gettext)
        except (KeyError, ValueError, TypeError):
            pass
    return text_for_user(user, cluster_id, english) if scoped and english else english


def subject_for_user(user: User, cluster_id: int, subject: str) -> str:
    """A finding's subject (``job:…``, ``jobs:a+b``, ``tenant:…``) as ``user`` may read it: for
    a tenant-scoped manager, another tenant's job or tenant in it is the placeholder (which
    pages show as text, never as a link)."""
    prefix, sep, name = str(subject).partition(":")
    scope = scope_for_user(user, cluster_id)
    if not sep or scope is None:
        return subject
    parts = name.split("+") if prefix == "jobs" else [name]
    return f"{prefix}:" + "+".join(scope.name(part) for part in parts)


def text_for_user(user: User, cluster_id: int, text: str) -> str:
    """Free text about jobs (a finding's or an incident's summary, a timeline entry, a note, a
    scheduler event's reason or message) as ``user`` may read it: for a tenant-scoped manager,
    through :class:`TextScope`. The one filter of pages, API, CSV and PDF."""
    scope = scope_for_user(user, cluster_id)
    if not text or scope is None:
        return text
    return scope.text(str(text))


def incidents_for_user(user: User, cluster: Cluster) -> QuerySet[Incident]:
    """The incidents of a cluster the user may read (a manager: those that hit a job of one of
    their tenants, as ``details.jobs`` names it; the pages and the API then show them only
    their tenants' jobs and tenants, docs/ui.md "Incidents")."""
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
            # a job of unknown tenant (only its id known) is nobody's: never assumed theirs
            if (isinstance(tenants, list) and mine.intersection(map(str, tenants)))
            or any(isinstance(j, dict) and j.get("tenant") in mine for j in jobs or ())
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


def policies_for_user(user: User) -> QuerySet[RemediationPolicy]:
    """The remediation policies (docs/autopilot.md): like recommendations, they change
    cluster-wide settings, so a tenant-scoped manager (or a user with no role) sees none."""
    _require_login(user)
    if not can_read(user) or is_tenant_scoped(user):
        return RemediationPolicy.objects.none()
    return RemediationPolicy.objects.all()


def get_policy_for_user(user: User, policy_id: int) -> RemediationPolicy:
    """One remediation policy, or 404."""
    return _one_or_404(policies_for_user(user), "policy", pk=policy_id)
