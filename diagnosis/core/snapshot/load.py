"""Loading a ``gpuobs.snapshot/v1`` document into a :class:`ClusterSnapshot`: parse, validate
(every problem reported at once, each prefixed by its JSON path) and build the frames."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.snapshot.checks import Checker, SnapshotError
from diagnosis.core.snapshot.frame import (
    EVENT_COLUMNS,
    FRACTION_METRICS,
    GPU_BASE_COLUMNS,
    GPU_KEY,
    GPU_METRICS,
    JOB_COLUMNS,
    MIG_COMPUTE_SLICES,
    NODE_COLUMNS,
    QUEUE_COLUMNS,
    WHOLE_GPU,
    XID_COLUMNS,
    ClusterSnapshot,
)
from diagnosis.core.vocabulary import (
    DEFAULT_WINDOW_S,
    EVENT_KINDS,
    GPU_HEALTH,
    JOB_STATES,
    NODE_STATES,
    SNAPSHOT_FORMAT,
)

MAX_NODE_GPUS = 1024  # GPUs of one node: the GPU frame holds a row for each
MAX_NUMA_NODE = 4095  # Linux's largest NUMA node number (CONFIG_NODES_SHIFT 12)


def load(source: str | Path | bytes | Mapping[str, Any]) -> ClusterSnapshot:
    """Parse and validate a snapshot from a path, JSON text/bytes or an already decoded dict.

    Raises :class:`SnapshotError` listing every problem found, each prefixed by its JSON path.
    """
    if isinstance(source, Mapping):
        document = source
    else:
        if isinstance(source, Path):
            raw: str | bytes = source.read_bytes()
        else:
            raw = source
        try:
            document = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SnapshotError([f"$: not valid JSON ({exc})"]) from exc
        except RecursionError as exc:  # 100,000 nested brackets: refused, never a traceback
            raise SnapshotError(["$: the JSON is nested too deeply"]) from exc
    return _Loader(document).build()


def load_file(path: str | Path) -> ClusterSnapshot:
    return load(read_file(path))


def read_file(path: str | Path) -> bytes:
    """A snapshot file's bytes; one that cannot be read is a :class:`SnapshotError` naming it."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SnapshotError([f"$: cannot read {path}: {exc.strerror or exc}"]) from exc


def validate(document: Any) -> list[str]:
    """Every problem of a decoded document, as path-prefixed lines (empty when valid)."""
    try:
        load(document)
    except SnapshotError as exc:
        return exc.errors
    return []


def topology_errors(value: Any, gpus: int) -> list[str]:
    """Every problem of one node's ``topology`` object for a node of ``gpus`` GPUs, as lines
    prefixed ``topology`` (empty when the loader would take it): what lets a stored upload be
    checked, and skipped by name, before it joins a cluster's document."""
    loader = _Loader(None)
    loader._topology(value, "topology", gpus)
    return loader.check.errors


class _Loader:
    def __init__(self, document: Any) -> None:
        self.check = Checker()
        self.document = document

    def build(self) -> ClusterSnapshot:
        check = self.check
        document = check.mapping(self.document, "$")
        if document is None:
            raise SnapshotError(check.errors)
        fmt = document.get("format")
        if fmt is None:
            raise SnapshotError(["format: required field is missing"])
        if fmt != SNAPSHOT_FORMAT:
            raise SnapshotError(
                [f"format: unknown format version {fmt!r} (expected {SNAPSHOT_FORMAT!r})"]
            )

        cluster = check.string(document, "cluster", "", required=True)
        as_of = check.time(document, "as_of", "", required=True)
        window_s = check.integer(document, "window_s", "", minimum=1, default=DEFAULT_WINDOW_S)
        scheduler = self._scheduler(document.get("scheduler"))
        nodes, node_gpus, topology = self._nodes(check.array(document.get("nodes"), "nodes"))
        gpus, xids = self._gpus(
            check.array(document.get("gpus"), "gpus"),
            nodes[["pool", "gpu_model"]],
            node_gpus,
            topology,
        )
        queues = self._queues(check.array(document.get("queues"), "queues"))
        jobs, allocations = self._jobs(
            check.array(document.get("jobs"), "jobs"), node_gpus, _units(gpus)
        )
        events = self._events(check.array(document.get("events"), "events"))
        if check.errors:
            raise SnapshotError(check.errors)

        extra = {key: value for key, value in document.items() if key not in _TOP_LEVEL_KEYS}
        return ClusterSnapshot(
            cluster=cluster,
            as_of=as_of,
            window_s=window_s,
            scheduler=scheduler,
            nodes=nodes,
            gpus=gpus,
            xids=xids,
            jobs=jobs,
            allocations=allocations,
            queues=queues,
            events=events,
            extra=extra,
        )

    def _scheduler(self, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        scheduler = self.check.mapping(value, "scheduler")
        if scheduler is None:
            return {}
        placement = scheduler.get("placement")
        if placement is not None and not (
            isinstance(placement, dict) and all(isinstance(v, str) for v in placement.values())
        ):
            self.check.error("scheduler.placement", "expected an object of pool -> policy name")
        advice = scheduler.get("gang_advice")
        if advice is not None:
            advice = self.check.mapping(advice, "scheduler.gang_advice")
            if advice is not None:
                self.check.string(advice, "setting", "scheduler.gang_advice", required=True)
        return dict(scheduler)

    def _nodes(self, items: list[Any]):
        check = self.check
        rows: list[dict[str, Any]] = []
        node_gpus: dict[str, int] = {}
        topology: dict[str, tuple[list[int], list[int]]] = {}
        for path, node in check.objects(items, "nodes"):
            name = check.string(node, "name", path, required=True)
            gpus = check.integer(
                node, "gpus", path, required=True, minimum=0, maximum=MAX_NODE_GPUS
            )
            row = {
                "name": name,
                "pool": check.string(node, "pool", path, required=True),
                "gpu_model": check.string(node, "gpu_model", path),
                "gpus": gpus if gpus is not None else 0,
                "state": check.choice(node, "state", path, NODE_STATES),
                "cpu_util": check.number(node, "cpu_util", path, fraction=True),
            }
            if name is None:
                continue
            if name in node_gpus:
                check.error(f"{path}.name", f"duplicate node name {name!r}")
                continue
            node_gpus[name] = row["gpus"]
            topology[name] = self._topology(node.get("topology"), f"{path}.topology", row["gpus"])
            rows.append(row)
        frame = pd.DataFrame(rows, columns=["name", *NODE_COLUMNS])
        frame = frame.astype({"gpus": "int64", "cpu_util": "float64"})
        return _indexed(frame, "name"), node_gpus, topology

    def _topology(self, value: Any, path: str, gpu_count: int) -> tuple[list[int], list[int]]:
        """Per GPU: its NVLink domain number and NUMA node, -1 where unknown. Absent topology (or
        a GPU no domain lists) is unknown, never "PCIe only": a GPU really without NVLink peers
        is listed as a domain of its own."""
        domains = [-1] * gpu_count
        numa = [-1] * gpu_count
        if value is None:
            return domains, numa
        topology = self.check.mapping(value, path)
        if topology is None:
            return domains, numa
        for d, group in enumerate(self.check.array(topology.get("nvlink_domains"), path)):
            group_path = f"{path}.nvlink_domains[{d}]"
            for g, index in enumerate(self.check.array(group, group_path)):
                if not _valid_index(index, gpu_count):
                    self.check.error(
                        f"{group_path}[{g}]", f"GPU {index!r} does not exist ({gpu_count} GPUs)"
                    )
                elif domains[index] != -1:
                    self.check.error(f"{group_path}[{g}]", f"GPU {index} is in two NVLink domains")
                else:
                    domains[index] = d
        numa_value = topology.get("numa")
        numa_list = [] if numa_value is None else self.check.array(numa_value, f"{path}.numa")
        if numa_list and len(numa_list) != gpu_count:
            self.check.error(
                f"{path}.numa", f"lists {len(numa_list)} NUMA nodes for {gpu_count} GPUs"
            )
        else:
            for g, numa_node in enumerate(numa_list):
                if numa_node is None:
                    continue  # unknown for this GPU (nvidia-smi prints N/A)
                number = self.check.whole(
                    numa_node, f"{path}.numa[{g}]", minimum=0, maximum=MAX_NUMA_NODE
                )
                if number is not None:
                    numa[g] = number
        return domains, numa

    def _mig(self, gpu: dict[str, Any], path: str) -> dict[str, Any] | None:
        """The ``mig`` object of a GPU entry as frame values, or None for a whole GPU."""
        value = gpu.get("mig")
        if value is None:
            return None
        check = self.check
        mig = check.mapping(value, f"{path}.mig")
        if mig is None:
            return None
        mig_path = f"{path}.mig"
        instance = check.integer(mig, "instance", mig_path, required=True, minimum=0)
        profile = check.string(mig, "profile", mig_path)
        fraction = check.number(mig, "compute_fraction", mig_path, fraction=True)
        if math.isnan(fraction) and profile is not None:
            slices = _PROFILE_SLICES.match(profile)
            if slices is not None:
                fraction = min(int(slices.group(1)) / MIG_COMPUTE_SLICES, 1.0)
        if instance is None:
            return None
        return {
            "mig_instance": instance,
            "mig_profile": profile,
            "mig_parent_uuid": check.string(mig, "parent_uuid", mig_path),
            "capacity": fraction,
        }

    def _gpus(
        self, items: list[Any], node_facts: pd.DataFrame, node_gpus: dict[str, int], topology
    ):
        check = self.check
        reported: dict[tuple[str, int, int], dict[str, Any]] = {}
        mig_split: dict[tuple[str, int], bool] = {}
        xid_rows: list[tuple[str, int, int, pd.Timestamp]] = []
        extra_columns: set[str] = set()
        for path, gpu in check.objects(items, "gpus"):
            node = check.string(gpu, "node", path, required=True)
            index = check.integer(gpu, "index", path, required=True, minimum=0)
            if node is None or index is None:
                continue
            if node not in node_gpus:
                check.error(f"{path}.node", f"unknown node {node!r}")
                continue
            if index >= node_gpus[node]:
                check.error(
                    f"{path}.index",
                    f"GPU {index} does not exist on node {node} ({node_gpus[node]} GPUs)",
                )
                continue
            mig = self._mig(gpu, path)
            instance = WHOLE_GPU if mig is None else mig["mig_instance"]
            if (node, index, instance) in reported:
                what = "GPU" if mig is None else f"MIG instance {instance} of GPU"
                check.error(path, f"duplicate entry for {what} {node}/{index}")
                continue
            split = mig_split.setdefault((node, index), mig is not None)
            if split != (mig is not None):
                check.error(
                    path,
                    f"GPU {node}/{index} is reported both whole and as MIG instances",
                )
                continue
            row: dict[str, Any] = {
                "uuid": check.string(gpu, "uuid", path),
                "health": check.choice(gpu, "health", path, GPU_HEALTH, default="ok"),
                "nvlink_clique": check.string(gpu, "nvlink_clique", path),
                "index_guessed": check.boolean(gpu, "index_guessed", path, default=False),
                "gpu_model": check.string(gpu, "gpu_model", path),
            }
            if mig is not None:
                row.update({k: v for k, v in mig.items() if k != "mig_instance"})
            for metric, value in gpu.items():
                if metric in _GPU_NON_METRIC_KEYS or (
                    metric not in GPU_METRICS and not isinstance(value, dict)
                ):
                    continue
                stats = check.mapping(value, f"{path}.{metric}")
                if stats is None:
                    continue
                for stat in stats:
                    column = f"{metric}_{stat}"
                    row[column] = check.number(
                        stats, stat, f"{path}.{metric}", fraction=metric in FRACTION_METRICS
                    )
                    extra_columns.add(column)
            for x, xid in enumerate(check.array(gpu.get("xid"), f"{path}.xid")):
                xid_path = f"{path}.xid[{x}]"
                entry = check.mapping(xid, xid_path)
                if entry is None:
                    continue
                code = check.integer(entry, "code", xid_path, required=True, minimum=0)
                time = check.time(entry, "time", xid_path, required=True)
                if code is not None and not pd.isna(time):
                    xid_rows.append((node, index, code, time))
            reported[(node, index, instance)] = row

        names = list(node_gpus)
        counts = np.array([node_gpus[n] for n in names], dtype=np.int64)
        node_col = np.repeat(np.array(names, dtype=object), counts)
        index_col = np.concatenate([np.arange(c) for c in counts]) if len(counts) else []
        frame = pd.DataFrame({"node": node_col, "index": np.asarray(index_col, dtype=np.int64)})
        frame["nvlink_domain"] = np.asarray(
            [d for n in names for d in topology[n][0]], dtype=np.int64
        )
        frame["numa"] = np.asarray([m for n in names for m in topology[n][1]], dtype=np.int64)
        metric_columns = sorted(
            {f"{m}_{s}" for m, stats in GPU_METRICS.items() for s in stats} | extra_columns
        )
        if reported:
            detail = pd.DataFrame(list(reported.values()))
            detail.insert(0, "node", np.array([key[0] for key in reported], dtype=object))
            detail.insert(1, "index", np.array([key[1] for key in reported], dtype=np.int64))
            detail.insert(2, "mig_instance", np.array([key[2] for key in reported], np.int64))
            frame = frame.merge(detail, on=["node", "index"], how="left", indicator="_merge")
            frame["reported"] = frame.pop("_merge").eq("both").to_numpy()
        else:
            frame["reported"] = False
        for column, default in (
            ("uuid", None),
            ("health", "ok"),
            ("nvlink_clique", None),
            ("mig_profile", None),
            ("mig_parent_uuid", None),
        ):
            if column not in frame:
                frame[column] = default
            frame[column] = frame[column].astype(object).where(frame[column].notna(), default)
        if "mig_instance" not in frame:
            frame["mig_instance"] = WHOLE_GPU
        frame["mig_instance"] = frame["mig_instance"].fillna(WHOLE_GPU).astype(np.int64)
        if "capacity" not in frame:
            frame["capacity"] = np.nan
        whole = frame["mig_instance"].to_numpy() == WHOLE_GPU
        frame["capacity"] = np.where(whole, 1.0, frame["capacity"].astype("float64"))
        if "index_guessed" not in frame:
            frame["index_guessed"] = False
        frame["index_guessed"] = frame["index_guessed"].fillna(False).astype(bool)
        for column in metric_columns:
            if column not in frame:
                frame[column] = np.nan
            frame[column] = frame[column].astype("float64")
        frame["pool"] = frame["node"].map(node_facts["pool"]).astype(object)
        # a GPU's own model where the document gives one (a node with several), else its node's
        node_model = frame["node"].map(node_facts["gpu_model"]).astype(object)
        own = frame.get("gpu_model", node_model)
        frame["gpu_model"] = own.astype(object).where(own.notna(), node_model)
        frame["gpu_model"] = frame["gpu_model"].where(frame["gpu_model"].notna(), None)
        frame = frame[[*GPU_BASE_COLUMNS, *metric_columns]]
        frame = frame.sort_values(GPU_KEY, kind="stable") if not whole.all() else frame
        xids = pd.DataFrame(xid_rows, columns=XID_COLUMNS)
        xids = xids.astype({"index": "int64", "code": "int64"})
        xids["time"] = pd.to_datetime(xids["time"], utc=True)
        return frame.reset_index(drop=True), xids

    def _queues(self, items: list[Any]) -> pd.DataFrame:
        check = self.check
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        for path, queue in check.objects(items, "queues"):
            name = check.string(queue, "name", path, required=True)
            if name is None:
                continue
            if name in seen:
                check.error(f"{path}.name", f"duplicate queue name {name!r}")
                continue
            seen.add(name)
            rows.append(
                {
                    "name": name,
                    "tenant": check.string(queue, "tenant", path) or name,
                    "weight": check.number(queue, "weight", path, minimum=0),
                    "deserved_gpus": check.number(queue, "deserved_gpus", path, minimum=0),
                    "capability_gpus": check.number(queue, "capability_gpus", path, minimum=0),
                }
            )
        frame = pd.DataFrame(rows, columns=["name", *QUEUE_COLUMNS])
        frame = frame.astype(
            {"weight": "float64", "deserved_gpus": "float64", "capability_gpus": "float64"}
        )
        frame["weight"] = frame["weight"].fillna(1.0)
        return _indexed(frame, "name")

    def _jobs(self, items: list[Any], node_gpus: dict[str, int], units: _Units):
        check = self.check
        rows: list[dict[str, Any]] = []
        alloc_job: list[str] = []
        alloc_pod: list[int] = []
        alloc_order: list[int] = []
        alloc_node: list[str] = []
        alloc_index: list[int] = []
        alloc_instance: list[int] = []
        alloc_share: list[float] = []
        alloc_guessed: list[bool] = []
        owner: dict[tuple[str, int, int], str] = {}
        held: dict[tuple[str, int, int], float] = {}
        seen: set[str] = set()
        for path, job in check.objects(items, "jobs"):
            job_id = check.string(job, "id", path, required=True)
            pods = check.integer(job, "pods", path, minimum=1, default=1)
            gpus_per_pod = check.integer(job, "gpus_per_pod", path, required=True, minimum=0)
            gang = check.boolean(job, "gang", path, default=False)
            min_member = check.integer(job, "min_member", path, minimum=1, default=pods)
            if min_member is not None and pods is not None and min_member > pods:
                check.error(f"{path}.min_member", f"{min_member} exceeds pods ({pods})")
            parallelism = job.get("parallelism") or {}
            if not isinstance(parallelism, dict):
                check.error(f"{path}.parallelism", 'expected an object such as {"tp": 8}')
                parallelism = {}
            tp = check.integer(parallelism, "tp", f"{path}.parallelism", minimum=1)
            row = {
                "id": job_id,
                "name": check.string(job, "name", path),
                "tenant": check.string(job, "tenant", path),
                "queue": check.string(job, "queue", path),
                "pool": check.string(job, "pool", path),
                "kind": check.string(job, "kind", path),
                "priority": check.integer(job, "priority", path, default=0),
                "state": check.choice(job, "state", path, JOB_STATES),
                "submitted": check.time(job, "submitted", path, required=True),
                "started": check.time(job, "started", path),
                "ended": check.time(job, "ended", path),
                "pods": pods,
                "gpus_per_pod": gpus_per_pod if gpus_per_pod is not None else 0,
                "gang": gang,
                "min_member": min_member if min_member is not None else pods,
                "tp": float(tp) if tp is not None else math.nan,
                "achieved_tflops_per_gpu": check.number(
                    job, "achieved_tflops_per_gpu", path, minimum=0
                ),
                "pending_reason": check.string(job, "pending_reason", path),
                "partial_since": check.time(job, "partial_since", path),
                "preemptions": check.integer(job, "preemptions", path, minimum=0, default=0),
            }
            if job_id is not None:
                if job_id in seen:
                    check.error(f"{path}.id", f"duplicate job id {job_id!r}")
                    continue
                seen.add(job_id)
            allocation = check.array(job.get("allocation"), f"{path}.allocation")
            if pods is not None and len(allocation) > pods:
                check.error(
                    f"{path}.allocation", f"binds {len(allocation)} pods but the job has {pods}"
                )
            row["bound_pods"] = len(allocation)
            order = 0
            for p, bound in enumerate(allocation):
                pod_path = f"{path}.allocation[{p}]"
                pod = check.mapping(bound, pod_path)
                if pod is None:
                    continue
                node = check.string(pod, "node", pod_path, required=True)
                if node is not None and node not in node_gpus:
                    check.error(f"{pod_path}.node", f"unknown node {node!r}")
                    continue
                gpu_list = check.array(check.required(pod, "gpus", pod_path), f"{pod_path}.gpus")
                if gpus_per_pod is not None and gpu_list and len(gpu_list) != gpus_per_pod:
                    check.error(
                        f"{pod_path}.gpus",
                        f"pod holds {len(gpu_list)} GPUs but the job asks {gpus_per_pod} per pod",
                    )
                uuids = pod.get("uuids")
                if uuids is not None:
                    uuids = check.array(uuids, f"{pod_path}.uuids")
                    if len(uuids) != len(gpu_list):
                        check.error(
                            f"{pod_path}.uuids",
                            f"lists {len(uuids)} devices for {len(gpu_list)} GPUs",
                        )
                        uuids = None
                share = check.number(pod, "share", pod_path, fraction=True)
                if not math.isnan(share) and share <= 0:
                    check.error(f"{pod_path}.share", f"a share must be > 0, got {share!r}")
                share = 1.0 if math.isnan(share) or share <= 0 else share
                guessed = bool(check.boolean(pod, "gpus_guessed", pod_path, default=False))
                for g, index in enumerate(gpu_list):
                    gpu_path = f"{pod_path}.gpus[{g}]"
                    if node is None:
                        continue
                    if not _valid_index(index, node_gpus[node]):
                        check.error(
                            gpu_path,
                            f"GPU {index!r} does not exist on node {node} ({node_gpus[node]} GPUs)",
                        )
                        continue
                    instance = self._instance(
                        units, node, index, uuids[g] if uuids else None, f"{pod_path}.uuids[{g}]"
                    )
                    if instance is None:
                        continue
                    key = (node, index, instance)
                    holder = owner.get(key)
                    if holder is not None and held[key] + share > 1.0 + 1e-9:
                        what = "GPU" if instance == WHOLE_GPU else f"MIG instance {instance} of GPU"
                        check.error(
                            gpu_path, f"{what} {node}/{index} is already allocated to job {holder}"
                        )
                        continue
                    owner.setdefault(key, job_id or path)
                    held[key] = held.get(key, 0.0) + share
                    alloc_job.append(job_id)
                    alloc_pod.append(p)
                    alloc_order.append(order)
                    alloc_node.append(node)
                    alloc_index.append(index)
                    alloc_instance.append(instance)
                    alloc_share.append(share)
                    alloc_guessed.append(guessed)
                    order += 1
            rows.append(row)

        jobs = pd.DataFrame(rows, columns=["id", *JOB_COLUMNS])
        for column in ("submitted", "started", "ended", "partial_since"):
            jobs[column] = pd.to_datetime(jobs[column], utc=True)
        jobs = jobs.astype(
            {
                "priority": "int64",
                "pods": "int64",
                "gpus_per_pod": "int64",
                "min_member": "int64",
                "gang": "bool",
                "tp": "float64",
                "achieved_tflops_per_gpu": "float64",
                "preemptions": "int64",
                "bound_pods": "int64",
            }
        )
        allocations = pd.DataFrame(
            {
                "job": pd.Series(alloc_job, dtype=object),
                "pod": np.asarray(alloc_pod, dtype=np.int64),
                "order": np.asarray(alloc_order, dtype=np.int64),
                "node": pd.Series(alloc_node, dtype=object),
                "index": np.asarray(alloc_index, dtype=np.int64),
                "mig_instance": np.asarray(alloc_instance, dtype=np.int64),
                "share": np.asarray(alloc_share, dtype="float64"),
                "guessed": np.asarray(alloc_guessed, dtype=bool),
            }
        )
        return _indexed(jobs, "id"), allocations

    def _instance(self, units: _Units, node: str, index: int, uuid: Any, path: str) -> int | None:
        """The unit an allocated GPU names: its MIG instance (found by ``uuid``) on a GPU split
        into MIG instances, else the whole GPU (-1); None after an error."""
        split = (node, index) in units.split
        if uuid is None:
            if split:
                self.check.error(
                    path.rsplit(".", 1)[0] + ".uuids",
                    f"GPU {node}/{index} is split into MIG instances: name the instance's UUID",
                )
                return None
            return WHOLE_GPU
        if not isinstance(uuid, str) or not uuid:
            self.check.error(path, f"expected a device UUID, got {uuid!r}")
            return None
        unit = units.by_uuid.get(uuid)
        if unit is None:
            if split:
                self.check.error(
                    path, f"{uuid!r} names no reported MIG instance of GPU {node}/{index}"
                )
                return None
            return WHOLE_GPU  # a whole GPU whose metrics were not reported
        if unit[:2] != (node, index):
            self.check.error(path, f"{uuid!r} is GPU {unit[0]}/{unit[1]}, not {node}/{index}")
            return None
        return unit[2]

    def _events(self, items: list[Any]) -> pd.DataFrame:
        check = self.check
        rows: list[dict[str, Any]] = []
        for path, event in check.objects(items, "events"):
            rows.append(
                {
                    "time": check.time(event, "time", path, required=True),
                    "kind": check.choice(event, "kind", path, EVENT_KINDS),
                    "job": check.string(event, "job", path),
                    "node": check.string(event, "node", path),
                    "reason": check.string(event, "reason", path),
                    "message": check.string(event, "message", path),
                }
            )
        frame = pd.DataFrame(rows, columns=EVENT_COLUMNS)
        frame["time"] = pd.to_datetime(frame["time"], utc=True)
        return frame


@dataclass(frozen=True)
class _Units:
    """The allocatable units the GPU frame holds: by UUID, and the GPUs split into MIG."""

    by_uuid: dict[str, tuple[str, int, int]]
    split: frozenset[tuple[str, int]]


def _units(gpus: pd.DataFrame) -> _Units:
    reported = gpus[gpus["uuid"].notna().to_numpy()]
    by_uuid = {
        uuid: (node, int(index), int(instance))
        for uuid, node, index, instance in zip(
            reported["uuid"],
            reported["node"],
            reported["index"],
            reported["mig_instance"],
            strict=True,
        )
    }
    mig = gpus[gpus["mig_instance"].to_numpy() != WHOLE_GPU]
    split = frozenset(zip(mig["node"], mig["index"].astype(int), strict=True))
    return _Units(by_uuid, split)


_TOP_LEVEL_KEYS = frozenset(
    {
        "format",
        "cluster",
        "as_of",
        "window_s",
        "scheduler",
        "nodes",
        "gpus",
        "queues",
        "jobs",
        "events",
    }
)
_GPU_NON_METRIC_KEYS = frozenset(
    {"node", "index", "uuid", "health", "xid", "mig", "nvlink_clique", "index_guessed", "gpu_model"}
)
_PROFILE_SLICES = re.compile(r"^(\d+)g\.")


def _indexed(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """The frame indexed by its key column, which stays a column too (the index is unnamed so
    that merges and groupbys on the column are never ambiguous)."""
    frame = frame.set_index(column, drop=False)
    frame.index.name = None
    return frame


def _valid_index(index: Any, count: int) -> bool:
    return isinstance(index, int) and not isinstance(index, bool) and 0 <= index < count
