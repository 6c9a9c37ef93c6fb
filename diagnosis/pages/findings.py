"""The findings pages: the list (filtered, paginated; its body cached per data version and
reader, diagnosis/pages/support/page_cache.py) and one finding with its evidence, history,
incidents and
recommendations, as the reader may see them."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import (
    Case,
    IntegerField,
    Q,
    QuerySet,
    Value,
    When,
)
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_safe

from diagnosis.access import (
    cycles_for_user,
    evidence_for_user,
    findings_for_user,
    get_cluster_for_user,
    get_finding_for_user,
    incidents_for_user,
    prime_texts_for_user,
    recommendations_for_user,
    stored_summary_text,
    subject_for_user,
    with_summary_text,
)
from diagnosis.actions.notify.owner_notices import preview_notice
from diagnosis.choices import FindingState, Severity
from diagnosis.core.rules.base import SEVERITIES
from diagnosis.core.rules.registry import all_rules
from diagnosis.models import Cluster, Finding
from diagnosis.pages.clusters import OPEN_STATES, cluster_url
from diagnosis.pages.live import latest_good_cycle
from diagnosis.pages.support import page_cache
from diagnosis.pages.support.pagination import paginate

STATE_FILTERS = {
    "open": gettext_lazy("Open (pending or firing)"),
    "firing": gettext_lazy("Firing"),
    "pending": gettext_lazy("Pending"),
    "resolved": gettext_lazy("Resolved"),
    "all": gettext_lazy("Any state"),
}
FINDINGS_PER_PAGE = 50

SEVERITY_RANK = Case(
    *(When(severity=s, then=Value(i)) for i, s in enumerate(SEVERITIES)),
    default=Value(len(SEVERITIES)),
    output_field=IntegerField(),
)
STATE_RANK = Case(
    When(state=FindingState.FIRING, then=Value(0)),
    When(state=FindingState.PENDING, then=Value(1)),
    default=Value(2),
    output_field=IntegerField(),
)


# -- findings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FindingFilter:
    """The findings list's filters, parsed from the query string. Unknown severities and states
    fall back to no filter and ``open``; an unknown rule or pool simply matches nothing."""

    rules: tuple[str, ...] = ()
    severities: tuple[str, ...] = ()
    state: str = "open"
    pool: str = ""

    @classmethod
    def parse(cls, query: QueryDict) -> FindingFilter:
        state = query.get("state") or "open"
        return cls(
            rules=tuple(r for r in query.getlist("rule") if r),
            severities=tuple(s for s in query.getlist("severity") if s in Severity.values),
            state=state if state in STATE_FILTERS else "open",
            pool=(query.get("pool") or "").strip(),
        )

    def apply(self, findings: QuerySet[Finding]) -> QuerySet[Finding]:
        if self.rules:
            findings = findings.filter(rule_id__in=self.rules)
        if self.severities:
            findings = findings.filter(severity__in=self.severities)
        if self.state == "open":
            findings = findings.filter(state__in=OPEN_STATES)
        elif self.state != "all":
            findings = findings.filter(state=self.state)
        if self.pool:
            # The pool's own findings (subject pool:<p>) and those whose evidence names the pool
            # (the job rules, gang-deadlock, fragmentation). GPU and node findings (xid) carry no
            # pool and never match a pool filter.
            findings = findings.filter(Q(subject=f"pool:{self.pool}") | Q(evidence__pool=self.pool))
        return findings

    @property
    def active(self) -> bool:
        return bool(self.rules or self.severities or self.pool or self.state != "open")


@require_safe
def finding_list(request: HttpRequest, name: str) -> HttpResponse:
    """The findings of a cluster, filtered by rule, severity, state and pool, paginated. The
    body is cached per data version, reader's scope and query
    (diagnosis/pages/support/page_cache.py)."""
    cluster = get_cluster_for_user(request.user, name)
    body = page_cache.cached_fragments(
        "findings", request, cluster, lambda: {"body": _finding_list_body(request, cluster)}
    )
    context = {
        "cluster": cluster,
        "section": "findings",
        "good": latest_good_cycle(request, cluster),  # the live status line (docs/ui.md)
        **body,
    }
    return render(request, "diagnosis/finding_list.html", context)


def _finding_list_body(request: HttpRequest, cluster: Cluster) -> SafeString:
    rules = all_rules()
    filters = FindingFilter.parse(request.GET)
    findings = with_summary_text(
        filters.apply(findings_for_user(request.user, cluster)).defer("evidence")
    ).order_by(SEVERITY_RANK, STATE_RANK, "-last_seen", "-id")
    page, query = paginate(request, findings, FINDINGS_PER_PAGE)
    page.object_list = list(page.object_list)
    prime_texts_for_user(
        request.user,
        cluster.pk,
        [t for f in page.object_list for t in (f.subject.partition(":")[2], f.summary)],
    )
    for finding in page.object_list:  # names linked to their pages (links.subject_link)
        finding.subject_shown = subject_for_user(request.user, cluster.pk, finding.subject)
    pools = (
        cycles_for_user(request.user, cluster)
        .filter(ok=True)
        .order_by("-as_of", "-id")
        .values_list("accounting__pools", flat=True)
        .first()
    )
    pool_names = sorted({p["pool"] for p in pools or () if p.get("pool")} | {filters.pool} - {""})
    context = {
        "cluster": cluster,
        "page": page,
        "query": query,
        "filters": filters,
        "rules": rules,
        "rule_choices": sorted(set(rules) | set(filters.rules)),
        "severities": SEVERITIES,
        "state_choices": STATE_FILTERS,
        "pool_choices": pool_names,
    }
    return render_to_string("diagnosis/includes/finding_list_body.html", context, request)


@require_safe
def finding_detail(request: HttpRequest, name: str, finding_id: int) -> HttpResponse:
    """One finding: summary, evidence, history and the rule's documentation."""
    cluster = get_cluster_for_user(request.user, name)
    finding = get_finding_for_user(request.user, cluster, finding_id)
    finding.summary_text = stored_summary_text(finding)  # before the evidence is scoped
    finding.evidence = evidence_for_user(request.user, cluster.pk, finding.evidence)  # shown only
    finding.subject = subject_for_user(request.user, cluster.pk, finding.subject)  # shown only
    context = {
        "cluster": cluster,
        "section": "incidents" if finding.rule_id == "xid" else "findings",
        "finding": finding,
        "events": list(finding.events.all()),
        "rule": all_rules().get(finding.rule_id),
        "rule_findings_url": cluster_url("findings", cluster, {"rule": finding.rule_id}),
        # what the job's owner would be told (docs/integrations.md, "Notices to job owners")
        "owner_notice": preview_notice(finding) if finding.subject.startswith("job:") else None,
        # where a person clicks next (issue #16): its incidents and recommendations
        "incidents": list(incidents_for_user(request.user, cluster).filter(finding=finding))
        if finding.rule_id == "xid"
        else [],
        "recommendations": list(
            recommendations_for_user(request.user, cluster).filter(motivating_findings=finding)
        ),
    }
    return render(request, "diagnosis/finding_detail.html", context)
