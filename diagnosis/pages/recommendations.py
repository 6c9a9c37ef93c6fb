"""Pages of the recommendation workflow: a cluster's recommendations, one recommendation (its
change and the scheduler's dry-run diff, the simulated impact, verification, the audit trail and
the buttons its reader may press), the workflow's form posts and the cluster's write switch.

Thin like every view: reads through ``diagnosis.access``, writes through ``diagnosis.workflow``.
A post the reader's role does not allow is a 403; one the recommendation's state does not allow
comes back to the page with the reason. See docs/recommendations.md, "Workflow".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _lazy
from django.views.decorators.http import require_POST, require_safe

from diagnosis import roles
from diagnosis.access import (
    get_cluster_for_user,
    get_recommendation_for_user,
    incidents_for_user,
    recommendations_for_user,
)
from diagnosis.actions.upkeep.health import database_now
from diagnosis.actions.workflow.apply import apply_stuck_since, recheck_apply
from diagnosis.actions.workflow.base import (
    APPLIED_STATES,
    OPEN_STATES,
    ApplyNotSent,
    HarmNotConfirmed,
    WorkflowDenied,
    WorkflowError,
)
from diagnosis.actions.workflow.outcome import outcome_of
from diagnosis.actions.workflow.review import (
    approve_recommendation,
    awaiting_approval_by,
    predicted_harm,
    reject_recommendation,
    request_apply,
    request_dry_run,
    request_recommendation,
    request_rollback,
    set_cluster_writes,
)
from diagnosis.charts.figures import embed, recommendation_impact
from diagnosis.choices import RecommendationKind, RecommendationState
from diagnosis.core.recommend.impact import format_delta, format_value
from diagnosis.core.vocabulary import parse_time
from diagnosis.models import AuditEntry, Recommendation
from diagnosis.pages.support.cluster_clock import ClusterClock
from diagnosis.pages.support.pagination import paginate
from diagnosis.pages.support.recommendation_rows import list_rows
from diagnosis.reports.pricing import money_at_stake

State = RecommendationState
PER_PAGE = 50
AWAITING = "awaiting"  # the state filter "awaiting my approval": requests the reader may approve
STATE_FILTERS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "open": (_lazy("Open (proposed, approved, applying)"), OPEN_STATES),
    "applied": (_lazy("Applied or verified"), APPLIED_STATES),
    "closed": (
        _lazy("Closed"),
        (
            State.ROLLED_BACK,
            State.FAILED,
            State.REJECTED,
            State.EXPIRED,
            State.SUPERSEDED,
        ),
    ),
    "all": (_lazy("Any state"), tuple(State.values)),
}


@dataclass(frozen=True)
class Button:
    action: str  # the URL's action name
    label: str
    style: str = ""  # "primary", "danger" or ""
    note: str = ""


def available_actions(rec: Recommendation, user: AbstractBaseUser) -> list[Button]:
    """The workflow buttons ``user`` may press on ``rec`` now (the actions check again)."""
    has_change = rec.kind != RecommendationKind.ADVISORY and bool(rec.change)
    may_act = roles.can_apply(user, rec.kind)
    buttons: list[Button] = []
    if rec.state == State.PROPOSED and has_change:
        if rec.requested_by_id is None and may_act:
            buttons.append(Button("request", "Request this change", "primary"))
        # Nobody asked yet: approving counts as the approver's own request (on-call drains).
        requester = rec.requested_by if rec.requested_by_id is not None else user
        if roles.can_approve(user, rec.kind, requester)[0]:
            buttons.append(Button("approve", "Approve", "primary"))
    if rec.state == State.APPROVED and may_act:
        note = "" if not rec.cluster.dry_run else "writes are off for this cluster: a dry run only"
        buttons.append(Button("apply", "Apply", "primary", note))
    if rec.state in (State.PROPOSED, State.APPROVED) and has_change and may_act:
        buttons.append(Button("dry-run", "Dry run"))
    if rec.state in (State.PROPOSED, State.APPROVED) and may_act:
        buttons.append(Button("reject", "Dismiss" if not has_change else "Reject", "danger"))
    if rec.state in APPLIED_STATES and has_change and rec.rollback_of_id is None and may_act:
        buttons.append(Button("rollback", "Roll back", "danger"))
    stuck_since = apply_stuck_since(rec, database_now()) if rec.state == State.APPLYING else None
    if stuck_since is not None and may_act:  # issue #18: a dead worker's or a lost apply
        note = (
            f"stuck in applying since {stuck_since:%Y-%m-%d %H:%M:%S} UTC (its worker died or no "
            "worker took it); gpuobs re-checks by itself every cycle period: the target is "
            "read again first, so nothing is written twice"
        )
        buttons.append(Button("re-check", "Re-check", "primary", note))
    return buttons


def _detail_url(rec: Recommendation) -> str:
    return reverse(
        "diagnosis:recommendation", kwargs={"name": rec.cluster.name, "recommendation_id": rec.pk}
    )


@require_safe
def recommendation_list(request: HttpRequest, name: str) -> HttpResponse:
    """A cluster's recommendations, open ones first by default, with the write switch: open
    ones ranked by what is at stake, one-pod advice grouped (``support.recommendation_rows``);
    the others newest first, a page read at a time."""
    cluster = get_cluster_for_user(request.user, name)
    state = request.GET.get("state") or "open"
    if state not in STATE_FILTERS and state != AWAITING:
        state = "open"
    readable = recommendations_for_user(request.user, cluster)
    awaiting = awaiting_approval_by(request.user, readable)
    chosen = awaiting if state == AWAITING else readable.filter(state__in=STATE_FILTERS[state][1])
    recommendations = chosen.select_related("requested_by", "approved_by").order_by(
        "-created_at", "-id"
    )
    if state in ("open", AWAITING):  # few: ranked and grouped as a whole
        page, query = paginate(request, list_rows(recommendations, rank=True), PER_PAGE)
    else:
        page, query = paginate(request, recommendations, PER_PAGE)
        page.object_list = list_rows(page.object_list, rank=False)
    context = {
        "cluster": cluster,
        "section": "recommendations",
        "page": page,
        "query": query,
        "state": state,
        "state_choices": {
            AWAITING: "Awaiting my approval",
            **{k: label for k, (label, _) in STATE_FILTERS.items()},
        },
        "awaiting_count": awaiting.count(),
        "can_administer": roles.can_administer(request.user),
    }
    return render(request, "diagnosis/recommendation_list.html", context)


def _diff_rows(before: Any, after: Any) -> list[tuple[str, Any, Any]]:
    """``(field, before, after)`` rows of a change: one per key of a record, else one row."""
    if isinstance(before, Mapping) or isinstance(after, Mapping):
        before = before if isinstance(before, Mapping) else {}
        after = after if isinstance(after, Mapping) else {}
        return [(str(k), before.get(k), after.get(k)) for k in dict.fromkeys([*before, *after])]
    return [("value", before, after)]


def _impact_rows(
    impact: Mapping[str, Any], effect: Mapping[str, Any] | None = None
) -> list[dict[str, str]]:
    """The simulated metrics as the table under the chart shows them (means over the seeds),
    each with what the cycles since the apply measured of it (``effect``; empty: not measured)."""
    effect = effect or {}
    rows = []
    for row in impact.get("metrics") or ():
        unit = str(row.get("unit"))
        try:
            rows.append(
                {
                    "label": gettext(str(row.get("label") or row.get("metric"))),
                    "subject": str(row.get("subject")),
                    "current": format_value(row["current"]["mean"], unit),
                    "proposed": format_value(row["proposed"]["mean"], unit),
                    "delta": format_delta(row["delta"]["mean"], unit),
                    "verdict": str(row.get("verdict")),
                    "measured": _measured(
                        effect.get(f"{row.get('metric')} {row.get('subject')}"), unit
                    ),
                }
            )
        except (KeyError, TypeError, ValueError):
            continue
    return rows


def _measured(seen: Mapping[str, Any] | None, unit: str) -> str:
    """A measured mean over the cycles since the apply, with their count (empty: none)."""
    if not seen or not seen.get("cycles"):
        return ""
    return f"{format_value(float(seen['mean']), unit)} ({int(seen['cycles'])})"


# The figures of a static impact (no replay: a gang release's), in this order; the rest of the
# impact (its verdict, headline, basis, the generator's id) the page shows elsewhere or not.
STATIC_IMPACT_FIGURES = (
    "gpus_released",
    "gpus_unblocked",
    "gpus_involved",
    "idle_gpu_hours_at_most",
)


def _static_figures(impact: Mapping[str, Any]) -> dict[str, Any]:
    if impact.get("method") != "static":
        return {}
    return {key: impact[key] for key in STATIC_IMPACT_FIGURES if key in impact}


def _moment(iso: Any) -> datetime | None:
    """A stored RFC 3339 time as a datetime the page writes in the reader's zone."""
    return parse_time(str(iso)) if iso else None


def _wall_moments(rec: Recommendation) -> list[datetime | None]:
    """The recommendation's wall-clock moments (people's steps, the apply, the dry run)."""
    dry = _moment((rec.dry_run_result or {}).get("at"))
    return [rec.created_at, rec.requested_at, rec.approved_at, rec.expires_at, rec.applied_at, dry]


@require_safe
def recommendation_detail(request: HttpRequest, name: str, recommendation_id: int) -> HttpResponse:
    """One recommendation: what and why, the diff, the impact, verification, audit, buttons."""
    cluster = get_cluster_for_user(request.user, name)
    rec = get_recommendation_for_user(request.user, cluster, recommendation_id)
    impact = rec.impact or {}
    figure = recommendation_impact(impact)
    dry = rec.dry_run_result or {}
    applied = rec.apply_result or {}
    buttons = available_actions(rec, request.user)
    harm = predicted_harm(rec) if any(b.action == "approve" for b in buttons) else []
    audit = list(AuditEntry.objects.filter(recommendation=rec).order_by("time", "id"))
    context = {
        "cluster": cluster,
        "section": "recommendations",
        "rec": rec,
        "impact": impact,
        "impact_chart": (
            embed(
                figure,
                "impact-chart",
                label="Simulated impact: current and proposed setting per metric (the table "
                "below lists them)",
            )
            if figure is not None
            else None
        ),
        "proposed_diff": _diff_rows(rec.change.get("from"), rec.change.get("to")),
        "dry_run": dry,
        "dry_run_diff": _diff_rows(dry.get("before"), dry.get("after")) if dry else [],
        "applied": applied,
        "applied_diff": (
            _diff_rows(applied.get("before"), applied.get("after")) if applied else []
        ),
        "verification": rec.verification or {},
        "findings": list(rec.motivating_findings.order_by("rule_id", "subject")),
        "incidents": list(  # issue #16: recommendation -> incident
            incidents_for_user(request.user, cluster)
            .filter(Q(drain=rec) | Q(finding__recommendations=rec))
            .distinct()
        ),
        "static_figures": _static_figures(impact),
        "impact_rows": _impact_rows(impact, (rec.verification or {}).get("effect")),
        "stake": money_at_stake(cluster, impact),  # docs/accounting.md "Cost"
        "impact_as_of": _moment((impact.get("estimate") or {}).get("snapshot_as_of")),
        "reestimating_as_of": _moment((impact.get("reestimating") or {}).get("snapshot_as_of")),
        "dry_run_at": _moment(dry.get("at")),
        "audit": audit,
        "clock": ClusterClock.around(cluster, [*_wall_moments(rec), *(e.time for e in audit)]),
        "rollbacks": list(rec.rollbacks.order_by("-created_at")),
        "buttons": buttons,
        "confirm_harm": harm if request.GET.get("confirm") == "harm" else [],
        "can_administer": roles.can_administer(request.user),
    }
    return render(request, "diagnosis/recommendation_detail.html", context)


ACTIONS = {
    "request": request_recommendation,
    "approve": approve_recommendation,
    "dry-run": request_dry_run,
    "apply": request_apply,
    "re-check": recheck_apply,
}


@require_POST
def recommendation_action(
    request: HttpRequest, name: str, recommendation_id: int, action: str
) -> HttpResponse:
    """A workflow button: request, approve, reject, dry-run, apply or rollback. The message says
    what happened (:mod:`diagnosis.actions.workflow.outcome`): sent, refused with the
    scheduler's reason, applied or failed."""
    cluster = get_cluster_for_user(request.user, name)
    rec = get_recommendation_for_user(request.user, cluster, recommendation_id)
    target = rec
    since = timezone.now()
    try:
        if action == "approve":
            confirm = request.POST.get("confirm_harm") == "on"
            approve_recommendation(rec, request.user, confirm_harm=confirm)
        elif action in ACTIONS:
            ACTIONS[action](rec, request.user)
        elif action == "reject":
            reason = (request.POST.get("reason") or "").strip()
            reject_recommendation(rec, request.user, reason)
        elif action == "rollback":
            target = request_rollback(rec, request.user)
        else:
            raise Http404("no such action")
    except HarmNotConfirmed:  # the confirm step: the page shows the harm and asks again
        return HttpResponseRedirect(_detail_url(target) + "?confirm=harm#confirm-harm")
    except (WorkflowError, ApplyNotSent) as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(_detail_url(target))
    target.refresh_from_db()
    if action == "rollback":
        messages.success(
            request,
            gettext("Rollback #%(id)s requested: someone else approves it, then it is applied.")
            % {"id": target.pk},
        )
    else:
        outcome = outcome_of(action, target, since)
        (messages.success if outcome.ok else messages.error)(request, outcome.message)
    return HttpResponseRedirect(_detail_url(target))


@require_POST
def cluster_writes(request: HttpRequest, name: str) -> HttpResponse:
    """The cluster's write switch (admins only). Turning writes on is a confirm step first
    (``confirm=yes`` absent): the page names the scheduler that becomes writable and the
    approved changes the next Apply would write. ``next``: the page to land back on (this
    site's, e.g. the change the admin came from; else the list)."""
    cluster = get_cluster_for_user(request.user, name)
    enabled = request.POST.get("enabled") == "on"
    back = request.POST.get("next") or ""
    if not url_has_allowed_host_and_scheme(back, {request.get_host()}, request.is_secure()):
        back = reverse("diagnosis:recommendations", kwargs={"name": cluster.name})
    if enabled and cluster.dry_run and request.POST.get("confirm") != "yes":
        if not roles.can_administer(request.user):
            raise WorkflowDenied("only an admin may turn a cluster's writes on or off")
        waiting = recommendations_for_user(request.user, cluster).filter(state=State.APPROVED)
        context = {
            "cluster": cluster,
            "section": "recommendations",
            "approved": list(waiting.order_by("-approved_at", "-id")[:PER_PAGE]),
            "next": back,
        }
        return render(request, "diagnosis/cluster_writes_confirm.html", context)
    set_cluster_writes(cluster, request.user, enabled=enabled)
    messages.success(
        request,
        (
            gettext("Writes to %(cluster)s's scheduler are on.")
            if enabled
            else gettext("Writes to %(cluster)s's scheduler are off (dry runs only).")
        )
        % {"cluster": cluster.name},
    )
    return HttpResponseRedirect(back)
