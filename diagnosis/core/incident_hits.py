"""Which jobs a GPU (or node) fault hit, from stored history (issue #16): pure, over snapshot
documents (``gpuobs.snapshot/v1``) and scheduler events as plain dicts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from diagnosis.core.vocabulary import parse_time

# A job that failed, was preempted, evicted or restarted on the GPU this long after the fault
# was hit by it.
HIT_WINDOW = timedelta(minutes=10)
HIT_EVENT_KINDS = ("failed", "preempted", "evicted", "restarted", "xid")


def holds(job: Mapping[str, Any], node: str, gpu_index: int | None) -> list[int]:
    """The GPUs of ``node`` the job holds in a snapshot document (every GPU of the job's pods
    there), empty when it holds none of the incident's."""
    held: list[int] = []
    for pod in job.get("allocation") or ():
        if pod.get("node") == node:
            held += [int(g) for g in pod.get("gpus") or ()]
    if gpu_index is not None and gpu_index not in held:
        return []
    return held


@dataclass(frozen=True)
class NodeView:
    """A snapshot's nodes by name: each one's state (the first entry naming it) and its GPU
    entries (in the document's order): ``diagnosis.core.incident_reads.node_view``."""

    states: Mapping[Any, Any]
    gpus: Mapping[Any, list[Mapping[str, Any]]]


def jobs_by_node(document: Mapping[str, Any]) -> dict[str, Any]:
    """What a hit reads of a stored snapshot document: its time, its events and its jobs by the
    nodes their pods are on (in the document's order). Built once per document and cycle, so
    that each incident reads the jobs of its node, not every job of every window snapshot
    (20,000 jobs x ~11 snapshots per incident at 16,384 GPUs, issue #17)."""
    by_node: dict[Any, list[Mapping[str, Any]]] = {}
    for job in document.get("jobs") or ():
        for node in dict.fromkeys(pod.get("node") for pod in job.get("allocation") or ()):
            by_node.setdefault(node, []).append(job)
    return {
        "as_of": document.get("as_of"),
        "events": list(document.get("events") or ()),
        "by_node": by_node,
    }


def on_node(indexed: Mapping[str, Any], node: str) -> dict[str, Any]:
    """A document of :func:`jobs_by_node` as :func:`hit_jobs_from_history` reads it for a fault
    on ``node``: a job with no pod there holds none of its GPUs, so it is left out."""
    return {"as_of": indexed["as_of"], "jobs": indexed["by_node"].get(node, [])}


def hit_jobs_from_history(
    node: str,
    gpu_index: int | None,
    at: datetime,
    documents: Sequence[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Job id -> why it was hit by a fault on ``node``/``gpu_index`` at ``at``, from snapshot
    ``documents`` (any order) and scheduler ``events`` (``time, kind, job, node``).

    Hit: a job that held the GPU at ``at`` -- in the last snapshot before it, unless it had
    already ended by then; in a snapshot at or after it, if it had started before ``at`` (a job
    does not change GPUs without starting again) -- and a job that held it and failed, was
    preempted, evicted or restarted within ``HIT_WINDOW`` after it (or an ``xid`` event names
    it). A job placed on the GPU afterwards is not hit."""

    def as_time(value: Any) -> datetime | None:
        return parse_time(value) if value else None

    dated = sorted(
        ((as_time(d.get("as_of")), d) for d in documents if as_time(d.get("as_of"))),
        key=lambda pair: pair[0],
    )
    before = [d for t, d in dated if t < at]
    after = [d for t, d in dated if t >= at]
    hits: dict[str, dict[str, Any]] = {}
    holders: dict[str, dict[str, Any]] = {}
    for doc in before[-1:]:
        for job in doc.get("jobs") or ():
            gpus = holds(job, node, gpu_index)
            ended = as_time(job.get("ended"))
            if gpus and (ended is None or ended >= at):
                holders[str(job["id"])] = {"job": job, "gpus": gpus}
    for doc in after:
        for job in doc.get("jobs") or ():
            gpus = holds(job, node, gpu_index)
            started = as_time(job.get("started"))
            if gpus and started is not None and started < at:
                holders.setdefault(str(job["id"]), {"job": job, "gpus": gpus})
    for job_id, held in holders.items():
        hits[job_id] = {"job": held["job"], "gpus": held["gpus"], "why": "held the GPU"}
    end = at + HIT_WINDOW
    for event in events:
        when = as_time(event.get("time"))
        job_id = str(event.get("job") or "")
        if not job_id or when is None or not (at <= when <= end):
            continue
        if event.get("node") not in (None, "", node) or event.get("kind") not in HIT_EVENT_KINDS:
            continue
        if event.get("kind") == "xid" or job_id in holders:
            entry = hits.setdefault(job_id, {"job": {"id": job_id}, "gpus": [], "why": ""})
            entry.setdefault("events", [])
            entry["events"].append({"time": event.get("time"), "kind": event.get("kind")})
            if event.get("kind") != "xid":
                entry["why"] = f"{event.get('kind')} at {event.get('time')}"
    return hits
