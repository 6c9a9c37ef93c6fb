"""Remediation policies: written by one person, approved by another; an edit is a new version
that needs approval again; retired or rejected, it acts no more; and the admins' kill switch
(docs/autopilot.md "Two people, once"). Every step is audited (``AuditEntry``, target
``policy:<name>``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from diagnosis import roles
from diagnosis.actions.enqueue import autopilot_on_commit
from diagnosis.actions.workflow.base import WorkflowDenied, WorkflowError, actor_name
from diagnosis.core.autopilot.policy import Budgets, PolicySpec, QuietWindow, policy_errors
from diagnosis.models import (
    AuditEntry,
    AutopilotSwitch,
    Cluster,
    ClusterCycle,
    PolicyMode,
    PolicyState,
    RemediationPolicy,
)

SYSTEM_AUTOPILOT = "system:autopilot"


class PolicyInvalid(ValueError):
    """A policy's terms are wrong: ``errors`` names each field (the API answers 400)."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = list(errors)


@dataclass(frozen=True)
class PolicyTerms:
    """What a person writes: everything of a policy but its state and people."""

    kind: str
    condition: Mapping[str, Any] = field(default_factory=dict)
    clusters: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    per_pool_per_hour: int = 1
    pool_out_share: float = 0.1
    per_hour: int = 2
    quiet_start_minute: int | None = None
    quiet_end_minute: int | None = None
    mode: str = PolicyMode.DRY_RUN

    def spec(self, policy_id: int = 0, name: str = "") -> PolicySpec:
        quiet = None
        if self.quiet_start_minute is not None and self.quiet_end_minute is not None:
            quiet = QuietWindow(self.quiet_start_minute, self.quiet_end_minute)
        return PolicySpec(
            id=policy_id,
            name=name,
            kind=self.kind,
            condition=dict(self.condition),
            mode=self.mode,
            clusters=frozenset(self.clusters),
            pools=frozenset(self.pools),
            budgets=Budgets(self.per_pool_per_hour, self.pool_out_share, self.per_hour),
            quiet=quiet,
        )

    def errors(self) -> list[str]:
        errors = policy_errors(self.spec())
        if (self.quiet_start_minute is None) != (self.quiet_end_minute is None):
            errors.append("quiet window: give both its start and its end, or neither")
        return errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "condition": dict(self.condition),
            "clusters": sorted(self.clusters),
            "pools": sorted(self.pools),
            "per_pool_per_hour": self.per_pool_per_hour,
            "pool_out_share": self.pool_out_share,
            "per_hour": self.per_hour,
            "quiet_start_minute": self.quiet_start_minute,
            "quiet_end_minute": self.quiet_end_minute,
            "mode": self.mode,
        }


def terms_of(policy: RemediationPolicy) -> PolicyTerms:
    return PolicyTerms(
        kind=policy.kind,
        condition=dict(policy.condition or {}),
        clusters=tuple(sorted(c.name for c in policy.clusters.all())),
        pools=tuple(policy.pools or ()),
        per_pool_per_hour=policy.per_pool_per_hour,
        pool_out_share=policy.pool_out_share,
        per_hour=policy.per_hour,
        quiet_start_minute=policy.quiet_start_minute,
        quiet_end_minute=policy.quiet_end_minute,
        mode=policy.mode,
    )


def spec_of(policy: RemediationPolicy) -> PolicySpec:
    return terms_of(policy).spec(policy.pk, policy.name)


def _audit(policy: RemediationPolicy, actor: str, action: str, **values: Any) -> None:
    AuditEntry.objects.create(actor=actor, action=action, target=f"policy:{policy.name}", **values)


def _clusters(names: Sequence[str]) -> list[Cluster]:
    found = {c.name: c for c in Cluster.objects.filter(name__in=list(names))}
    missing = sorted(set(names) - set(found))
    if missing:
        raise PolicyInvalid([f"clusters: no cluster named {', '.join(missing)}"])
    return list(found.values())


def _store(policy: RemediationPolicy, terms: PolicyTerms) -> None:
    errors = terms.errors()
    if errors:
        raise PolicyInvalid(errors)
    clusters = _clusters(terms.clusters)
    for name, value in terms.as_dict().items():
        if name != "clusters":
            setattr(policy, name, value)
    policy.save()
    policy.clusters.set(clusters)


def create_policy(user: AbstractBaseUser, name: str, terms: PolicyTerms) -> RemediationPolicy:
    """A new policy, awaiting someone else's approval: it acts on nothing until then."""
    if not roles.can_write_policy(user):
        raise WorkflowDenied("writing a remediation policy needs the sre role")
    with transaction.atomic():
        if RemediationPolicy.objects.filter(name=name).exists():
            raise PolicyInvalid([f"name: a policy named {name} exists"])
        policy = RemediationPolicy(name=name, written_by=user, state=PolicyState.PROPOSED)
        _store(policy, terms)
        _audit(policy, actor_name(user), "policy-write", after={"version": 1, **terms.as_dict()})
    return policy


def edit_policy(
    policy: RemediationPolicy, user: AbstractBaseUser, terms: PolicyTerms
) -> RemediationPolicy:
    """A new version of the policy's terms: it awaits approval again (someone other than this
    writer), and acts on nothing meanwhile."""
    if not roles.can_write_policy(user):
        raise WorkflowDenied("editing a remediation policy needs the sre role")
    with transaction.atomic():
        policy = RemediationPolicy.objects.select_for_update().get(pk=policy.pk)
        if policy.state == PolicyState.RETIRED:
            raise WorkflowError("the policy is retired: write a new one")
        before = {"version": policy.version, "state": policy.state, **terms_of(policy).as_dict()}
        policy.version += 1
        policy.state = PolicyState.PROPOSED
        policy.written_by = user
        policy.approved_by = None
        policy.approved_at = None
        policy.mode_reason = ""
        _store(policy, terms)
        _audit(
            policy,
            actor_name(user),
            "policy-write",
            before=before,
            after={"version": policy.version, **terms.as_dict()},
        )
    return policy


def approve_policy(policy: RemediationPolicy, user: AbstractBaseUser) -> RemediationPolicy:
    """Approve the policy's current version: an SRE other than its writer (admins included)."""
    with transaction.atomic():
        policy = RemediationPolicy.objects.select_for_update().get(pk=policy.pk)
        allowed, why = roles.can_approve_policy(user, policy.written_by)
        if not allowed:
            raise WorkflowDenied(why)
        if policy.state != PolicyState.PROPOSED:
            raise WorkflowError(f"cannot approve a policy that is {policy.state}")
        policy.state = PolicyState.APPROVED
        policy.approved_by = user
        policy.approved_at = timezone.now()
        policy.save(update_fields=["state", "approved_by", "approved_at", "updated_at"])
        _audit(
            policy,
            actor_name(user),
            "policy-approve",
            after={"version": policy.version, "written_by": actor_name(policy.written_by)},
        )
    return policy


def close_policy(
    policy: RemediationPolicy, user: AbstractBaseUser, *, state: str, reason: str = ""
) -> RemediationPolicy:
    """Reject a proposed version, or retire the policy: it acts no more (an SRE)."""
    if not roles.can_write_policy(user):
        raise WorkflowDenied("rejecting or retiring a policy needs the sre role")
    if state not in (PolicyState.REJECTED, PolicyState.RETIRED):
        raise WorkflowError(f"a policy is closed as rejected or retired, not {state}")
    with transaction.atomic():
        policy = RemediationPolicy.objects.select_for_update().get(pk=policy.pk)
        if state == PolicyState.REJECTED and policy.state != PolicyState.PROPOSED:
            raise WorkflowError(f"cannot reject a policy that is {policy.state}")
        before = policy.state
        policy.state = state
        policy.save(update_fields=["state", "updated_at"])
        _audit(
            policy,
            actor_name(user),
            f"policy-{'reject' if state == PolicyState.REJECTED else 'retire'}",
            before={"state": before},
            after={"state": state, "reason": reason.strip()[:500]},
        )
    return policy


def demote_policy(policy: RemediationPolicy, reason: str) -> bool:
    """gpuobs turns an enforcing policy to dry run (a change it applied regressed); whether it
    did (False: it was not enforcing)."""
    with transaction.atomic():
        policy = RemediationPolicy.objects.select_for_update().get(pk=policy.pk)
        if policy.mode != PolicyMode.ENFORCE:
            return False
        policy.mode = PolicyMode.DRY_RUN
        policy.mode_reason = reason[:2000]
        policy.save(update_fields=["mode", "mode_reason", "updated_at"])
        _audit(
            policy,
            SYSTEM_AUTOPILOT,
            "policy-demoted",
            before={"mode": PolicyMode.ENFORCE},
            after={"mode": PolicyMode.DRY_RUN, "reason": policy.mode_reason},
        )
    return True


def kill_switch() -> AutopilotSwitch:
    """The kill switch as it stands (read only: running, unsaved, until an admin first turns it)."""
    return AutopilotSwitch.objects.filter(pk=1).first() or AutopilotSwitch(pk=1)


def set_kill_switch(user: AbstractBaseUser, *, stopped: bool, reason: str = "") -> AutopilotSwitch:
    """Stop (or restart) every policy at once: admins only; audited. The next autopilot step
    holds everything back (guard ``kill-switch``)."""
    if not roles.can_stop_autopilot(user):
        raise WorkflowDenied("only an admin may stop or restart the autopilot")
    with transaction.atomic():
        AutopilotSwitch.objects.get_or_create(pk=1)
        switch = AutopilotSwitch.objects.select_for_update().get(pk=1)
        before = switch.stopped
        switch.stopped = stopped
        switch.changed_by = user
        switch.changed_at = timezone.now()
        switch.reason = reason.strip()[:500]
        switch.save()
        AuditEntry.objects.create(
            actor=actor_name(user),
            action="autopilot-stopped" if stopped else "autopilot-started",
            target="autopilot",
            before={"stopped": before},
            after={"stopped": stopped, "reason": switch.reason},
        )
    return switch


def policies_in_force(cluster: Cluster) -> list[RemediationPolicy]:
    """The approved policies whose scope takes in ``cluster`` (an empty scope takes in all)."""
    approved = RemediationPolicy.objects.filter(state=PolicyState.APPROVED).prefetch_related(
        "clusters"
    )
    return [p for p in approved if not p.clusters.all() or cluster in p.clusters.all()]


def autopilot_after_cycle(cluster: Cluster, cycle: ClusterCycle) -> None:
    """Send the cycle's autopilot step once it commits, when any policy is approved (one
    query a cycle otherwise)."""
    if cycle.ok and RemediationPolicy.objects.filter(state=PolicyState.APPROVED).exists():
        autopilot_on_commit(cluster.pk, cycle.pk)
