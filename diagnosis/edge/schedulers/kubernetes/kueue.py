"""Kueue (``kueue.x-k8s.io``) as a scheduler adapter.

Reads Nodes, Pods, Events, Workloads, ClusterQueues and LocalQueues through
:mod:`diagnosis.edge.schedulers.kubernetes.client` (list, then watch from the resourceVersion).
Kueue admits quota; kube-scheduler places pods, so the adapter reports no placement policy.

- A **Workload** is a job: its pod sets give the shape (the pod sets that ask GPUs; their counts
  add up to ``pods``, ``minCount`` to ``min_member``, the largest per-pod ask is
  ``gpus_per_pod``), its conditions the state (``Finished`` → completed/failed, ``Admitted`` →
  running, otherwise pending with the ``QuotaReserved``/``Evicted`` message as the reason), its
  evictions the ``preemptions``, and the pods it owns (through its owner, e.g. the batch Job, or
  the ``kueue.x-k8s.io/pod-group-name`` label) the allocation.
- A **ClusterQueue** is a queue: ``fairSharing.weight`` is its weight, the GPU
  ``nominalQuota`` summed over flavors its deserved GPUs, nominal + ``borrowingLimit`` its
  capability (none when it may borrow without limit in a cohort), and its cohort is kept.
- A **LocalQueue** maps a namespace onto a ClusterQueue; the namespace (or the LocalQueue's
  tenant label) is the tenant of the workloads submitted to it.

Writes: ``queue-weight`` sets ``ClusterQueue.spec.fairSharing.weight`` (merge patch with the
resourceVersion; ``dryRun=All`` for a dry run); ``drain-node`` cordons and evicts.

Settings (:data:`CONFIG`): those of
:data:`~diagnosis.edge.schedulers.kubernetes.client.KUBE_SETTINGS` plus ``api_version``
(``v1beta1``, the default, or ``v1beta2``) and ``flavor_pools`` (ResourceFlavor name → pool, so a
pending workload's pool is known before it runs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from diagnosis.core.numbers import whole_or_float
from diagnosis.edge.config import Setting
from diagnosis.edge.schedulers.kubernetes import base as kube
from diagnosis.edge.schedulers.kubernetes import gang_release, objects
from diagnosis.edge.schedulers.targets import target_name

GROUP = "kueue.x-k8s.io"
API_VERSIONS = ("v1beta1", "v1beta2")
AUTO = "auto"  # discover: v1beta2 where served (Kueue 0.15+), else v1beta1
# Why a workload waits, from its QuotaReserved condition (Kueue's reasons).
PENDING_REASONS = (
    "Pending",
    "WaitingForQuota",
    "ExceedsMaxQuota",
    "TopologyPlacementFailed",
    "NoMatchingFlavor",
    "Inadmissible",
)
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"


def _flavor_pools(value: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()}


# The admission setting that keeps Kueue from holding part of a gang (the gang-release advisory).
GANG_ADVICE = (
    "Kueue: turn on all-or-nothing admission with requeueing in the Kueue manager's "
    "Configuration (ConfigMap `kueue-manager-config`, then restart the controller): "
    "`waitForPodsReady: {enable: true, timeout: 5m, blockAdmission: true, "
    "requeuingStrategy: {timestamp: Eviction, backoffBaseSeconds: 60, backoffLimitCount: 5}}`"
    " -- a workload whose pods are not all ready within the timeout is evicted and requeued."
)


# A Kueue cluster's ``scheduler_config``: the Kubernetes settings and Kueue's own.
CONFIG = kube.kube_config(
    Setting(
        "api_version",
        str,
        AUTO,
        "Kueue's API version (auto: v1beta2 where served, else v1beta1)",
        choices=(AUTO, *API_VERSIONS),
    ),
    Setting(
        "flavor_pools",
        dict,
        {},
        "ResourceFlavor name -> pool (a pending workload's pool is known before it runs)",
        check=_flavor_pools,
    ),
)


class KueueAdapter(kube.KubeAdapter):
    id = "kueue"
    capabilities = kube.kube_capabilities(GANG_ADVICE)
    config = CONFIG

    def configure(self, own: Mapping[str, Any]) -> None:
        self.configured_version = own["api_version"]
        self.flavor_pools = own["flavor_pools"]
        self._served: dict[str, tuple[str, ...]] | None = None

    def served(self) -> dict[str, tuple[str, ...]]:
        """Discovery, once per adapter (the API version to speak depends on it)."""
        if self._served is None:
            self._served = super().served()
        return self._served

    @property
    def version(self) -> str:
        """The Kueue API version to speak: the configured one, or (``auto``) v1beta2 where the
        server serves it (Kueue 0.20 stops serving v1beta1, 0.21 removes it), else v1beta1."""
        served = self.served().get(GROUP, ())
        if self.configured_version != AUTO:
            if served and self.configured_version not in served:
                raise kube.SchedulerError(
                    f"scheduler_config.api_version: the cluster serves {GROUP} "
                    f"{', '.join(served)}, not {self.configured_version}",
                    permanent=True,
                )
            return self.configured_version
        for version in ("v1beta2", "v1beta1"):
            if version in served:
                return version
        raise kube.SchedulerError(
            f"the API server does not serve {GROUP} (v1beta2 or v1beta1): is Kueue installed?",
            permanent=True,
        )

    def _resource(self, plural: str):
        return kube.custom_resource(GROUP, self.version, plural)

    def own_resources(self, served: Mapping[str, tuple[str, ...]]) -> Sequence[kube.Resource]:
        return [self._resource(p) for p in ("workloads", "clusterqueues", "localqueues", "cohorts")]

    def state_of(self, read: kube.KubeRead) -> kube.SchedulerState:
        return build_state(read, self.settings, self.flavor_pools)

    def read_events(self, cursor: str | None) -> kube.EventBatch:
        """Events since ``cursor`` (the Events' resourceVersion); None lists the current ones.
        Each waiting workload's ``QuotaReserved`` reason is an event too (its dedup key holds
        the reason and the condition's time, so it is stored once)."""
        pods, workloads = self._mirror(kube.PODS), self._mirror(self._resource("workloads"))
        batch = objects.read_events(
            self.api,
            self.settings,
            self.key,
            cursor,
            [pods, workloads],
            lambda: event_job_lookup(pods.items.values(), workloads.items.values(), self.settings),
        )
        said = {(e["job"], e["reason"]) for e in batch.events}
        waiting = [
            e
            for w in workloads.items.values()
            if (e := quota_event(w)) is not None and (e["job"], e["reason"]) not in said
        ]
        return kube.with_events(batch, waiting)

    def apply_change(self, change: Mapping[str, Any], *, dry_run: bool) -> kube.ChangeResult:
        kind = change.get("kind")
        if kind == "queue-weight" and change.get("field") == "cohort-weight":
            return self._set_weight(
                target_name(change), change, dry_run=dry_run, plural="cohorts", what="Cohort"
            )
        if kind == "queue-weight" and change.get("field") not in (None, "weight"):
            raise kube.SchedulerError(
                f"queue-weight: kueue sets a ClusterQueue's or a Cohort's (cohort-weight) "
                f"fair-sharing weight, not {change.get('field')!r}",
                permanent=True,
            )
        if kind == "queue-weight":
            return self._set_weight(target_name(change), change, dry_run=dry_run)
        if kind == "drain-node":
            return objects.drain_node(
                self.api, self.settings, change, target_name(change), dry_run=dry_run
            )
        if kind == "gang-release":
            return gang_release.deactivate_workload(
                self.api,
                self.settings,
                change,
                target_name(change),
                group=GROUP,
                version=self.version,
                dry_run=dry_run,
            )
        if kind == "placement-policy":
            raise kube.SchedulerError(
                "kueue admits quota and does not place pods: set kube-scheduler's "
                "NodeResourcesFit scoring strategy (MostAllocated to pack GPUs) in its "
                "KubeSchedulerConfiguration",
                permanent=True,
            )
        raise kube.SchedulerError(f"kueue cannot apply {kind!r}", permanent=True)

    def _set_weight(
        self,
        name: str,
        change: Mapping[str, Any],
        *,
        dry_run: bool,
        plural: str = "clusterqueues",
        what: str = "ClusterQueue",
    ) -> kube.ChangeResult:
        """``spec.fairSharing.weight`` of a ClusterQueue, or of a Cohort (the knob when a
        ClusterQueue is alone in its cohort)."""
        weight = fair_sharing_weight(change.get("to"))
        return kube.patch_cluster_object(
            self.api,
            self.settings,
            change,
            kube.ClusterObject(GROUP, self.version, plural, name, f"{what} {name}"),
            before_of=weight_of,
            patch_of=lambda queue: weight_patch(queue, weight),
            after=whole_or_float(Decimal(weight)),
            message=lambda before: f"{what} {name}: fairSharing.weight {before} → {weight}",
            dry_run=dry_run,
        )


# -- queues --------------------------------------------------------------------------------------


def weight_of(cluster_queue: Mapping[str, Any]) -> int | float:
    """``spec.fairSharing.weight`` (a quantity, default 1) as a number."""
    raw = ((cluster_queue.get("spec") or {}).get("fairSharing") or {}).get("weight", 1)
    value = kube.quantity(raw)
    return 1 if value is None else whole_or_float(value)


def fair_sharing_weight(value: Any) -> str:
    """A fair-sharing weight to write: a number > 0 (Kueue takes a quantity: 0 means the queue
    only uses what others leave), written as a quantity string."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise kube.SchedulerError(
            f"queue-weight: 'to' must be a number > 0, got {value!r}", permanent=True
        )
    if value > 1_000_000:
        raise kube.SchedulerError(f"queue-weight: {value} is implausibly large", permanent=True)
    return f"{value:.3f}".rstrip("0").rstrip(".")


def weight_patch(cluster_queue: Mapping[str, Any], weight: str) -> dict[str, Any]:
    """The merge patch that sets a ClusterQueue's fair-sharing weight, guarded by its
    resourceVersion."""
    return kube.guarded(cluster_queue, {"fairSharing": {"weight": weight}})


def cohort_of(cluster_queue: Mapping[str, Any]) -> str | None:
    spec = cluster_queue.get("spec") or {}
    return spec.get("cohortName") or spec.get("cohort") or None  # v1beta2 / v1beta1


def gpu_quota(cluster_queue: Mapping[str, Any], resource: str) -> tuple[int | None, int | None]:
    """(nominal GPUs, capability GPUs) over the ClusterQueue's flavors. Capability is nominal +
    borrowing limits; None when some flavor may borrow without limit from a cohort."""
    nominal = Decimal(0)
    borrowing = Decimal(0)
    unlimited = False
    found = False
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for entry in flavor.get("resources") or ():
                if entry.get("name") != resource:
                    continue
                found = True
                nominal += kube.quantity(entry.get("nominalQuota")) or 0
                limit = kube.quantity(entry.get("borrowingLimit"))
                if limit is None:
                    unlimited = True
                else:
                    borrowing += limit
    if not found:
        return None, None
    if unlimited and cohort_of(cluster_queue):
        return objects.whole(nominal), None
    return objects.whole(nominal), objects.whole(nominal + (0 if unlimited else borrowing))


def queue_rows(
    cluster_queues: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    settings: kube.KubeSettings,
) -> list[dict[str, Any]]:
    namespaces: dict[str, set[str]] = defaultdict(set)
    for local in local_queues:
        target = (local.get("spec") or {}).get("clusterQueue")
        if target:
            namespaces[target].add(local_tenant(local, settings))
    rows = []
    for queue in cluster_queues:
        name = kube.meta(queue).get("name")
        tenants = namespaces.get(name, set())
        tenant = kube.labels(queue).get(settings.tenant_label) or (
            next(iter(tenants)) if len(tenants) == 1 else name
        )
        nominal, capability = gpu_quota(queue, settings.gpu_resource)
        row = {
            "name": name,
            "tenant": tenant,
            "weight": weight_of(queue),
            "deserved_gpus": nominal,
            "capability_gpus": capability,
            "cohort": cohort_of(queue),
        }
        rows.append({k: v for k, v in row.items() if v is not None})
    return sorted(rows, key=lambda r: r["name"])


def local_tenant(local_queue: Mapping[str, Any], settings: kube.KubeSettings) -> str:
    return kube.labels(local_queue).get(settings.tenant_label) or str(
        kube.meta(local_queue).get("namespace")
    )


# -- workloads -----------------------------------------------------------------------------------


def podset_gpus(podset: Mapping[str, Any], resource: str) -> int:
    return objects.pod_gpu_request(((podset.get("template") or {}).get("spec") or {}), resource)


def workload_state(workload: Mapping[str, Any]) -> str:
    finished = kube.condition(workload, "Finished")
    if finished is not None and finished.get("status") == "True":
        return "failed" if finished.get("reason") == "Failed" else "completed"
    if kube.condition_true(workload, "Admitted"):
        return "running"
    return "pending"


def workload_pending_reason(workload: Mapping[str, Any]) -> str | None:
    for kind in ("Evicted", "Preempted", "Requeued"):
        entry = kube.condition(workload, kind)
        if entry is not None and entry.get("status") == "True":
            return f"{kind}: {entry.get('reason', '')}: {entry.get('message', '')}".rstrip(": ")
    entry = kube.condition(workload, "QuotaReserved")
    if entry is not None and entry.get("status") == "False":
        return f"{entry.get('reason', 'Pending')}: {entry.get('message', '')}".rstrip(": ")
    return None


def preemptions(workload: Mapping[str, Any]) -> int:
    status = workload.get("status") or {}
    evictions = (status.get("schedulingStats") or {}).get("evictions") or ()
    return sum(int(e.get("count") or 0) for e in evictions if e.get("reason") == "Preempted")


def workload_flavor(workload: Mapping[str, Any], resource: str) -> str | None:
    admission = (workload.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or ():
        flavor = (assignment.get("flavors") or {}).get(resource)
        if flavor:
            return str(flavor)
    return None


def workload_pods(
    workloads: Iterable[Mapping[str, Any]], pods: Iterable[objects.GpuPod]
) -> dict[str, list[objects.GpuPod]]:
    """The GPU pods of each workload (by ``namespace/name``): pods labelled with its pod group,
    pods owned by the workload's owner (a batch Job, a JobSet's Job ...), or the pod that owns
    the workload itself (Kueue's plain-pod integration)."""
    by_owner: dict[str, str] = {}
    by_group: dict[tuple[str, str], str] = {}
    for workload in workloads:
        key = kube.namespaced_name(workload)
        for owner in kube.meta(workload).get("ownerReferences") or ():
            if owner.get("uid"):
                by_owner[str(owner["uid"])] = key
        group = kube.labels(workload).get(POD_GROUP_LABEL)
        if group:
            by_group[(str(kube.meta(workload).get("namespace")), group)] = key
    result: dict[str, list[objects.GpuPod]] = defaultdict(list)
    for pod in pods:
        key = by_group.get((pod.namespace, pod.labels.get(POD_GROUP_LABEL, "")))
        for uid in (*pod.owners, pod.uid):
            key = key or by_owner.get(uid)
        if key is not None:
            result[key].append(pod)
    return result


def workload_job(
    workload: Mapping[str, Any],
    members: list[objects.GpuPod],
    indexes: Mapping[str, list[int]],
    pools: Mapping[str, str],
    local_queues: Mapping[tuple[str, str], Mapping[str, Any]],
    settings: kube.KubeSettings,
    flavor_pools: Mapping[str, str],
) -> dict[str, Any] | None:
    """A Workload as a snapshot job; None when no pod set asks for GPUs."""
    spec = workload.get("spec") or {}
    gpu_sets = [
        (podset, podset_gpus(podset, settings.gpu_resource)) for podset in spec.get("podSets") or ()
    ]
    gpu_sets = [(podset, gpus) for podset, gpus in gpu_sets if gpus > 0]
    if not gpu_sets:
        return None
    pods = sum(int(podset.get("count") or 1) for podset, _ in gpu_sets)
    min_member = sum(
        int(podset.get("minCount") or podset.get("count") or 1) for podset, _ in gpu_sets
    )
    per_pod = max(gpus for _, gpus in gpu_sets)
    namespace = str(kube.meta(workload).get("namespace"))
    local = local_queues.get((namespace, str(spec.get("queueName") or "")))
    admission = (workload.get("status") or {}).get("admission") or {}
    queue = admission.get("clusterQueue") or ((local or {}).get("spec") or {}).get("clusterQueue")
    state = workload_state(workload)
    gang = objects.pod_gang(members, indexes, pools, per_pod)
    flavor = workload_flavor(workload, settings.gpu_resource)
    admitted = kube.condition(workload, "Admitted")
    finished = kube.condition(workload, "Finished")
    job = {
        "id": kube.namespaced_name(workload),
        "name": kube.meta(workload).get("name"),
        "tenant": local_tenant(local, settings) if local else namespace,
        "queue": queue,
        "pool": flavor_pools.get(flavor or "") or gang.pool,
        "kind": kube.labels(workload).get(settings.kind_label),
        "priority": int(spec.get("priority") or 0),
        "state": state,
        "submitted": objects.rfc3339(kube.meta(workload).get("creationTimestamp")),
        "started": (
            objects.rfc3339((admitted or {}).get("lastTransitionTime"))
            if admitted is not None and admitted.get("status") == "True"
            else gang.started
        )
        if state != "pending"
        else None,
        "ended": objects.rfc3339((finished or {}).get("lastTransitionTime"))
        if state in ("completed", "failed")
        else None,
        "pods": max(pods, len(gang.allocation)),
        "gpus_per_pod": per_pod,
        "gang": pods > 1,
        "min_member": min(min_member, max(pods, len(gang.allocation))),
        "allocation": gang.allocation if state in ("pending", "running") else [],
        "pending_reason": workload_pending_reason(workload) if state == "pending" else None,
        "partial_since": gang.partial_since if state == "pending" and gang.allocation else None,
        "preemptions": preemptions(workload),
    }
    return {k: v for k, v in job.items() if v is not None}


def cohort_rows(cohorts: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Kueue Cohorts: each one's ``fairSharing.weight`` (default 1) and parent cohort."""
    rows = {}
    for cohort in cohorts:
        spec = cohort.get("spec") or {}
        value = kube.quantity((spec.get("fairSharing") or {}).get("weight", 1))
        row: dict[str, Any] = {"weight": 1 if value is None else whole_or_float(value)}
        parent = spec.get("parentName") or spec.get("parent")
        if parent:
            row["parent"] = parent
        rows[str(kube.meta(cohort).get("name"))] = row
    return rows


def quota_event(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """A waiting workload's ``QuotaReserved: False`` condition as a ``failed_scheduling`` event
    (reason ``WaitingForQuota``, ``ExceedsMaxQuota``, ``TopologyPlacementFailed``,
    ``NoMatchingFlavor``, ...); None when it is not waiting for quota."""
    entry = kube.condition(workload, "QuotaReserved")
    if entry is None or entry.get("status") != "False" or workload_state(workload) != "pending":
        return None
    moment = objects.rfc3339(entry.get("lastTransitionTime"))
    if moment is None:
        return None
    reason = str(entry.get("reason") or "Pending")
    return kube.waiting_event(
        workload,
        time=moment,
        reason=reason,
        message=str(entry.get("message") or ""),
        key=("kueue", "QuotaReserved", reason, moment),
    )


def build_state(
    read: kube.KubeRead, settings: kube.KubeSettings, flavor_pools: Mapping[str, str] | None = None
) -> kube.SchedulerState:
    """The snapshot's nodes, queues and jobs from Kueue's objects (its Workloads, ClusterQueues,
    LocalQueues and Cohorts, :meth:`KueueAdapter.own_resources`) (pure); with DRA's view, the
    GPUs of DRA nodes; with native Workloads (``scheduling.k8s.io``), the gangs of pods that no
    Kueue workload owns; the cohorts' weights in ``scheduler.cohorts``."""
    workloads, cluster_queues, local_queues, cohorts = read.own
    layout = kube.GpuLayout.of(read.nodes, read.pods, settings, read.view)
    indexes, pools, gpu_pods = layout.indexes, layout.pools, layout.gpu_pods
    locals_by_name = {
        (str(kube.meta(q).get("namespace")), str(kube.meta(q).get("name"))): q for q in local_queues
    }
    members = workload_pods(workloads, gpu_pods)
    jobs = []
    for workload in workloads:
        job = workload_job(
            workload,
            members.get(kube.namespaced_name(workload), []),
            indexes,
            pools,
            locals_by_name,
            settings,
            flavor_pools or {},
        )
        if job is not None:
            jobs.append(job)
    owned = {p.uid for group in members.values() for p in group}
    unowned = [p for p in gpu_pods if p.uid not in owned]
    native_jobs, _ = layout.native_gangs(read.native, unowned, read.pods)
    jobs.extend(native_jobs)
    scheduler: dict[str, Any] = {"kind": "kueue"}
    cohort_table = cohort_rows(cohorts)
    if cohort_table:
        scheduler["cohorts"] = cohort_table
        # The fair-sharing tree: a ClusterQueue under its Cohort (where the Cohort object
        # exists; an implicit cohort has no weight to say).
        parents = {
            kube.meta(q).get("name"): cohort_of(q)
            for q in cluster_queues
            if cohort_of(q) in cohort_table
        }
        if parents:
            scheduler["queue_parents"] = dict(sorted(parents.items()))
    queues = queue_rows(cluster_queues, local_queues, settings)
    return layout.state(read.nodes, queues, jobs, scheduler)


def event_job_lookup(
    pods: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    settings: kube.KubeSettings,
) -> Callable[[Mapping[str, Any]], str | None]:
    """``job_of(involvedObject)`` for events: a Workload itself; a GPU pod's workload or, when
    it has none, the pod."""
    gpu_pods = [p for p in (objects.gpu_pod(pod, settings) for pod in pods) if p is not None]
    pod_job = {
        (pod.namespace, pod.name): key
        for key, members in workload_pods(workloads, gpu_pods).items()
        for pod in members
    }

    def job_of(involved: Mapping[str, Any]) -> str | None:
        namespace, name = involved.get("namespace"), involved.get("name")
        if not name:
            return None
        if involved.get("kind") == "Workload":
            return f"{namespace}/{name}"
        if involved.get("kind") == "Pod":
            return pod_job.get((namespace, name), f"{namespace}/{name}")
        return None

    return job_of
