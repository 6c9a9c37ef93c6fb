"""The ``gpuobs.snapshot/v1`` document of a simulator at its current time (docs/snapshot.md).

GPU statistics are computed over the window's samples (every ``SAMPLE_S`` seconds, from the
simulation's start at the earliest). Jobs: every pending and running job, and ended jobs kept for
``Policy.retention_s`` -- longer when they started after a still-pending job of their pool was
submitted, so that the jobs which overtook a starving job stay visible.
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_left
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from diagnosis.core.numbers import whole_or_float
from diagnosis.core.rules.facts import peak_tflops
from diagnosis.core.simulate.jobs import DATA_STARVED
from diagnosis.core.simulate.metrics import REPORTED_MFU, SAMPLE_S, hash_uniform, window_statistics
from diagnosis.core.simulate.state import (
    BEHIND_BLOCKED_JOB,
    DOWN,
    PARTIALLY_BOUND,
    UNSCHEDULABLE,
    ClusterState,
    Job,
)
from diagnosis.core.vocabulary import NODE_STATES, SNAPSHOT_FORMAT, format_time

MAX_EVENTS = 10000
MAX_RETAINED_JOBS = 5000

# Decimal places kept per metric in the document.
_ROUNDING = {
    "util": 4,
    "tensor_active": 4,
    "fb_used_frac": 4,
    "power_w": 1,
    "temp_c": 1,
    "pcie_rx_Bps": -3,
    "nvlink_Bps": -3,
    "dram_active": 4,
    "throttle_thermal": 4,
    "throttle_power": 4,
}
# Xids after which the GPU's row remapper reports a pending remap (an uncorrectable ECC error
# marked a row: 48 DBE, 63 row-remap recorded, 94/95 contained/uncontained ECC) or a failed one
# (64), until the GPU is repaired (reset).
REMAP_PENDING_XIDS = frozenset({48, 63, 94, 95})
REMAP_FAILURE_XIDS = frozenset({64})


def build_document(sim: ClusterState, window_s: int) -> dict[str, Any]:
    now = sim.now
    clock = _Clock(sim.spec.start)
    document = {
        "format": SNAPSHOT_FORMAT,
        "cluster": sim.spec.name,
        "as_of": clock.iso(now),
        "window_s": int(window_s),
        "scheduler": {
            "kind": "sim",
            "placement": dict(sim.placement),
            "queue_order": sim.policy.queue_order,
            "gang_admission": sim.policy.gang_admission,
            "backfill": sim.policy.backfill,
        },
        "nodes": _nodes(sim),
        "gpus": _gpus(sim, window_s, clock),
        "queues": _queues(sim),
        "jobs": _jobs(sim, clock),
        "events": _events(sim, window_s, clock),
    }
    sim.last_snapshot_at = now
    return document


class _Clock:
    """Simulated seconds as RFC 3339 UTC text, to the millisecond."""

    def __init__(self, start: datetime) -> None:
        self.start_ms = round(start.timestamp() * 1000)

    def iso(self, t: float | None) -> str | None:
        if t is None:
            return None
        ms = self.start_ms + round(t * 1000)
        return format_time(
            datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)
        )


def _nodes(sim: ClusterState) -> list[dict[str, Any]]:
    cpu = _cpu_util(sim)
    nodes = []
    for n, spec in enumerate(sim.node_specs):
        node: dict[str, Any] = {
            "name": spec.name,
            "pool": sim.pool_names[int(sim.node_pool[n])],
            "gpu_model": spec.gpu_model,
            "gpus": spec.gpus,
            "state": NODE_STATES[int(sim.node_state[n])],
        }
        if not math.isnan(cpu[n]):
            node["cpu_util"] = round(float(cpu[n]), 4)
        topology: dict[str, Any] = {}
        if spec.nvlink_domains is not None:
            topology["nvlink_domains"] = [list(domain) for domain in spec.nvlink_domains]
        if spec.numa is not None:
            topology["numa"] = list(spec.numa)
        if topology:
            node["topology"] = topology
        nodes.append(node)
    return nodes


def _cpu_util(sim: ClusterState) -> np.ndarray:
    """Host CPU: light, rising with the GPUs its running jobs use; near saturation on hosts of
    data-starved jobs (their input pipelines burn the CPUs); unknown on nodes that are down."""
    running = np.zeros(sim.total_gpus, dtype=bool)
    starved_nodes: set[int] = set()
    for job in sim.live.values():
        if job.state != "running":
            continue
        for n, _, gids in job.pods:
            running[gids] = True
            if job.profile_at(sim.now) == DATA_STARVED:
                starved_nodes.add(n)
    busy = np.add.reduceat(running.astype(np.float64), sim.node_offset) if len(running) else []
    share = np.asarray(busy) / np.maximum(sim.node_gpus, 1)
    noise = hash_uniform(
        sim.seed, 5, np.arange(len(sim.node_gpus)), np.array([int(sim.now)], dtype=np.int64)
    )[:, 0]
    cpu = 0.04 + 0.30 * share + 0.04 * noise
    for n in starved_nodes:
        cpu[n] = 0.92 + 0.06 * noise[n]
    cpu[sim.node_state == DOWN] = np.nan
    return np.clip(cpu, 0.0, 1.0)


def _window_times(now: float, window_s: int) -> np.ndarray:
    first = math.ceil(max(now - window_s, 0.0) / SAMPLE_S)
    last = math.floor(now / SAMPLE_S + 1e-9)
    if last < first:
        return np.array([now])
    return np.arange(first, last + 1, dtype=np.float64) * SAMPLE_S


def _gpus(sim: ClusterState, window_s: int, clock: _Clock) -> list[dict[str, Any]]:
    stats = window_statistics(sim.sample_metrics(_window_times(sim.now, window_s)))
    window_start = sim.now - window_s
    xids: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for t, n, index, code in sim.xids:
        if window_start <= t <= sim.now:
            xids.setdefault((n, index), []).append({"code": code, "time": clock.iso(t)})
    uuids = gpu_uuids(sim)
    remaps = _row_remaps(sim)
    columns = [
        (metric, stat, values, _ROUNDING[metric])
        for metric, by_stat in stats.items()
        for stat, values in by_stat.items()
    ]
    gpus = []
    for gid in range(sim.total_gpus):
        n = int(sim.gpu_node[gid])
        index = int(sim.gpu_index[gid])
        entry: dict[str, Any] = {
            "node": sim.node_names[n],
            "index": index,
            "uuid": uuids[gid],
            "health": "ok" if sim.gpu_healthy[gid] else "unhealthy",
        }
        for metric, stat, values, digits in columns:
            value = values[gid]
            if not math.isnan(value):
                rounded = round(float(value), digits)
                entry.setdefault(metric, {})[stat] = int(rounded) if digits < 0 else rounded
        if (n, index) in xids:
            entry["xid"] = xids[(n, index)]
        entry["power_limit_w"] = {"max": float(sim.fleet.board_w[gid])}
        pending, failure = remaps.get(gid, (0, 0))
        # A pending remap is applied (and counted as remapped) only at the reset: none in the
        # window while the GPU waits for it.
        entry["row_remap"] = {"pending": pending, "failure": failure, "uncorrectable": 0}
        gpus.append(entry)
    return gpus


def _row_remaps(sim: ClusterState) -> dict[int, tuple[int, int]]:
    """GPU -> (remap pending, remap failed) for the GPUs still unhealthy after a memory Xid:
    the simulator repairs a GPU by resetting it, which applies the remap."""
    out: dict[int, tuple[int, int]] = {}
    for _, node, index, code in sim.xids:
        gid = int(sim.node_offset[node]) + int(index)
        if sim.gpu_healthy[gid]:
            continue
        pending, failure = out.get(gid, (0, 0))
        out[gid] = (
            pending or int(code in REMAP_PENDING_XIDS),
            failure or int(code in REMAP_FAILURE_XIDS),
        )
    return out


def gpu_uuids(sim: ClusterState) -> list[str]:
    """Each GPU's UUID (in GPU number order), as nvidia-smi writes one: stable for a cluster
    name, node name and GPU index."""
    cached = getattr(sim, "_gpu_uuids", None)
    if cached is None:
        cached = []
        for gid in range(sim.total_gpus):
            name = f"{sim.spec.name}/{sim.node_names[sim.gpu_node[gid]]}/{sim.gpu_index[gid]}"
            digest = hashlib.blake2b(name.encode(), digest_size=16).hexdigest()
            cached.append(
                f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:]}"
            )
        sim._gpu_uuids = cached
    return cached


def _queues(sim: ClusterState) -> list[dict[str, Any]]:
    queues = []
    for queue in sim.queues:
        entry: dict[str, Any] = {"name": queue.name, "tenant": queue.tenant}
        entry["weight"] = whole_or_float(queue.weight)
        if queue.deserved_gpus is not None:
            entry["deserved_gpus"] = whole_or_float(queue.deserved_gpus)
        if queue.capability_gpus is not None:
            entry["capability_gpus"] = whole_or_float(queue.capability_gpus)
        queues.append(entry)
    return queues


def retained_jobs(sim: ClusterState) -> list[Job]:
    """Live jobs, plus ended jobs inside the retention period or started after the oldest
    pending job of their pool was submitted (possible overtakers), newest kept first."""
    now = sim.now
    cutoff = now - sim.policy.retention_s
    oldest_pending: dict[int, float] = {}
    for job in sim.live.values():
        if job.state == "pending" and not job.pods:
            oldest_pending[job.pool] = min(oldest_pending.get(job.pool, math.inf), job.submitted)
    horizon = min([cutoff, *oldest_pending.values()])
    ended = sim.ended_jobs
    first = bisect_left([job.ended for job in ended], horizon) if ended else 0
    kept = []
    for job in reversed(ended[first:]):
        overtaker = job.first_started is not None and job.first_started >= oldest_pending.get(
            job.pool, math.inf
        )
        if job.ended >= cutoff or overtaker:
            kept.append(job)
            if len(kept) >= MAX_RETAINED_JOBS:
                break
    return sorted([*sim.live.values(), *kept], key=lambda job: job.number)


def _jobs(sim: ClusterState, clock: _Clock) -> list[dict[str, Any]]:
    return [_job(sim, job, clock) for job in retained_jobs(sim)]


def _job(sim: ClusterState, job: Job, clock: _Clock) -> dict[str, Any]:
    spec = job.spec
    entry: dict[str, Any] = {
        "id": spec.id,
        "name": spec.name or spec.id,
        "tenant": spec.tenant,
        "queue": sim.queues[job.queue].name,
        "pool": sim.pool_names[job.pool],
        "kind": spec.kind,
        "priority": spec.priority,
        "state": job.state,
        "submitted": clock.iso(job.submitted),
        "started": clock.iso(job.started),
        "ended": clock.iso(job.ended),
        "pods": spec.pods,
        "gpus_per_pod": spec.gpus_per_pod,
        "gang": spec.is_gang,
        "min_member": spec.members_needed,
        "allocation": [{"node": sim.node_names[n], "gpus": list(gpus)} for n, gpus, _ in job.pods],
        "pending_reason": _pending_reason(sim, job) if job.state == "pending" else None,
        "partial_since": clock.iso(job.partial_since)
        if job.pods and job.state == "pending"
        else None,
        "preemptions": job.preemptions,
    }
    if job.state in ("failed", "preempted") and job.end_reason:
        entry["end_reason"] = job.end_reason
    if spec.tp is not None:
        entry["parallelism"] = {"tp": spec.tp}
    if job.state == "running" and spec.reports_achieved_tflops and job.pods:
        model = sim.node_specs[job.pods[0][0]].gpu_model
        peak = peak_tflops(model)
        if not math.isnan(peak):
            wobble = 0.95 + 0.1 * ((job.number * 2654435761) % 1000) / 1000.0
            mfu = REPORTED_MFU[job.profile_at(sim.now)] * wobble
            entry["achieved_tflops_per_gpu"] = round(peak * mfu, 1)
    return entry


def _pending_reason(sim: ClusterState, job: Job) -> str:
    if job.pods:
        return PARTIALLY_BOUND
    blocker = sim.blocker[job.pool]
    if not sim.policy.backfill and blocker is not None and blocker is not job:
        return BEHIND_BLOCKED_JOB
    return job.reason or UNSCHEDULABLE


def _events(sim: ClusterState, window_s: int, clock: _Clock) -> list[dict[str, Any]]:
    events = sim.events
    start = sim.event_cursor
    if sim.last_snapshot_at is None:
        since = sim.now - window_s
        start = bisect_left([e[0] for e in events], since)
    start = max(start, len(events) - MAX_EVENTS)
    sim.event_cursor = len(events)
    return [
        {
            "time": clock.iso(t),
            "kind": kind,
            "job": job,
            "node": node,
            "reason": reason,
            "message": message,
        }
        for t, kind, job, node, reason, message in events[start:]
    ]
