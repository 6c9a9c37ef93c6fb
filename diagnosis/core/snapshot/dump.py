"""Dumping a :class:`ClusterSnapshot` back to its ``gpuobs.snapshot/v1`` document."""

from __future__ import annotations

import json
import math
from typing import Any

from diagnosis.core.snapshot.frame import (
    GPU_BASE_COLUMNS,
    WHOLE_GPU,
    ClusterSnapshot,
    format_time,
)
from diagnosis.core.vocabulary import SNAPSHOT_FORMAT


def dump(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """The ``gpuobs.snapshot/v1`` document of a snapshot; ``load(dump(s))`` equals ``s``."""
    document: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        "cluster": snapshot.cluster,
        "as_of": format_time(snapshot.as_of),
        "window_s": int(snapshot.window_s),
        "scheduler": dict(snapshot.scheduler),
        "nodes": _dump_nodes(snapshot),
        "gpus": _dump_gpus(snapshot),
        "queues": [
            _drop_none(
                {
                    "name": q.name,
                    "tenant": _text(q.tenant),
                    "weight": _plain(q.weight),
                    "deserved_gpus": _plain(q.deserved_gpus),
                    "capability_gpus": _plain(q.capability_gpus),
                }
            )
            for q in snapshot.queues.itertuples(index=False)
        ],
        "jobs": _dump_jobs(snapshot),
        "events": [
            {
                "time": format_time(e.time),
                "kind": e.kind,
                "job": _text(e.job),
                "node": _text(e.node),
                "reason": _text(e.reason),
                "message": _text(e.message),
            }
            for e in snapshot.events.itertuples(index=False)
        ],
    }
    document.update(snapshot.extra)
    return document


def dumps(snapshot: ClusterSnapshot, *, indent: int | None = None) -> str:
    return json.dumps(dump(snapshot), indent=indent, allow_nan=False)


def _dump_nodes(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    topology: dict[str, dict[str, Any]] = {}
    gpus = snapshot.gpus
    physical = gpus[~gpus[["node", "index"]].duplicated().to_numpy()]
    for node, group in physical.groupby("node", sort=False):
        domains = group["nvlink_domain"].to_numpy()
        numa = group["numa"].to_numpy()
        entry: dict[str, Any] = {}
        if (domains >= 0).any():
            entry["nvlink_domains"] = [
                group["index"].to_numpy()[domains == d].tolist()
                for d in sorted(set(domains[domains >= 0].tolist()))
            ]
        if (numa >= 0).any():
            entry["numa"] = [int(m) if m >= 0 else None for m in numa.tolist()]
        if entry:
            topology[node] = entry
    nodes = []
    for n in snapshot.nodes.itertuples(index=False):
        node = _drop_none(
            {
                "name": n.name,
                "pool": n.pool,
                "gpu_model": _text(n.gpu_model),
                "gpus": int(n.gpus),
                "state": n.state,
                "cpu_util": _plain(n.cpu_util),
            }
        )
        if n.name in topology:
            node["topology"] = topology[n.name]
        nodes.append(node)
    return nodes


def _dump_gpus(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    gpus = snapshot.gpus
    metric_columns = [c for c in gpus.columns if c not in GPU_BASE_COLUMNS]
    xids: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for x in snapshot.xids.itertuples(index=False):
        xids.setdefault((x.node, int(x.index)), []).append(
            {"code": int(x.code), "time": format_time(x.time)}
        )
    out = []
    for record in gpus[gpus["reported"]].to_dict("records"):
        entry: dict[str, Any] = {"node": record["node"], "index": int(record["index"])}
        if _text(record["uuid"]) is not None:
            entry["uuid"] = record["uuid"]
        entry["health"] = record["health"]
        if _text(record["nvlink_clique"]) is not None:
            entry["nvlink_clique"] = record["nvlink_clique"]
        if record["index_guessed"]:
            entry["index_guessed"] = True
        if record["mig_instance"] != WHOLE_GPU:
            entry["mig"] = _drop_none(
                {
                    "profile": _text(record["mig_profile"]),
                    "instance": int(record["mig_instance"]),
                    "parent_uuid": _text(record["mig_parent_uuid"]),
                    "compute_fraction": _plain(record["capacity"]),
                }
            )
        for column in metric_columns:
            value = record[column]
            if value is None or math.isnan(value):
                continue
            metric, stat = column.rsplit("_", 1)
            entry.setdefault(metric, {})[stat] = _plain(value)
        key = (entry["node"], entry["index"])
        if key in xids:
            entry["xid"] = xids[key]
        out.append(entry)
    return out


def _dump_jobs(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    allocation: dict[str, list[dict[str, Any]]] = {}
    gpus = snapshot.gpus
    uuid_of = dict(
        zip(
            zip(gpus["node"], gpus["index"], gpus["mig_instance"], strict=True),
            gpus["uuid"],
            strict=True,
        )
    )
    for (job, _pod), group in snapshot.allocations.groupby(["job", "pod"], sort=False):
        pod: dict[str, Any] = {"node": group["node"].iloc[0], "gpus": group["index"].tolist()}
        instances = group["mig_instance"].tolist()
        if any(i != WHOLE_GPU for i in instances):
            pod["uuids"] = [
                uuid_of.get((pod["node"], index, instance))
                for index, instance in zip(pod["gpus"], instances, strict=True)
            ]
        share = float(group["share"].iloc[0])
        if share != 1.0:
            pod["share"] = share
        if bool(group["guessed"].iloc[0]):
            pod["gpus_guessed"] = True
        allocation.setdefault(job, []).append(pod)
    jobs = []
    for j in snapshot.jobs.itertuples(index=False):
        job = {
            "id": j.id,
            "name": _text(j.name),
            "tenant": _text(j.tenant),
            "queue": _text(j.queue),
            "pool": _text(j.pool),
            "kind": _text(j.kind),
            "priority": int(j.priority),
            "state": j.state,
            "submitted": format_time(j.submitted),
            "started": format_time(j.started),
            "ended": format_time(j.ended),
            "pods": int(j.pods),
            "gpus_per_pod": int(j.gpus_per_pod),
            "gang": bool(j.gang),
            "min_member": int(j.min_member),
            "allocation": allocation.get(j.id, []),
            "pending_reason": _text(j.pending_reason),
            "partial_since": format_time(j.partial_since),
            "preemptions": int(j.preemptions),
        }
        if not math.isnan(j.tp):
            job["parallelism"] = {"tp": int(j.tp)}
        if not math.isnan(j.achieved_tflops_per_gpu):
            job["achieved_tflops_per_gpu"] = float(j.achieved_tflops_per_gpu)
        jobs.append(job)
    return jobs


def _text(value: Any) -> str | None:
    """A text field as JSON carries it: None for a missing one (pandas may hold it as NaN)."""
    return value if isinstance(value, str) else None


def _plain(value: Any) -> Any:
    """A JSON-ready Python number (None for NaN; ints stay ints)."""
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return None
    return int(value) if value.is_integer() else value


def _drop_none(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if value is not None}
