"""NVIDIA's KAI scheduler (``scheduling.run.ai``) as a scheduler adapter.

Reads Nodes, Pods, Events, KAI Queues (``v2``) and PodGroups (``v2alpha2``) through
:mod:`diagnosis.edge.schedulers.kubernetes.client` (list, then watch), and DRA and the native
gang API where served, like the Volcano and Kueue adapters.

- A **Queue** is a queue: ``spec.resources.gpu.quota`` its deserved GPUs (``-1``, unlimited,
  is left unknown), ``limit`` its capability (``-1``: none), ``overQuotaWeight`` its weight
  (default 1), ``parentQueue`` its parent (jobs run in leaf queues only; ``scheduler.
  queue_parents`` keeps the tree, a tenant is a subtree).
- A **PodGroup** is a job: ``minMember`` makes it a gang, its pods (annotation
  ``pod-group-name``) give its shape and allocation, ``status.schedulingConditions`` (the
  newest) its pending reason (``reasons[].reason``: ``OverLimit``, ``NonPreemptibleOverQuota``,
  ... with the message).

Writes (:meth:`KaiAdapter.apply`), each a merge patch guarded by the Queue's resourceVersion
(a stale one: 409, ``SchedulerError(conflict=True)``), ``dryRun=All`` for a dry run:
``queue-weight`` sets ``spec.resources.gpu.overQuotaWeight`` (or, with ``"field": "quota"`` /
``"limit"``, the quota or the limit); ``drain-node`` cordons and evicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from diagnosis.edge.config import Setting
from diagnosis.edge.schedulers.kubernetes import base as kube
from diagnosis.edge.schedulers.kubernetes import dra, gang_release, objects
from diagnosis.edge.schedulers.targets import target_name

GROUP = "scheduling.run.ai"
QUEUE_VERSION, PODGROUP_VERSION = "v2", "v2alpha2"
QUEUES = kube.custom_resource(GROUP, QUEUE_VERSION, "queues")
PODGROUPS = kube.custom_resource(GROUP, PODGROUP_VERSION, "podgroups")
GROUP_ANNOTATION = "pod-group-name"
PODGROUP_KIND = gang_release.PodGroupKind(GROUP, PODGROUP_VERSION, GROUP_ANNOTATION)
QUEUE_LABEL = "kai.scheduler/queue"
FIELDS = {"overQuotaWeight": "weight", "quota": "quota", "limit": "limit"}

# The admission setting that keeps KAI from holding part of a gang (the gang-release advisory).
GANG_ADVICE = (
    "KAI: submit gangs with a PodGroup whose `spec.minMember` is the job's pod count (the "
    "`kai.scheduler/pod-group` annotation or the PodGrouper), so the scheduler binds all or "
    "none of them."
)


# A KAI cluster's ``scheduler_config``: the Kubernetes settings only.
CONFIG = kube.kube_config(Setting("queue_label", str, QUEUE_LABEL, "pod label naming its queue"))


class KaiAdapter(kube.PodGroupAdapter):
    id = "kai"
    capabilities = kube.kube_capabilities(GANG_ADVICE)
    config = CONFIG
    podgroup_kind = PODGROUP_KIND

    def configure(self, own: Mapping[str, Any]) -> None:
        self.queue_label = own["queue_label"]

    def own_resources(self, served: Mapping[str, tuple[str, ...]]) -> Sequence[kube.Resource]:
        if QUEUE_VERSION not in served.get(GROUP, ()):
            raise kube.SchedulerError(
                f"the API server does not serve {GROUP}/{QUEUE_VERSION}: is the KAI scheduler "
                "installed?",
                permanent=True,
            )
        return (PODGROUPS, QUEUES)

    def state_of(self, read: kube.KubeRead) -> kube.SchedulerState:
        return build_state(read, self.settings, queue_label=self.queue_label)

    def read_events(self, cursor: str | None) -> kube.EventBatch:
        """Events since ``cursor``, plus each waiting PodGroup's newest scheduling condition as
        a ``failed_scheduling`` event (stored once: its dedup key holds the condition's time)."""
        pods, podgroups = self._mirror(kube.PODS), self._mirror(PODGROUPS)
        batch = objects.read_events(
            self.api,
            self.settings,
            self.key,
            cursor,
            [pods, podgroups],
            lambda: kube.pod_job_lookup(pods.items.values(), GROUP_ANNOTATION),
        )
        waiting = (scheduling_event(g) for g in podgroups.items.values())
        return kube.with_events(batch, (e for e in waiting if e is not None))

    def apply_own(self, change: Mapping[str, Any], *, dry_run: bool) -> kube.ChangeResult | None:
        if change.get("kind") != "queue-weight":
            return None
        name = target_name(change)
        field = str(change.get("field") or "overQuotaWeight")
        if field not in FIELDS:
            raise kube.SchedulerError(
                f"queue-weight: kai sets {', '.join(FIELDS)} of a queue's GPUs, not {field!r}",
                permanent=True,
            )
        value = queue_value(field, change.get("to"))

        def before_of(queue: Mapping[str, Any]) -> Any:
            gpu = ((queue.get("spec") or {}).get("resources") or {}).get("gpu") or {}
            return gpu.get(field, 1 if field == "overQuotaWeight" else None)

        return kube.patch_cluster_object(
            self.api,
            self.settings,
            change,
            kube.ClusterObject(GROUP, QUEUE_VERSION, "queues", name, f"KAI queue {name}"),
            before_of=before_of,
            patch_of=lambda queue: queue_patch(queue, field, value),
            after=value,
            message=lambda before: f"KAI queue {name}: resources.gpu.{field} {before} → {value}",
            dry_run=dry_run,
        )


def queue_value(field: str, value: Any) -> int | float:
    """A GPU quota, limit (``-1``: unlimited) or over-quota weight (> 0) to write."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise kube.SchedulerError(
            f"queue-weight: 'to' must be a number, got {value!r}", permanent=True
        )
    if field == "overQuotaWeight" and not value > 0:
        raise kube.SchedulerError(
            f"queue-weight: an over-quota weight must be > 0, got {value!r}", permanent=True
        )
    if field != "overQuotaWeight" and value < 0 and value != -1:
        raise kube.SchedulerError(
            f"queue-weight: a GPU {field} is >= 0 or -1 (unlimited), got {value!r}",
            permanent=True,
        )
    if abs(value) > 1_000_000:
        raise kube.SchedulerError(f"queue-weight: {value} is implausibly large", permanent=True)
    return int(value) if value == int(value) else float(value)


def queue_patch(queue: Mapping[str, Any], field: str, value: int | float) -> dict[str, Any]:
    """The merge patch of one GPU field of a KAI Queue, guarded by its resourceVersion."""
    return kube.guarded(queue, {"resources": {"gpu": {field: value}}})


# -- state ---------------------------------------------------------------------------------------


def queue_row(queue: Mapping[str, Any], settings: kube.KubeSettings) -> dict[str, Any]:
    spec = queue.get("spec") or {}
    gpu = (spec.get("resources") or {}).get("gpu") or {}
    name = kube.meta(queue).get("name")
    row: dict[str, Any] = {
        "name": name,
        "tenant": kube.labels(queue).get(settings.tenant_label) or name,
        "weight": gpu.get("overQuotaWeight", 1),
    }
    quota, limit = gpu.get("quota"), gpu.get("limit")
    if isinstance(quota, int | float) and quota >= 0:
        row["deserved_gpus"] = quota
    if isinstance(limit, int | float) and limit >= 0 and "limit" in gpu:
        row["capability_gpus"] = max(limit, row.get("deserved_gpus", 0))
    if spec.get("parentQueue"):
        row["parent"] = spec["parentQueue"]
    return row


def pending_reason(podgroup: Mapping[str, Any]) -> str | None:
    """The newest scheduling condition's reasons (``OverLimit: ...``), else its reason."""
    conditions = (podgroup.get("status") or {}).get("schedulingConditions") or ()
    if not conditions:
        return None
    newest = max(conditions, key=lambda c: str(c.get("lastTransitionTime") or ""))
    reasons = [
        f"{r.get('reason')}: {r.get('message')}" if r.get("message") else str(r.get("reason"))
        for r in newest.get("reasons") or ()
        if r.get("reason")
    ]
    if reasons:
        return "; ".join(reasons)
    reason, message = newest.get("reason"), newest.get("message")
    if not reason and not message:
        return None
    return f"{reason or newest.get('type')}: {message}" if message else str(reason)


def scheduling_event(podgroup: Mapping[str, Any]) -> dict[str, Any] | None:
    """A PodGroup's newest ``schedulingConditions`` entry as a ``failed_scheduling`` event
    (reason ``OverLimit``, ``NonPreemptibleOverQuota``, ...); None without one."""
    conditions = (podgroup.get("status") or {}).get("schedulingConditions") or ()
    if not conditions:
        return None
    newest = max(conditions, key=lambda c: str(c.get("lastTransitionTime") or ""))
    moment = objects.rfc3339(newest.get("lastTransitionTime"))
    if moment is None:
        return None
    reasons = [r for r in newest.get("reasons") or () if r.get("reason")]
    reason = str((reasons[0] if reasons else newest).get("reason") or newest.get("type") or "")
    return kube.waiting_event(
        podgroup,
        time=moment,
        reason=reason or "Unschedulable",
        message=pending_reason(podgroup) or "",
        key=("kai", newest.get("transitionID") or "", reason, moment),
    )


def build_state(
    read: kube.KubeRead, settings: kube.KubeSettings, *, queue_label: str = QUEUE_LABEL
) -> kube.SchedulerState:
    """The snapshot's nodes, queues and jobs from KAI's objects (its PodGroups and Queues,
    :meth:`KaiAdapter.own_resources`) (pure)."""
    podgroups, queues = read.own
    layout = kube.GpuLayout.of(read.nodes, read.pods, settings, read.view)
    indexes, pools = layout.indexes, layout.pools
    rows, tenants = kube.queue_table(queues, settings, queue_row)
    by_group = layout.pods_by_group(GROUP_ANNOTATION)
    jobs = []
    grouped: set[str] = set()
    for podgroup in podgroups:
        job = podgroup_job(
            podgroup, by_group.get(kube.namespaced_name(podgroup), []), indexes, pools
        )
        if job is None:
            continue
        job["tenant"] = tenants.get(job["queue"], job["queue"])
        jobs.append(job)
        grouped.add(job["id"])
    lone = [
        p
        for p in layout.gpu_pods
        if f"{p.namespace}/{p.annotations.get(GROUP_ANNOTATION)}" not in grouped
    ]
    native_jobs, taken = layout.native_gangs(read.native, lone, read.pods)
    jobs.extend(native_jobs)
    for pod in lone:
        if pod.uid in taken:
            continue
        job = podgroup_job(
            {"metadata": {"name": pod.name, "namespace": pod.namespace}}, [pod], indexes, pools
        )
        if job is not None:
            job["id"] = pod.key
            job["queue"] = pod.labels.get(queue_label) or job["queue"]
            job["tenant"] = tenants.get(job["queue"], pod.namespace)
            jobs.append(job)
    return layout.state(read.nodes, rows, jobs, kube.with_queue_parents({"kind": "kai"}, rows))


def podgroup_job(
    podgroup: Mapping[str, Any],
    members: list[objects.GpuPod],
    indexes: Mapping[str, list[int]],
    pools: Mapping[str, str],
) -> dict[str, Any] | None:
    """A KAI PodGroup (with its GPU pods) as a snapshot job; None when no pod asks GPUs."""
    if not members:
        return None
    spec = podgroup.get("spec") or {}
    min_member = max(1, dra.count(spec.get("minMember"), 1))
    gang = objects.pod_gang(members, indexes, pools)
    bound = len(gang.allocation)
    phases = {p.phase for p in members}
    live = [p for p in members if p.phase not in ("Succeeded", "Failed")]
    if phases <= {"Succeeded"}:
        state = "completed"
    elif not live:
        state = "failed"
    elif bound >= min_member:
        state = "running"
    else:
        state = "pending"
    queue = spec.get("queue") or "default-queue"
    size = max(min_member, len(live), bound)
    job: dict[str, Any] = {
        "id": kube.namespaced_name(podgroup),
        "name": kube.meta(podgroup).get("name"),
        "queue": queue,
        "pool": gang.pool,
        "priority": gang.priority,
        "state": state,
        "submitted": objects.rfc3339(kube.meta(podgroup).get("creationTimestamp"))
        or min((p.created for p in members if p.created), default=None),
        "started": gang.started if state != "pending" else None,
        "ended": gang.ended if state in ("completed", "failed") else None,
        "pods": size,
        "gpus_per_pod": gang.gpus_per_pod or 0,
        "gang": min_member > 1,
        "min_member": min(min_member, size),
        "allocation": gang.allocation if state in ("pending", "running") else [],
        "pending_reason": pending_reason(podgroup) if state == "pending" else None,
        "partial_since": gang.partial_since if state == "pending" and bound else None,
    }
    return {k: v for k, v in job.items() if v is not None}
