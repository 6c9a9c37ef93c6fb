"""Volcano (``scheduling.volcano.sh/v1beta1``) as a scheduler adapter.

Reads Nodes, Pods, Events, PodGroups and Queues through
:mod:`diagnosis.edge.schedulers.kubernetes.client` (list, then watch from the resourceVersion)
and the volcano-scheduler ConfigMap (the binpack plugin decides the GPU placement policy). A
PodGroup is a job: ``minMember`` makes it a gang, its pods (annotation
``scheduling.k8s.io/group-name``) give its shape and allocation, the phase and the
``Unschedulable`` condition (reasons ``NotEnoughResources``, ``NotEnoughTasks``) its state and
pending reason. A GPU pod outside any PodGroup is a job of one pod.

Writes (:meth:`VolcanoAdapter.apply`), each with optimistic concurrency (the object's
resourceVersion in the patch) and ``dryRun=All`` for a dry run:

- ``queue-weight``: ``Queue.spec.weight`` (an integer 1..65535), merge patch;
- ``placement-policy``: the binpack plugin's GPU weight in the scheduler ConfigMap (Volcano's
  binpack is scheduler-wide, so the change applies to every pool);
- ``drain-node``: ``spec.unschedulable`` plus eviction of the node's pods.

Settings (``scheduler_config``, :data:`CONFIG`): those of
:data:`~diagnosis.edge.schedulers.kubernetes.client.KUBE_SETTINGS` plus
``scheduler_configmap`` (``namespace/name``, default
``volcano-system/volcano-scheduler-configmap``), ``scheduler_conf_key`` (default
``volcano-scheduler.conf``), ``binpack_gpu_weight`` (default 10) and ``dra_device_classes``
(the DRA DeviceClasses whose ``deviceclass/<class>`` quota keys count GPUs, default NVIDIA's
``gpu.nvidia.com`` and ``mig.nvidia.com``). See docs/integrations.md, "Volcano".

A Queue's GPU quota (``deserved``, ``capability``, ``guarantee.resource``) is read under the
device plugin's ``gpu_resource`` (``nvidia.com/gpu``) and, for DRA (the capacity plugin since
Volcano 1.15), under ``deviceclass/<class>`` of each of those classes (:class:`QuotaKeys`); a
change to ``deserved`` or ``guarantee`` writes the key the queue already uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from diagnosis.edge.config import Setting
from diagnosis.edge.schedulers.kubernetes import base as kube
from diagnosis.edge.schedulers.kubernetes import dra, gang_release, objects
from diagnosis.edge.schedulers.kubernetes.volcano_conf import (
    placement_of,
    queue_share_plugin,
    with_placement,
)
from diagnosis.edge.schedulers.targets import target_name

GROUP, VERSION = "scheduling.volcano.sh", "v1beta1"
PODGROUPS = kube.custom_resource(GROUP, VERSION, "podgroups")
QUEUES = kube.custom_resource(GROUP, VERSION, "queues")
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
PODGROUP_KIND = gang_release.PodGroupKind(GROUP, VERSION, GROUP_ANNOTATION)
WEIGHT_RANGE = (1, 65535)
DEFAULT_CONFIGMAP = "volcano-system/volcano-scheduler-configmap"
DEFAULT_CONF_KEY = "volcano-scheduler.conf"


def _namespaced(value: str) -> str:
    namespace, _, name = value.partition("/")
    if not namespace or not name:
        raise ValueError("must look like namespace/name")
    return value


def _at_least_one(value: int) -> int:
    if value < 1:
        raise ValueError("must be >= 1")
    return value


# A DeviceClass name is a DNS subdomain (Kubernetes object names).
DEVICE_CLASS_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)
DRA_QUOTA_PREFIX = "deviceclass/"  # Volcano's DRA quota key: deviceclass/<DeviceClass>


def _device_classes(value: list[Any]) -> tuple[str, ...]:
    if not all(isinstance(c, str) and len(c) <= 253 and DEVICE_CLASS_NAME.match(c) for c in value):
        raise ValueError(f"expected a list of DeviceClass names, got {value!r}")
    return tuple(value)


# The admission setting that keeps Volcano from holding part of a gang (the gang-release
# advisory).
GANG_ADVICE = (
    "Volcano: keep the `gang` plugin in the scheduler ConfigMap (`volcano-scheduler-configmap`"
    ", `tiers: [{plugins: [{name: priority}, {name: gang, enablePreemptable: false}, ...]}]`)"
    " and set each PodGroup's `spec.minMember` to the job's pod count; in the Volcano Job, "
    "`spec.minAvailable` = replicas and a `policies: [{event: PodEvicted, action: "
    "RestartJob}]` so a partial job restarts whole."
)


# A Volcano cluster's ``scheduler_config``: the Kubernetes settings and the scheduler's own.
CONFIG = kube.kube_config(
    Setting(
        "scheduler_configmap",
        str,
        DEFAULT_CONFIGMAP,
        "namespace/name of the volcano-scheduler ConfigMap",
        check=_namespaced,
    ),
    Setting("scheduler_conf_key", str, DEFAULT_CONF_KEY, "the ConfigMap's key holding the conf"),
    Setting(
        "binpack_gpu_weight",
        int,
        10,
        "the binpack plugin's GPU weight that placement-policy binpack sets",
        check=_at_least_one,
    ),
    Setting(
        "dra_device_classes",
        list,
        tuple(sorted(dra.GPU_DEVICE_CLASSES)),
        "DeviceClasses whose deviceclass/<class> queue quota keys count GPUs (DRA)",
        check=_device_classes,
    ),
)


@dataclass(frozen=True)
class QuotaKeys:
    """The keys of a Queue's resource lists that count GPUs: the device plugin's extended
    resource (``nvidia.com/gpu``) and, for DRA, Volcano's ``deviceclass/<DeviceClass>`` of each
    GPU class (a device count; ``<dim>.deviceclass/<class>`` keys are capacities, not GPUs)."""

    gpu_resource: str
    device_classes: tuple[str, ...] = tuple(sorted(dra.GPU_DEVICE_CLASSES))

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.gpu_resource, *(DRA_QUOTA_PREFIX + c for c in self.device_classes))

    def present(self, resources: Mapping[str, Any] | None) -> list[str]:
        """The GPU keys a resource list sets, in :attr:`keys` order."""
        return [key for key in self.keys if key in (resources or {})]

    def gpus(self, resources: Mapping[str, Any] | None) -> int | None:
        """The GPUs a resource list sets (over all its GPU keys); None: it sets none."""
        counts = [objects.gpus_in(resources, key) for key in self.present(resources)]
        known = [count for count in counts if count is not None]
        return sum(known) if known else None

    def write_key(self, queue: Mapping[str, Any], field: str) -> str:
        """The key a change of ``field`` (``deserved``, ``guarantee``) writes: the GPU key that
        field already uses, else the one the queue's other quotas use, else ``gpu_resource``.
        A quota split over several GPU keys (device-plugin and DRA GPUs) is refused: one number
        cannot say how to split it."""
        spec = queue.get("spec") or {}
        own = _quota_field(spec, field)
        used = self.present(own) or sorted(
            {
                key
                for name in QUOTA_FIELDS
                if name != field
                for key in self.present(_quota_field(spec, name))
            }
        )
        if len(used) > 1:
            name = kube.meta(queue).get("name")
            raise kube.SchedulerError(
                f"queue {name}: its GPU quota is split over {', '.join(used)}; change it by hand "
                f"(gpuobs sets one {field} number)",
                permanent=True,
            )
        return used[0] if used else self.gpu_resource


QUOTA_FIELDS = ("deserved", "capability", "guarantee")


def _quota_field(spec: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    """A Queue's resource list of ``field``; ``guarantee`` keeps it under ``resource`` (the
    Queue CRD)."""
    value = spec.get(field) or {}
    if field == "guarantee":
        value = (value.get("resource") or {}) if isinstance(value, Mapping) else {}
    return value if isinstance(value, Mapping) else {}


class VolcanoAdapter(kube.PodGroupAdapter):
    id = "volcano"
    capabilities = kube.kube_capabilities(GANG_ADVICE, changes={"placement-policy"})
    config = CONFIG
    podgroup_kind = PODGROUP_KIND

    def configure(self, own: Mapping[str, Any]) -> None:
        namespace, _, name = own["scheduler_configmap"].partition("/")
        self.configmap = (namespace, name)
        self.conf_key = own["scheduler_conf_key"]
        self.binpack_gpu_weight = own["binpack_gpu_weight"]
        self.quota = QuotaKeys(self.settings.gpu_resource, tuple(own["dra_device_classes"]))

    # -- reading ---------------------------------------------------------------------------------

    def own_resources(self, served: Mapping[str, tuple[str, ...]]) -> Sequence[kube.Resource]:
        return (PODGROUPS, QUEUES)

    def state_of(self, read: kube.KubeRead) -> kube.SchedulerState:
        conf = self._conf_or_none()
        if conf is None:
            return build_state(read, self.settings, None, quota=self.quota)
        placement = placement_of(conf, self.settings.gpu_resource)
        return build_state(
            read,
            self.settings,
            placement,
            queue_share=queue_share_plugin(conf),
            quota=self.quota,
        )

    def _conf_or_none(self) -> dict[str, Any] | None:
        """The scheduler configuration; None when it cannot be read (placement and the queue
        share plugin are then unknown, not assumed)."""
        try:
            return self._read_conf()[0]
        except kube.SchedulerError:
            return None

    def read_events(self, cursor: str | None) -> kube.EventBatch:
        """Events since ``cursor`` (the Events' resourceVersion); None lists the current ones."""
        pods = self._mirror(kube.PODS)
        return objects.read_events(
            self.api,
            self.settings,
            self.key,
            cursor,
            [pods],
            lambda: kube.pod_job_lookup(pods.items.values(), GROUP_ANNOTATION),
        )

    # -- writing ---------------------------------------------------------------------------------

    def apply_own(self, change: Mapping[str, Any], *, dry_run: bool) -> kube.ChangeResult | None:
        kind = change.get("kind")
        if kind == "queue-weight" and change.get("field") in ("deserved", "guarantee"):
            return self._set_queue_gpus(target_name(change), change, dry_run=dry_run)
        if kind == "queue-weight" and change.get("field") not in (None, "weight"):
            raise kube.SchedulerError(
                f"queue-weight: volcano sets a queue's weight, deserved or guarantee, not "
                f"{change.get('field')!r}",
                permanent=True,
            )
        if kind == "queue-weight":
            name = target_name(change)
            weight = queue_weight_value(change.get("to"))
            return kube.patch_cluster_object(
                self.api,
                self.settings,
                change,
                kube.ClusterObject(GROUP, VERSION, "queues", name, f"queue {name}"),
                before_of=lambda queue: (queue.get("spec") or {}).get("weight", 1),
                patch_of=lambda queue: queue_weight_patch(queue, weight),
                after=weight,
                message=lambda before: f"queue {name}: weight {before} → {weight}",
                dry_run=dry_run,
            )
        if kind == "placement-policy":
            return self._set_placement(change, dry_run=dry_run)
        return None

    def _set_queue_gpus(
        self, name: str, change: Mapping[str, Any], *, dry_run: bool
    ) -> kube.ChangeResult:
        """The capacity plugin's knobs: a queue's ``deserved`` (or ``guarantee``) GPUs."""
        field = str(change["field"])
        to = change.get("to")
        if isinstance(to, bool) or not isinstance(to, int | float) or to < 0 or to != int(to):
            raise kube.SchedulerError(
                f"queue-weight: {field} GPUs must be a whole number >= 0, got {to!r}",
                permanent=True,
            )
        key = "deserved_gpus" if field == "deserved" else "guarantee_gpus"

        def patch_of(queue: Mapping[str, Any]) -> dict[str, Any]:
            row = queue_row(queue, self.settings, self.quota)
            capability, deserved = row.get("capability_gpus"), row.get("deserved_gpus")
            if field == "deserved" and capability is not None and to > capability:
                raise kube.SchedulerError(
                    f"queue {name}: deserved {int(to)} would exceed its capability {capability} "
                    "(Volcano refuses it); raise the capability first",
                    permanent=True,
                )
            if field == "guarantee" and deserved is not None and to > deserved:
                raise kube.SchedulerError(
                    f"queue {name}: guarantee {int(to)} would exceed its deserved {deserved}",
                    permanent=True,
                )
            return queue_gpus_patch(queue, field, int(to), self.quota.write_key(queue, field))

        return kube.patch_cluster_object(
            self.api,
            self.settings,
            change,
            kube.ClusterObject(GROUP, VERSION, "queues", name, f"queue {name}"),
            before_of=lambda queue: queue_row(queue, self.settings, self.quota).get(key),
            patch_of=patch_of,
            after=int(to),
            message=lambda before: f"queue {name}: {field} GPUs {before} → {int(to)}",
            dry_run=dry_run,
        )

    def _read_conf(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The scheduler's parsed configuration and the ConfigMap it came from."""
        namespace, name = self.configmap
        try:
            response = k8s.CoreV1Api(self.api).read_namespaced_config_map(
                name,
                namespace,
                _preload_content=False,
                _request_timeout=self.settings.request_timeout_s,
            )
            configmap = json.loads(response.data)
        except ApiException as exc:
            raise kube.scheduler_error(exc, f"reading ConfigMap {namespace}/{name}") from exc
        text = (configmap.get("data") or {}).get(self.conf_key)
        if text is None:
            raise kube.SchedulerError(
                f"ConfigMap {namespace}/{name} has no key {self.conf_key!r}", permanent=True
            )
        try:
            conf = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise kube.SchedulerError(
                f"ConfigMap {namespace}/{name}: {self.conf_key} is not YAML: {exc}",
                permanent=True,
            ) from exc
        if not isinstance(conf, dict):
            raise kube.SchedulerError(
                f"ConfigMap {namespace}/{name}: {self.conf_key} is not a mapping", permanent=True
            )
        return conf, configmap

    def _set_placement(self, change: Mapping[str, Any], *, dry_run: bool) -> kube.ChangeResult:
        target_name(change)
        policy = change.get("to")
        if policy not in ("binpack", "spread"):
            raise kube.SchedulerError(
                f"placement-policy: volcano takes 'binpack' or 'spread', not {policy!r}",
                permanent=True,
            )
        conf, configmap = self._read_conf()
        before = placement_of(conf, self.settings.gpu_resource)
        kube.check_unchanged(change, configmap, before, "the volcano-scheduler ConfigMap")
        new_conf = with_placement(
            conf, str(policy), self.settings.gpu_resource, self.binpack_gpu_weight
        )
        patch = {
            "metadata": {"resourceVersion": kube.meta(configmap).get("resourceVersion")},
            "data": {self.conf_key: yaml.safe_dump(new_conf, sort_keys=False)},
        }
        namespace, name = self.configmap
        command = (
            f"kubectl -n {namespace} patch configmap {name} --type=merge "
            f"-p '{objects.compact_json(patch)}'" + (" --dry-run=server" if dry_run else "")
        )
        try:
            k8s.CoreV1Api(self.api).patch_namespaced_config_map(
                name,
                namespace,
                patch,
                _request_timeout=self.settings.request_timeout_s,
                **objects.dry_run_args(dry_run),
            )
        except ApiException as exc:
            raise kube.write_error(exc, f"ConfigMap {namespace}/{name}") from exc
        return kube.ChangeResult(
            applied=not dry_run,
            dry_run=dry_run,
            before=before,
            after=policy,
            command=command,
            message=(
                f"GPU placement {before} → {policy} (volcano's binpack plugin is "
                "scheduler-wide: every pool)"
            ),
        )


# -- state ---------------------------------------------------------------------------------------


def queue_row(
    queue: Mapping[str, Any], settings: kube.KubeSettings, quota: QuotaKeys | None = None
) -> dict[str, Any]:
    """A Queue as a snapshot queue: its weight and GPU quotas over every GPU key
    (:class:`QuotaKeys`; default: ``settings.gpu_resource`` and NVIDIA's DRA GPU classes)."""
    quota = quota or QuotaKeys(settings.gpu_resource)
    spec = queue.get("spec") or {}
    name = kube.meta(queue).get("name")
    row: dict[str, Any] = {
        "name": name,
        "tenant": kube.labels(queue).get(settings.tenant_label) or name,
        "weight": spec.get("weight", 1),
    }
    for field in QUOTA_FIELDS:
        gpus = quota.gpus(_quota_field(spec, field))
        if gpus is not None:
            row[f"{field}_gpus"] = gpus
    if spec.get("parent") and spec.get("parent") != "root":
        row["parent"] = spec["parent"]
    return row


def podgroup_state(podgroup: Mapping[str, Any], bound: int, min_member: int) -> str:
    status = podgroup.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase == "Completed":
        failed = int(status.get("failed") or 0)
        succeeded = int(status.get("succeeded") or 0)
        return "failed" if failed and succeeded < min_member else "completed"
    if phase == "Running" or bound >= min_member:
        return "running"
    return "pending"  # Pending, Inqueue, Unknown (some pods bound, the gang incomplete)


def pending_reason(podgroup: Mapping[str, Any]) -> str | None:
    entry = kube.condition(podgroup, "Unschedulable")
    if entry is None or entry.get("status") != "True":
        return None
    reason, message = entry.get("reason") or "Unschedulable", entry.get("message") or ""
    return f"{reason}: {message}" if message else str(reason)


def build_state(
    read: kube.KubeRead,
    settings: kube.KubeSettings,
    placement: str | None,
    *,
    queue_share: str | None = None,
    quota: QuotaKeys | None = None,
) -> kube.SchedulerState:
    """The snapshot's nodes, queues and jobs from Volcano's objects (its PodGroups and Queues,
    :meth:`VolcanoAdapter.own_resources`) (pure); with DRA's view, the GPUs of DRA nodes too;
    with native Workloads, their gangs."""
    podgroups, queues = read.own
    layout = kube.GpuLayout.of(read.nodes, read.pods, settings, read.view)
    indexes, pools = layout.indexes, layout.pools
    rows, tenants = kube.queue_table(
        queues, settings, lambda queue, own: queue_row(queue, own, quota)
    )
    by_group = layout.pods_by_group(GROUP_ANNOTATION, ungrouped=True)

    jobs = []
    grouped: set[str] = set()
    for podgroup in podgroups:
        job = podgroup_job(podgroup, by_group, indexes, pools, tenants, settings)
        if job is not None:
            jobs.append(job)
            grouped.add(job["id"])
    lone = [pod for key, members in by_group.items() if key not in grouped for pod in members]
    native_jobs, taken = layout.native_gangs(read.native, lone, read.pods)
    jobs.extend(native_jobs)
    jobs.extend(lone_pod_job(pod, indexes, pools) for pod in lone if pod.uid not in taken)
    scheduler: dict[str, Any] = {"kind": "volcano"}
    if placement is not None:
        scheduler["placement"] = dict.fromkeys(sorted(set(pools.values())), placement)
    if queue_share is not None:
        scheduler["queue_share"] = queue_share
    return layout.state(read.nodes, rows, jobs, kube.with_queue_parents(scheduler, rows))


def podgroup_job(
    podgroup: Mapping[str, Any],
    by_group: Mapping[str, list[objects.GpuPod]],
    indexes: Mapping[str, list[int]],
    pools: Mapping[str, str],
    tenants: Mapping[str, str],
    settings: kube.KubeSettings,
) -> dict[str, Any] | None:
    """A PodGroup as a snapshot job; None when neither its pods nor its minResources ask GPUs."""
    key = kube.namespaced_name(podgroup)
    spec = podgroup.get("spec") or {}
    min_member = max(1, int(spec.get("minMember") or 1))
    members = by_group.get(key, [])
    per_pod = None
    if not members:
        total = objects.gpus_in(spec.get("minResources"), settings.gpu_resource)
        if not total:
            return None
        per_pod = max(1, total // min_member)
    gang = objects.pod_gang(members, indexes, pools, per_pod)
    bound = len(gang.allocation)
    state = podgroup_state(podgroup, bound, min_member)
    queue = spec.get("queue") or "default"
    created = objects.rfc3339(kube.meta(podgroup).get("creationTimestamp"))
    live = [p for p in members if p.phase not in ("Succeeded", "Failed")]
    job: dict[str, Any] = {
        "id": key,
        "name": kube.meta(podgroup).get("name"),
        "tenant": tenants.get(queue, queue),
        "queue": queue,
        "pool": gang.pool,
        "kind": kube.labels(podgroup).get(settings.kind_label),
        "priority": gang.priority,
        "state": state,
        "submitted": created,
        "started": gang.started if state != "pending" else None,
        "ended": (gang.ended or _last_transition(podgroup))
        if state in ("completed", "failed")
        else None,
        "pods": max(min_member, len(live) if state != "completed" else 0, bound),
        "gpus_per_pod": gang.gpus_per_pod or 0,
        "gang": min_member > 1,
        "min_member": min_member,
        "allocation": gang.allocation if state in ("pending", "running") else [],
        "pending_reason": pending_reason(podgroup) if state == "pending" else None,
        "partial_since": gang.partial_since if state == "pending" and bound else None,
    }
    return {k: v for k, v in job.items() if v is not None}


def lone_pod_job(
    pod: objects.GpuPod, indexes: Mapping[str, list[int]], pools: Mapping[str, str]
) -> dict[str, Any]:
    """A GPU pod outside any PodGroup (e.g. scheduled by the default scheduler): a 1-pod job."""
    state = {"Running": "running", "Succeeded": "completed", "Failed": "failed"}.get(
        pod.phase, "pending"
    )
    gang = objects.pod_gang([pod], indexes, pools)
    if state == "pending" and gang.allocation:
        state = "running"
    job = {
        "id": pod.key,
        "name": pod.name,
        "tenant": pod.namespace,
        "pool": gang.pool,
        "priority": pod.priority,
        "state": state,
        "submitted": pod.created,
        "started": pod.started if state != "pending" else None,
        "ended": pod.finished if state in ("completed", "failed") else None,
        "pods": 1,
        "gpus_per_pod": pod.gpus,
        "allocation": gang.allocation if state == "running" else [],
    }
    return {k: v for k, v in job.items() if v is not None}


def _last_transition(obj: Mapping[str, Any]) -> str | None:
    times = [
        objects.rfc3339(c.get("lastTransitionTime"))
        for c in (obj.get("status") or {}).get("conditions") or ()
    ]
    return max((t for t in times if t), default=None)


# -- writes: shared checks -----------------------------------------------------------------------


def queue_weight_value(value: Any) -> int:
    """A Volcano queue weight: an integer in 1..65535 (a float with no fraction is accepted)."""
    low, high = WEIGHT_RANGE
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise kube.SchedulerError(
            f"queue-weight: 'to' must be an integer, got {value!r}", permanent=True
        )
    if not low <= int(value) <= high:
        raise kube.SchedulerError(
            f"queue-weight: volcano weights lie in {low}..{high}, got {int(value)}", permanent=True
        )
    return int(value)


def queue_weight_patch(queue: Mapping[str, Any], weight: int) -> dict[str, Any]:
    """The merge patch that sets a Queue's weight, guarded by its resourceVersion."""
    return kube.guarded(queue, {"weight": weight})


def queue_gpus_patch(queue: Mapping[str, Any], field: str, gpus: int, key: str) -> dict[str, Any]:
    """The merge patch of a Queue's deserved (``spec.deserved``) or guaranteed
    (``spec.guarantee.resource``) GPUs under ``key`` (``nvidia.com/gpu``, or DRA's
    ``deviceclass/gpu.nvidia.com``: :meth:`QuotaKeys.write_key`), guarded by its
    resourceVersion; other resources stay."""
    value = {key: str(gpus)}
    spec = {"deserved": value} if field == "deserved" else {"guarantee": {"resource": value}}
    return kube.guarded(queue, spec)
