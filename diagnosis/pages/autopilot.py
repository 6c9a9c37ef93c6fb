"""The autopilot's pages (docs/autopilot.md "Pages"): the policies with the kill switch and what
they did lately; one policy with its terms, its approvals, what it applied, held back or would
have applied, and the "replay last week" preview; writing and editing one. Reads go through
``diagnosis.access``, writes through ``diagnosis.actions.autopilot.policies``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from diagnosis import roles
from diagnosis.access import clusters_for_user, get_policy_for_user, policies_for_user
from diagnosis.actions.autopilot import policies as actions
from diagnosis.actions.autopilot.preview import replay_preview
from diagnosis.actions.workflow.base import WorkflowError
from diagnosis.models import (
    AuditEntry,
    AutopilotDecision,
    PolicyKind,
    PolicyMode,
    PolicyState,
    RemediationPolicy,
)

RECENT = 50


def _require_reader(user: AbstractBaseUser) -> None:
    if not roles.can_read(user) or roles.is_tenant_scoped(user):
        raise Http404("no such page")


def _minute_of(text: str, field: str) -> int | None:
    if not text:
        return None
    hours, _sep, minutes = text.partition(":")
    try:
        value = int(hours) * 60 + int(minutes or 0)
    except ValueError:
        raise ValidationError({field: gettext("Write the time as HH:MM (UTC).")}) from None
    if not 0 <= value < 24 * 60:
        raise ValidationError({field: gettext("Write the time as HH:MM (UTC).")})
    return value


def _hhmm(minute: int | None) -> str:
    return "" if minute is None else f"{minute // 60:02d}:{minute % 60:02d}"


class PolicyForm(forms.Form):
    name = forms.SlugField(label=_("Name"), max_length=64)
    kind = forms.ChoiceField(label=_("Kind"), choices=PolicyKind.choices)
    xid_codes = forms.CharField(
        label=_("Xid codes (drain)"),
        required=False,
        help_text=_("Comma-separated, of the Xid catalogue's drain class; empty: the whole class."),
    )
    min_gpus = forms.IntegerField(label=_("At least GPUs held (gang release)"), required=False)
    min_hold_minutes = forms.IntegerField(
        label=_("Held for at least, minutes (gang release)"), required=False
    )
    clusters = forms.MultipleChoiceField(
        label=_("Clusters"), required=False, help_text=_("None chosen: every cluster.")
    )
    pools = forms.CharField(
        label=_("Pools"), required=False, help_text=_("Comma-separated; empty: every pool.")
    )
    per_pool_per_hour = forms.IntegerField(
        label=_("At most actions per pool per hour"), min_value=0, initial=1
    )
    pool_out_percent = forms.FloatField(
        label=_("At most % of a pool's GPUs out at once"), min_value=0, max_value=100, initial=10
    )
    per_hour = forms.IntegerField(label=_("At most actions per hour"), min_value=0, initial=2)
    quiet_start = forms.CharField(label=_("Quiet from (HH:MM UTC)"), required=False)
    quiet_end = forms.CharField(label=_("Quiet until (HH:MM UTC)"), required=False)
    mode = forms.ChoiceField(label=_("Mode"), choices=PolicyMode.choices)

    def __init__(self, *args: Any, user: AbstractBaseUser, editing: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        names = clusters_for_user(user).order_by("name").values_list("name", flat=True)
        self.fields["clusters"].choices = [(n, n) for n in names]
        if editing:
            self.fields["name"].disabled = True

    def terms(self) -> actions.PolicyTerms:
        data = self.cleaned_data
        if data["kind"] == PolicyKind.DRAIN_NODE:
            try:
                codes = [int(c) for c in data["xid_codes"].replace(" ", "").split(",") if c]
            except ValueError:
                raise ValidationError({"xid_codes": gettext("Whole numbers only.")}) from None
            condition: dict[str, Any] = {"xid_codes": codes}
        else:
            condition = {
                "min_gpus": data["min_gpus"] or 0,
                "min_hold_s": (data["min_hold_minutes"] or 0) * 60,
            }
        return actions.PolicyTerms(
            kind=data["kind"],
            condition=condition,
            clusters=tuple(data["clusters"]),
            pools=tuple(p.strip() for p in data["pools"].split(",") if p.strip()),
            per_pool_per_hour=data["per_pool_per_hour"],
            pool_out_share=data["pool_out_percent"] / 100,
            per_hour=data["per_hour"],
            quiet_start_minute=_minute_of(data["quiet_start"], "quiet_start"),
            quiet_end_minute=_minute_of(data["quiet_end"], "quiet_end"),
            mode=data["mode"],
        )

    @classmethod
    def initial_of(cls, policy: RemediationPolicy) -> dict[str, Any]:
        condition = policy.condition or {}
        return {
            "name": policy.name,
            "kind": policy.kind,
            "xid_codes": ", ".join(str(c) for c in condition.get("xid_codes") or ()),
            "min_gpus": condition.get("min_gpus"),
            "min_hold_minutes": int(condition.get("min_hold_s") or 0) // 60 or None,
            "clusters": [c.name for c in policy.clusters.all()],
            "pools": ", ".join(policy.pools or ()),
            "per_pool_per_hour": policy.per_pool_per_hour,
            "pool_out_percent": round(policy.pool_out_share * 100, 2),
            "per_hour": policy.per_hour,
            "quiet_start": _hhmm(policy.quiet_start_minute),
            "quiet_end": _hhmm(policy.quiet_end_minute),
            "mode": policy.mode,
        }


def _save(form: PolicyForm, save: Any) -> RemediationPolicy | None:
    """``save(terms)`` for a valid form; the errors on the form otherwise (None)."""
    if not form.is_valid():
        return None
    try:
        return save(form.terms())
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            form.add_error(field, errors)
    except actions.PolicyInvalid as exc:
        for error in exc.errors:
            form.add_error(None, error)
    return None


@require_safe
def autopilot_list(request: HttpRequest) -> HttpResponse:
    _require_reader(request.user)
    rows = policies_for_user(request.user).select_related("written_by", "approved_by")
    decisions = (
        AutopilotDecision.objects.filter(cluster__in=clusters_for_user(request.user))
        .select_related("policy", "cluster")
        .order_by("-time", "-id")[:RECENT]
    )
    return render(
        request,
        "diagnosis/autopilot_list.html",
        {
            "policies": rows.prefetch_related("clusters"),
            "decisions": decisions,
            "switch": actions.kill_switch(),
            "can_write": roles.can_write_policy(request.user),
            "can_stop": roles.can_stop_autopilot(request.user),
            "section": "autopilot",
        },
    )


@require_http_methods(["GET", "POST"])
def policy_new(request: HttpRequest) -> HttpResponse:
    _require_reader(request.user)
    if not roles.can_write_policy(request.user):
        raise PermissionDenied("writing a remediation policy needs the sre role")
    form = PolicyForm(request.POST or None, user=request.user)
    if request.method == "POST":
        policy = _save(
            form,
            lambda terms: actions.create_policy(request.user, form.cleaned_data["name"], terms),
        )
        if policy is not None:
            written = gettext("Policy %(name)s written: it awaits another person's approval.")
            messages.success(request, written % {"name": policy.name})
            return HttpResponseRedirect(_detail_url(policy))
    return render(
        request,
        "diagnosis/autopilot_form.html",
        {"form": form, "policy": None, "section": "autopilot"},
        status=400 if request.method == "POST" else 200,
    )


@require_http_methods(["GET", "POST"])
def policy_edit(request: HttpRequest, policy_id: int) -> HttpResponse:
    policy = get_policy_for_user(request.user, policy_id)
    if not roles.can_write_policy(request.user):
        raise PermissionDenied("editing a remediation policy needs the sre role")
    form = PolicyForm(
        request.POST or None,
        user=request.user,
        editing=True,
        initial=PolicyForm.initial_of(policy),
    )
    if request.method == "POST":
        try:
            saved = _save(form, lambda terms: actions.edit_policy(policy, request.user, terms))
        except WorkflowError as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(_detail_url(policy))
        if saved is not None:
            messages.success(
                request,
                gettext("Policy %(name)s is now version %(version)s: it awaits approval again.")
                % {"name": saved.name, "version": saved.version},
            )
            return HttpResponseRedirect(_detail_url(saved))
    return render(
        request,
        "diagnosis/autopilot_form.html",
        {"form": form, "policy": policy, "section": "autopilot"},
        status=400 if request.method == "POST" else 200,
    )


def _detail_url(policy: RemediationPolicy) -> str:
    return reverse("diagnosis:autopilot-policy", kwargs={"policy_id": policy.pk})


@require_safe
def policy_detail(request: HttpRequest, policy_id: int) -> HttpResponse:
    policy = get_policy_for_user(request.user, policy_id)
    decisions = policy.decisions.filter(cluster__in=clusters_for_user(request.user))
    decisions = decisions.select_related("cluster", "recommendation").order_by("-time", "-id")
    preview = None
    if request.GET.get("replay"):
        preview = replay_preview(actions.terms_of(policy), policy_id=policy.pk)
    approve_ok, approve_why = roles.can_approve_policy(request.user, policy.written_by)
    return render(
        request,
        "diagnosis/autopilot_policy.html",
        {
            "policy": policy,
            "terms": actions.terms_of(policy),
            "quiet": (_hhmm(policy.quiet_start_minute), _hhmm(policy.quiet_end_minute)),
            "trail": AuditEntry.objects.filter(target=f"policy:{policy.name}").order_by("time"),
            "decisions": decisions[:RECENT],
            "preview": preview,
            "can_write": roles.can_write_policy(request.user)
            and policy.state != PolicyState.RETIRED,
            "can_approve": approve_ok and policy.state == PolicyState.PROPOSED,
            "approve_why": approve_why,
            "proposed": policy.state == PolicyState.PROPOSED,
            "section": "autopilot",
        },
    )


@require_POST
def policy_action(request: HttpRequest, policy_id: int, action: str) -> HttpResponse:
    policy = get_policy_for_user(request.user, policy_id)
    try:
        if action == "approve":
            policy = actions.approve_policy(policy, request.user)
            messages.success(request, gettext("Approved: the policy acts from the next cycle."))
        elif action in ("reject", "retire"):
            state = PolicyState.REJECTED if action == "reject" else PolicyState.RETIRED
            actions.close_policy(
                policy, request.user, state=state, reason=request.POST.get("reason", "")
            )
            messages.success(request, gettext("Done: the policy acts no more."))
        else:
            raise Http404("no such action")
    except WorkflowError as exc:
        messages.error(request, str(exc))
    return HttpResponseRedirect(_detail_url(policy))


@require_POST
def autopilot_switch(request: HttpRequest) -> HttpResponse:
    if not roles.can_stop_autopilot(request.user):
        raise PermissionDenied("only an admin may stop or restart the autopilot")
    stopped = request.POST.get("stopped") == "1"
    actions.set_kill_switch(request.user, stopped=stopped, reason=request.POST.get("reason", ""))
    messages.success(
        request,
        gettext("Every policy is stopped.") if stopped else gettext("Policies act again."),
    )
    return HttpResponseRedirect(reverse("diagnosis:autopilot"))
