"""The overview's pre-aggregated waterfall data (issue #17): one small :class:`AccountingSlice`
per good cycle, written at cycle time, so the page reads an hour of narrow rows and one
accounting document instead of an hour of accounting documents (~33 KB of finding references
each at 16,384 GPUs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from diagnosis.models import AccountingSlice, ClusterCycle


def new_references(
    refs: Mapping[str, Sequence[str]], previous: Mapping[str, Sequence[str]] | None
) -> dict[str, list[str]]:
    """Per bucket, the references of ``refs`` not behind that bucket in ``previous``, in their
    order (all of them when there is no previous cycle). Empty buckets are left out."""
    added = {}
    for bucket, found in (refs or {}).items():
        before = set((previous or {}).get(bucket) or ())
        new = [ref for ref in found if ref not in before]
        if new:
            added[bucket] = new
    return added


def _references(cycle: ClusterCycle | None) -> Mapping[str, Sequence[str]] | None:
    return None if cycle is None else (cycle.accounting or {}).get("findings") or {}


def _slice_of(cycle: ClusterCycle, previous: ClusterCycle | None) -> AccountingSlice:
    accounting: dict[str, Any] = cycle.accounting or {}
    figures = accounting.get("cluster") or {}
    return AccountingSlice(
        cycle=cycle,
        cluster_id=cycle.cluster_id,
        as_of=cycle.as_of,
        window_s=accounting.get("window_s"),
        buckets=figures.get("buckets") or {},
        new_findings=new_references(accounting.get("findings") or {}, _references(previous)),
        productive_gpus=figures.get("productive_gpus"),
        activity_coverage=figures.get("activity_coverage"),
        mfu_coverage=figures.get("mfu_coverage"),
    )


def _neighbour(cycle: ClusterCycle, *, later: bool) -> ClusterCycle | None:
    good = ClusterCycle.objects.filter(cluster_id=cycle.cluster_id, ok=True).exclude(pk=cycle.pk)
    if later:
        return good.filter(as_of__gt=cycle.as_of).order_by("as_of", "id").first()
    return good.filter(as_of__lte=cycle.as_of).order_by("-as_of", "-id").first()


def record_accounting_slice(cycle: ClusterCycle) -> AccountingSlice | None:
    """Store the slice of a good cycle (none for a failed one). Its new references are counted
    against the previous good cycle by snapshot time; a cycle stored out of order (an imported
    old snapshot) also recounts the next cycle's slice against it, so every slice stays relative
    to its true predecessor."""
    if not cycle.ok:
        return None
    stored = _slice_of(cycle, _neighbour(cycle, later=False))
    AccountingSlice.objects.update_or_create(
        cycle=cycle,
        defaults={
            f.name: getattr(stored, f.name)
            for f in AccountingSlice._meta.concrete_fields
            if f.name != "cycle"
        },
    )
    following = _neighbour(cycle, later=True)
    if following is not None:
        AccountingSlice.objects.filter(cycle=following).update(
            new_findings=new_references(
                (following.accounting or {}).get("findings") or {}, _references(cycle)
            )
        )
    return stored
