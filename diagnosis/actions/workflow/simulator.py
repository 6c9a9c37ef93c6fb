"""The built-in simulator's direct writes: a change to a simulated cluster, audited (the demo
cluster's path; the approval workflow writes through :mod:`diagnosis.actions.workflow.apply`)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from diagnosis.actions.workflow.apply import ask_scheduler
from diagnosis.edge.schedulers.base import ChangeError
from diagnosis.models import (
    AuditEntry,
    Cluster,
)


@transaction.atomic
def apply_sim_change(cluster: Cluster, change: dict[str, Any], *, actor: str) -> AuditEntry:
    """Apply a placement-policy, queue-weight or drain change to a simulated cluster, effective
    from its next scheduling pass, and record it (the cluster's replayable change log and an
    audit row with the value before and after). A change the simulator refuses raises
    :class:`~diagnosis.edge.schedulers.base.ChangeError` and records nothing."""
    if cluster.scheduler_kind != "sim":
        raise ChangeError(f"cluster {cluster.name} is not a simulated cluster")
    result = ask_scheduler(cluster, change, dry_run=False)
    return AuditEntry.objects.create(
        actor=actor,
        action=f"sim:{change['kind']}",
        target=str(change.get("target", "")),
        before={"value": result.before},
        after={"value": result.after},
        cluster=cluster,
    )
