"""The built-in simulator's writes: changes to the simulated scheduler, audited."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction

from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.edge.sim import scheduler as sim_scheduler
from diagnosis.models import (
    AuditEntry,
    Cluster,
)


@transaction.atomic
def apply_sim_change(cluster: Cluster, change: dict[str, Any], *, actor: str) -> AuditEntry:
    """Apply a placement-policy, queue-weight or drain change to a simulated cluster, effective
    from its next scheduling pass, and record it (the cluster's replayable change log and an
    audit row with the value before and after). A change the simulator refuses raises
    :class:`diagnosis.edge.sim.scheduler.ChangeError` and records nothing.

    (The approval workflow, ``diagnosis.workflow``, writes through :func:`write_sim_change`;
    this is the demo cluster's direct path.)
    """
    cluster, before = write_sim_change(cluster, change)
    return AuditEntry.objects.create(
        actor=actor,
        action=f"sim:{change['kind']}",
        target=str(change.get("target", "")),
        before={"value": before},
        after={"value": change.get("to", "drained" if change["kind"] == "drain-node" else None)},
        cluster=cluster,
    )


def current_sim_value(cluster: Cluster, change: Mapping[str, Any]) -> Any:
    """The value a change's target has in a simulated cluster now: this process's simulator,
    brought up to the cluster's recorded changes first (another process may have written them)."""

    runtime = sim_runtime.runtime_for(cluster)
    with runtime.lock:
        now = runtime.simulator.now
        sim_runtime.catch_up_changes(cluster, runtime, now)
        runtime.simulator.run_until(now)  # the caught-up changes take effect (a pass at now)
    return sim_scheduler.current_value(cluster, change)


@transaction.atomic
def write_sim_change(
    cluster: Cluster, change: Mapping[str, Any], *, check: Callable[[Any], None] | None = None
) -> tuple[Cluster, Any]:
    """Apply a change to a simulated cluster and append it to its replayable change log, under
    the cluster's row lock; ``check(value before)`` may refuse it by raising. Records no audit
    row (the caller does). Returns the locked cluster and the value before."""

    if cluster.scheduler_kind != "sim":
        raise sim_scheduler.ChangeError(f"cluster {cluster.name} is not a simulated cluster")
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    before = current_sim_value(cluster, change)
    if check is not None:
        check(before)
    sim_scheduler.apply(cluster, change, dry_run=True)
    record = sim_scheduler.apply(cluster, change, dry_run=False)
    config = dict(cluster.scheduler_config)
    config["changes"] = [*config.get("changes", []), record]
    cluster.scheduler_config = config
    cluster.save(update_fields=["scheduler_config"])
    return cluster, before
