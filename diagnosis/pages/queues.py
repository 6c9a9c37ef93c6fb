"""The scheduler's queues (issue 19; docs/ui.md "Queues"): every queue and cohort, as a tree
where the scheduler has one (Volcano's and KAI's parent queues, Kueue's cohorts:
``scheduler.queue_parents`` and ``scheduler.cohorts`` of the snapshot), and a queue's page with
its pending jobs, the scheduler's reason, gpuobs's diagnosis and the wait so far.

Everything is read from the latest stored snapshot. Current use counts the GPU units the
queue's jobs hold (shares of time-sliced GPUs as fractions); borrowing is the use above the
deserved GPUs; the fair share water-fills the cluster's GPUs down the tree by weight, each queue
capped at what it holds and asks (:func:`diagnosis.core.fairness.tree_water_fill`, the
fairness report's method). A manager sees only their tenants' queues and jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from diagnosis.access import get_cluster_for_user, jobs_for_user, tenants_for_user
from diagnosis.core.fairness import tree_water_fill
from diagnosis.core.vocabulary import parse_time
from diagnosis.models import Cluster
from diagnosis.pages.jobs import findings_naming_jobs
from diagnosis.pages.live import latest_good_cycle
from diagnosis.pages.support.forecasts import forecast_table
from diagnosis.pages.support.page_cache import rendered_once
from diagnosis.pages.support.snapshots import (
    StoredSnapshot,
    derived,
    latest_snapshot,
    queue_members,
)
from diagnosis.pages.support.sorting import TableSort
from diagnosis.roles import is_tenant_scoped

PENDING_SHOWN = 200


@dataclass
class QueueRow:
    """A queue, or a group of queues (a parent queue, a cohort) that only the tree names."""

    name: str
    tenant: str | None = None
    weight: float | None = None
    deserved_gpus: float | None = None
    capability_gpus: float | None = None
    used_gpus: float = 0.0
    pending_jobs: int = 0
    pending_gpus: float = 0.0
    running_jobs: int = 0
    fair_gpus: float | None = None
    parent: str | None = None
    is_group: bool = False  # a cohort or parent queue not listed among the queues
    depth: int = 0
    children: list[str] = field(default_factory=list)

    @property
    def borrowed_gpus(self) -> float | None:
        if self.deserved_gpus is None:
            return None
        return max(0.0, self.used_gpus - self.deserved_gpus)

    @property
    def use_of_deserved(self) -> float | None:
        if not self.deserved_gpus:
            return None
        return self.used_gpus / self.deserved_gpus


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _job_gpus(job: Mapping[str, Any]) -> float:
    """GPU units a job holds: its allocation's GPUs, each at its pod's share."""
    return sum(
        len(pod.get("gpus") or ()) * float(pod.get("share") or 1.0)
        for pod in job.get("allocation") or ()
    )


def _requested(job: Mapping[str, Any]) -> float:
    return float(job.get("pods") or 1) * float(job.get("gpus_per_pod") or 0)


def queue_tree(document: Mapping[str, Any]) -> dict[str, QueueRow]:
    """Every queue of the snapshot and every group above them, with use, demand and fair share,
    in tree order (a parent before its children, siblings by name)."""
    scheduler = document.get("scheduler") or {}
    parents: dict[str, str] = {
        str(k): str(v) for k, v in (scheduler.get("queue_parents") or {}).items() if v
    }
    cohorts: Mapping[str, Any] = scheduler.get("cohorts") or {}
    rows: dict[str, QueueRow] = {}
    for queue in document.get("queues") or ():
        name = str(queue.get("name"))
        rows[name] = QueueRow(
            name=name,
            tenant=queue.get("tenant") or name,
            weight=_number(queue.get("weight")),
            deserved_gpus=_number(queue.get("deserved_gpus")),
            capability_gpus=_number(queue.get("capability_gpus")),
            parent=parents.get(name),
        )
    for name, cohort in cohorts.items():
        cohort = cohort if isinstance(cohort, Mapping) else {}
        if name not in rows:
            rows[name] = QueueRow(
                name=str(name), weight=_number(cohort.get("weight")), is_group=True
            )
        if cohort.get("parent"):
            parents.setdefault(str(name), str(cohort["parent"]))
    for child, parent in list(parents.items()):
        rows.setdefault(parent, QueueRow(name=parent, is_group=True))
        if child in rows:
            rows[child].parent = parent
    for job in document.get("jobs") or ():
        row = rows.get(str(job.get("queue")))
        if row is None:
            continue
        if job.get("state") == "pending":
            row.pending_jobs += 1
            row.pending_gpus += max(0.0, _requested(job) - _job_gpus(job))
        elif job.get("state") == "running":
            row.running_jobs += 1
        row.used_gpus += _job_gpus(job)
    _fill_fair_share(document, rows, parents, cohorts)
    return _in_tree_order(rows)


def _fill_fair_share(
    document: Mapping[str, Any],
    rows: dict[str, QueueRow],
    parents: Mapping[str, str],
    cohorts: Mapping[str, Any],
) -> None:
    capacity = sum(float(n.get("gpus") or 0) for n in document.get("nodes") or ())
    leaves = {n: r for n, r in rows.items() if not r.is_group}
    demand = {n: r.used_gpus + r.pending_gpus for n, r in leaves.items()}
    entitlement = {n: r.weight or 1.0 for n, r in rows.items() if not r.is_group}
    group_weight = {
        str(n): float((c or {}).get("weight") or 1.0)
        for n, c in cohorts.items()
        if isinstance(c, Mapping)
    }
    fair = tree_water_fill(capacity, entitlement, demand, dict(parents), group_weight)
    for name, share in fair.items():
        rows[name].fair_gpus = share
    # a group's figures are its members' sums
    for name in sorted(rows, key=lambda n: -_depth(n, parents)):
        row = rows[name]
        parent = parents.get(name)
        if parent and parent in rows and rows[parent].is_group:
            group = rows[parent]
            group.used_gpus += row.used_gpus
            group.pending_jobs += row.pending_jobs
            group.pending_gpus += row.pending_gpus
            group.running_jobs += row.running_jobs
            group.fair_gpus = (group.fair_gpus or 0.0) + (row.fair_gpus or 0.0)


def _depth(name: str, parents: Mapping[str, str]) -> int:
    seen = [name]
    while parents.get(seen[-1]) and parents[seen[-1]] not in seen:
        seen.append(parents[seen[-1]])
    return len(seen) - 1


def _in_tree_order(rows: dict[str, QueueRow]) -> dict[str, QueueRow]:
    for row in rows.values():
        if row.parent and row.parent in rows:
            rows[row.parent].children.append(row.name)
    ordered: dict[str, QueueRow] = {}

    def visit(name: str, depth: int) -> None:
        if name in ordered:
            return
        rows[name].depth = depth
        ordered[name] = rows[name]
        for child in sorted(rows[name].children):
            visit(child, depth + 1)

    for name in sorted(n for n, r in rows.items() if not r.parent or r.parent not in rows):
        visit(name, 0)
    for name in sorted(rows):  # what a cycle in the parents left out
        visit(name, 0)
    return ordered


def _visible(request: HttpRequest, cluster: Cluster, rows: dict[str, QueueRow]):
    """The queues a reader may see: all, or for a manager those of their tenants (and the
    groups above them)."""
    if not is_tenant_scoped(request.user):
        return rows
    mine = set(tenants_for_user(request.user, cluster).values_list("name", flat=True))
    keep = {n for n, r in rows.items() if not r.is_group and r.tenant in mine}
    for name in list(keep):
        parent = rows[name].parent
        while parent and parent in rows and parent not in keep:
            keep.add(parent)
            parent = rows[parent].parent
    return {n: r for n, r in rows.items() if n in keep}


def queue_rows(cluster: Cluster, latest: StoredSnapshot) -> dict[str, QueueRow]:
    """The :func:`queue_tree` of a stored snapshot, computed once per snapshot across the
    processes sharing the page cache (the same for every reader: :func:`_visible` scopes it)."""
    key = ("queue-tree", cluster.pk, latest.id, latest.as_of)
    return derived(key, lambda: rendered_once(key, lambda: queue_tree(queue_members(latest))))


def pending_by_queue(latest: StoredSnapshot) -> dict[str, list[tuple[int, Mapping[str, Any]]]]:
    """The pending jobs of a stored snapshot by queue, each with its place in the document."""
    grouped: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for position, job in enumerate(queue_members(latest).get("jobs") or ()):
        if job.get("state") == "pending":
            grouped.setdefault(str(job.get("queue")), []).append((position, job))
    return grouped


def pending_jobs(
    cluster: Cluster,
    latest: StoredSnapshot,
    queues: set[str],
    grouped: Mapping[str, list[tuple[int, Mapping[str, Any]]]] | None = None,
) -> list[Mapping[str, Any]]:
    """The pending jobs of ``queues`` in a stored snapshot, longest waiting first (every
    reader's: the caller keeps those the reader may see), computed once like :func:`queue_rows`
    (``grouped``: the snapshot's :func:`pending_by_queue`, when the caller has it)."""

    def compute() -> list[Mapping[str, Any]]:
        by_queue = pending_by_queue(latest) if grouped is None else grouped
        pending = [found for queue in queues for found in by_queue.get(queue, ())]
        pending.sort(key=lambda found: (str(found[1].get("submitted") or ""), found[0]))
        return [job for _position, job in pending]

    key = ("queue-pending", cluster.pk, latest.id, latest.as_of, tuple(sorted(queues)))
    return derived(key, lambda: rendered_once(key, compute))


def _snapshot_or_404(cluster: Cluster) -> StoredSnapshot:
    latest = latest_snapshot(cluster)
    if latest is None:
        raise Http404("no snapshot of this cluster yet")
    return latest


# The queue table's orders (?sort=KEY or -KEY, diagnosis/pages/support/sorting.py); ``tree``
# (the default) is the scheduler's tree, parents before their members. Any other order, or a
# filter, lists the rows flat.
QUEUE_SORTS: dict[str, Any] = {
    "tree": lambda r: 0,
    "name": lambda r: r.name,
    "tenant": lambda r: r.tenant,
    "weight": lambda r: r.weight,
    "deserved": lambda r: r.deserved_gpus,
    "capability": lambda r: r.capability_gpus,
    "used": lambda r: r.used_gpus,
    "borrowed": lambda r: r.borrowed_gpus,
    "fair": lambda r: r.fair_gpus,
    "running": lambda r: r.running_jobs,
    "pending": lambda r: r.pending_gpus,
}
QUEUE_SORTS_DESCENDING_FIRST = tuple(sorted(set(QUEUE_SORTS) - {"tree", "name", "tenant"}))


@require_safe
def queue_list(request: HttpRequest, name: str) -> HttpResponse:
    """Every queue and cohort the reader may see, as a tree, with its figures."""
    cluster = get_cluster_for_user(request.user, name)
    latest = latest_snapshot(cluster)
    rows = _visible(request, cluster, queue_rows(cluster, latest)) if latest else {}
    sort = TableSort.parse(
        request.GET, QUEUE_SORTS, "tree", descending_first=QUEUE_SORTS_DESCENDING_FIRST
    )
    tenant = (request.GET.get("tenant") or "").strip()
    pending_only = request.GET.get("pending") == "1"
    shown = [
        r
        for r in rows.values()
        if (not tenant or r.tenant == tenant) and (not pending_only or r.pending_jobs > 0)
    ]
    flat = sort.key != "tree" or bool(tenant) or pending_only
    if sort.key != "tree":
        shown = sort.apply(shown, QUEUE_SORTS, tie=lambda r: r.name)
    context = {
        "cluster": cluster,
        "section": "queues",
        "latest": latest,
        "rows": shown,
        "queue_count": len(rows),
        "has_tree": any(r.parent for r in rows.values()) and not flat,
        "flat": flat,
        "table": sort,
        "tenant": tenant,
        "pending_only": pending_only,
        "tenant_choices": sorted({r.tenant for r in rows.values() if r.tenant}),
        "good": latest_good_cycle(request, cluster),  # the live status line (docs/ui.md)
    }
    return render(request, "diagnosis/queue_list.html", context)


@dataclass(frozen=True)
class PendingRow:
    job: Mapping[str, Any]
    gpus: float
    wait_s: float | None
    reason: str
    findings: list[Any]


def _wait(job: Mapping[str, Any], as_of: datetime) -> float | None:
    submitted = parse_time(job.get("submitted") or "")
    if submitted is None:
        return None
    return max(0.0, (as_of - submitted).total_seconds())


@require_safe
def queue_detail(request: HttpRequest, name: str, queue: str) -> HttpResponse:
    """One queue: its figures, its place in the tree, and its pending jobs (longest wait first)
    with the scheduler's reason and the findings that name each."""
    cluster = get_cluster_for_user(request.user, name)
    latest = _snapshot_or_404(cluster)
    rows = _visible(request, cluster, queue_rows(cluster, latest))
    row = rows.get(queue)
    if row is None:
        raise Http404("no such queue")
    members = {queue} | _descendants(rows, queue)
    pending = pending_jobs(cluster, latest, members)
    visible = {str(j["id"]) for j in pending}
    if is_tenant_scoped(request.user) and visible:
        visible = set(
            jobs_for_user(request.user, cluster)
            .filter(external_id__in=list(visible))
            .values_list("external_id", flat=True)
        )
    pending = [j for j in pending if str(j["id"]) in visible]
    shown = pending[:PENDING_SHOWN]
    named = findings_naming_jobs(request, cluster, [str(j["id"]) for j in shown])
    context = {
        "cluster": cluster,
        "section": "queues",
        "latest": latest,
        "queue": row,
        "ancestors": _ancestors(rows, queue),
        "children": [rows[c] for c in row.children if c in rows],
        "pending": [
            PendingRow(
                job=j,
                gpus=max(0.0, _requested(j) - _job_gpus(j)),
                wait_s=_wait(j, latest.as_of),
                reason=str(j.get("pending_reason") or ""),
                findings=named.get(str(j["id"]), []),
            )
            for j in shown
        ],
        "pending_total": len(pending),
        "forecasts": forecast_table(request.user, cluster, queues=members),  # issue #33
    }
    return render(request, "diagnosis/queue_detail.html", context)


def _descendants(rows: Mapping[str, QueueRow], name: str) -> set[str]:
    found: set[str] = set()
    todo = list(rows[name].children)
    while todo:
        child = todo.pop()
        if child in rows and child not in found:
            found.add(child)
            todo.extend(rows[child].children)
    return found


def _ancestors(rows: Mapping[str, QueueRow], name: str) -> list[QueueRow]:
    chain: list[QueueRow] = []
    parent = rows[name].parent
    while parent and parent in rows and rows[parent] not in chain:
        chain.insert(0, rows[parent])
        parent = rows[parent].parent
    return chain
