"""``squeue --json`` jobs in the snapshot's vocabulary: states, ids (array tasks, heterogeneous
components), requested and allocated GPUs as pods, and pending arrays expanded."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from diagnosis.edge.schedulers.slurm.parse.values import (
    ExpansionError,
    ParseSettings,
    epoch_time,
    expand_hostlist,
    gpu_count,
    gpu_indexes,
    int_value,
    split_top_level,
    text_value,
)

# -- jobs ----------------------------------------------------------------------------------------

JOB_STATES = {
    "PENDING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RUNNING": "running",
    "CONFIGURING": "running",
    "COMPLETING": "running",
    "SUSPENDED": "running",
    "STOPPED": "running",
    "SIGNALING": "running",
    "RESIZING": "running",
    "STAGE_OUT": "running",
    "COMPLETED": "completed",
    "PREEMPTED": "preempted",
    # Every other end (FAILED, CANCELLED, TIMEOUT, NODE_FAIL, BOOT_FAIL, DEADLINE,
    # OUT_OF_MEMORY, SPECIAL_EXIT, REVOKED) is a failure to finish the work.
}
ENDED = frozenset({"completed", "failed", "preempted"})


def job_state(record: Mapping[str, Any]) -> tuple[str, str]:
    """(snapshot state, Slurm's own state word) of a job record."""
    raw = record.get("job_state")
    words = [str(w).upper() for w in raw] if isinstance(raw, list) else [text_value(raw).upper()]
    native = next((w for w in words if w), "UNKNOWN")
    return JOB_STATES.get(native, "failed"), native


def job_id(record: Mapping[str, Any]) -> str:
    """``123``; an array task ``123_4``; a heterogeneous job component ``123+1``."""
    array_job = int_value(record.get("array_job_id"))
    task = int_value(record.get("array_task_id"))
    if array_job and task is not None:
        return f"{array_job}_{task}"
    het = int_value(record.get("het_job_id"))
    if het:
        return f"{het}+{int_value(record.get('het_job_offset')) or 0}"
    return str(int_value(record.get("job_id")) or text_value(record.get("job_id")))


def array_tasks(record: Mapping[str, Any], limit: int | None = None) -> list[int]:
    """The task numbers of an array's pending meta-record (``0-5%2`` → 0..5), at most
    ``limit`` of them (never more are built: ``0-4000000000`` is a valid array string)."""
    text = text_value(record.get("array_task_string")).split("%")[0]
    tasks: list[int] = []
    for piece in text.split(","):
        if limit is not None and len(tasks) >= limit:
            break
        low, _, rest = piece.partition("-")
        high, _, step = rest.partition(":")
        if not low.isdigit():
            continue
        stop = int(high) if high.isdigit() else int(low)
        numbers = range(int(low), stop + 1, max(1, int(step)) if step.isdigit() else 1)
        room = len(numbers) if limit is None else min(len(numbers), limit - len(tasks))
        tasks.extend(numbers[:room])
    return tasks


def allocated_nodes(record: Mapping[str, Any]) -> list[str]:
    """The job's allocated nodes in Slurm's order, which ``gres_detail`` follows.

    ``job_resources`` changed shape: v0.0.38 (22.05) has ``allocated_nodes[].nodename`` and a
    host-list string ``nodes``; v0.0.41+ (24.05+) has ``nodes`` as an object with
    ``allocation[]`` (``index``, ``name``, per-socket core lists) and a host-list ``list``.
    The per-core lists are never read."""
    resources = record.get("job_resources")
    resources = resources if isinstance(resources, Mapping) else {}
    nodes = resources.get("nodes")
    if isinstance(nodes, Mapping):
        allocation = [n for n in nodes.get("allocation") or [] if isinstance(n, Mapping)]
        ordered = sorted(allocation, key=lambda n: int_value(n.get("index")) or 0)
        names = [text_value(n.get("name")) for n in ordered]
        if names and all(names):
            return names
        return expand_hostlist(text_value(nodes.get("list")) or text_value(record.get("nodes")))
    names = [
        text_value(n.get("nodename"))
        for n in (resources.get("allocated_nodes") or [])
        if isinstance(n, Mapping)
    ]
    if names and all(names):
        return names
    return expand_hostlist(text_value(nodes) or text_value(record.get("nodes")))


def _allocation(record: Mapping[str, Any], gres_name: str) -> list[tuple[str, list[int]]]:
    """(node, GPU indexes) for each allocated node, in Slurm's order (gres_detail is parallel
    to the job's allocated nodes)."""
    nodes = allocated_nodes(record)
    details = [d for d in record.get("gres_detail") or [] if isinstance(d, str)]
    pairs = []
    for node, detail in zip(nodes, details, strict=False):
        indexes = gpu_indexes(detail, gres_name)
        if indexes:
            pairs.append((node, indexes))
    return pairs


def exit_status(value: Any) -> int | None:
    """A job's exit as a wait status (``code << 8 | signal``): v0.0.38 prints the status
    itself; v0.0.40+ an object ``{"status": [...], "return_code": {...}, "signal": {"id":
    {...}}}``."""
    if isinstance(value, Mapping):
        code = int_value(value.get("return_code")) or 0
        signal = value.get("signal")
        number = int_value(signal.get("id")) if isinstance(signal, Mapping) else None
        return (code & 0xFFFFFF) << 8 | ((number or 0) & 0xFF)
    return int_value(value)


def _requested_gpus(record: Mapping[str, Any], gres_name: str) -> tuple[int, int]:
    """(pods, gpus per pod) a job asks for: one pod per node."""
    nodes = max(1, int_value(record.get("node_count")) or 1)
    per_node = gpu_count(record.get("tres_per_node"), gres_name)
    if per_node:
        return nodes, per_node
    total = gpu_count(record.get("tres_per_job"), gres_name)
    per_task = gpu_count(record.get("tres_per_task"), gres_name)
    if per_task:
        total = per_task * max(1, int_value(record.get("tasks")) or 1)
    if not total:
        return nodes, 0
    if total % nodes == 0:
        return nodes, total // nodes
    return total, 1  # uneven over its nodes: one-GPU pods


def _split_pods(
    allocation: list[tuple[str, list[int]]],
) -> tuple[int, int, list[dict[str, Any]]]:
    """Pods of equal size from per-node GPU lists (one pod per node when even, else the
    greatest common size)."""
    size = 0
    for _, indexes in allocation:
        size = math.gcd(size, len(indexes))
    pods = [
        {"node": node, "gpus": indexes[start : start + size]}
        for node, indexes in allocation
        for start in range(0, len(indexes), size)
    ]
    return len(pods), size, pods


@dataclass
class ParsedJobs:
    jobs: list[dict[str, Any]] = field(default_factory=list)
    native: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> facts for events
    truncated_arrays: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # "job 12: why": records not read

    def refuse(self, job_id: str, why: str) -> None:
        """Leave job ``job_id`` out of this read (its events too), naming it and why."""
        self.jobs = [job for job in self.jobs if job["id"] != job_id]
        self.native.pop(job_id, None)
        self.refused.append(f"job {job_id}: {why}")


def refuse_inconsistent(parsed: ParsedJobs, node_gpus: Mapping[str, int]) -> None:
    """Leave out (and name in ``parsed.refused``) each job whose allocation does not fit the
    nodes read with it: a node the nodes read does not list (a dynamic or cloud node deleted
    between the two reads, a node outside the configured partitions), a GPU index past the
    node's count, a GPU another job already holds. The other jobs stay: one inconsistent record
    never makes the whole read invalid (docs/integrations.md, "Records left out")."""
    held: dict[tuple[str, int], str] = {}
    for job in list(parsed.jobs):
        why = _misfit(job, node_gpus, held)
        if why is not None:
            parsed.refuse(job["id"], why)
            continue
        for pod in job["allocation"]:
            for index in pod["gpus"]:
                held[(pod["node"], index)] = job["id"]


def _misfit(
    job: Mapping[str, Any], node_gpus: Mapping[str, int], held: Mapping[tuple[str, int], str]
) -> str | None:
    for pod in job["allocation"]:
        node = pod["node"]
        if node not in node_gpus:
            return f"allocated on node {node!r}, which the nodes read does not list"
        for index in pod["gpus"]:
            if index >= node_gpus[node]:
                return f"holds GPU {index} of node {node!r}, which has {node_gpus[node]}"
            if (node, index) in held:
                return f"holds GPU {node}/{index}, which job {held[(node, index)]} holds too"
    return None


def parse_jobs(document: Mapping[str, Any], settings: ParseSettings) -> ParsedJobs:
    """``squeue --json`` → snapshot jobs; pending array meta-records expand into their tasks
    (at most ``array_expand_limit`` each; the arrays cut short are listed)."""
    parsed = ParsedJobs()
    for record in document.get("jobs") or []:
        if not isinstance(record, Mapping):
            continue
        try:
            found = list(_jobs_of(record, settings, parsed))
        except ExpansionError as exc:
            parsed.refused.append(f"job {job_id(record)}: {exc}")
            continue
        for job, facts in found:
            if job["id"] in parsed.native:
                continue
            parsed.jobs.append(job)
            parsed.native[job["id"]] = facts
    return parsed


def _jobs_of(
    record: Mapping[str, Any], settings: ParseSettings, parsed: ParsedJobs
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    partition = split_top_level(text_value(record.get("partition")))
    pool = partition[0] if partition else None
    if settings.partitions and pool not in settings.partitions:
        return
    state, native = job_state(record)
    pods, per_pod = _requested_gpus(record, settings.gres_name)
    allocation: list[dict[str, Any]] = []
    if state == "running":
        bound = _allocation(record, settings.gres_name)
        if bound:
            pods, per_pod, allocation = _split_pods(bound)
    account = text_value(record.get("account"))
    tenant = account or text_value(record.get("user_name")) or None
    reason = text_value(record.get("state_reason"))
    pending_reason = reason if state == "pending" and reason not in {"", "None"} else None
    submitted = epoch_time(record.get("submit_time"))
    ran = state != "pending" and bool(text_value(record.get("nodes")) or allocation)
    job: dict[str, Any] = {
        "id": job_id(record),
        "name": text_value(record.get("name")) or None,
        "tenant": tenant,
        "queue": tenant,
        "pool": pool,
        "kind": None,
        "priority": int_value(record.get("priority")) or 0,
        "state": state,
        "submitted": submitted,
        # A job cancelled while pending gets start = end = the cancel time, but no nodes.
        "started": epoch_time(record.get("start_time")) if ran else None,
        "ended": epoch_time(record.get("end_time")) if state in ENDED else None,
        "pods": pods,
        "gpus_per_pod": per_pod,
        "gang": pods > 1,
        "min_member": pods,
        "allocation": allocation,
        "pending_reason": pending_reason,
        "preemptions": int_value(record.get("restart_cnt")) or 0,
    }
    facts = {
        "native_state": native,
        "reason": reason,
        "description": text_value(record.get("state_description")),
        "submit_epoch": int_value(record.get("submit_time")) or 0,
        "start_epoch": (int_value(record.get("start_time")) or 0) if ran else 0,
        "end_epoch": int_value(record.get("end_time")) or 0,
        "nodes": text_value(record.get("nodes")),
        "exit_code": exit_status(record.get("exit_code")),
    }
    if submitted is None:
        return  # a record without a submit time is not a job we can place in time
    array_job = int_value(record.get("array_job_id"))
    meta = int_value(record.get("array_task_id")) is None and record.get("array_task_string")
    if array_job and meta:
        tasks = array_tasks(record, settings.array_expand_limit + 1)
        if len(tasks) > settings.array_expand_limit:
            parsed.truncated_arrays.append(str(array_job))
            tasks = tasks[: settings.array_expand_limit]
        for task in tasks:
            yield {**job, "id": f"{array_job}_{task}"}, facts
        return
    yield job, facts
