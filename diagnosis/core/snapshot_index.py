"""A stored snapshot's index: its document cut into small parts that a page can read alone.

A ``gpuobs.snapshot/v1`` document of 16,384 GPUs is 12 MB of JSON; the node, GPU and job pages
need a few kilobytes of it (one node's entry, its GPUs, the jobs placed on it; one job's
record). :func:`build_index` cuts the document into compressed parts, written once when the
snapshot is stored, and :class:`SnapshotIndex` reads one part without decompressing or parsing
the rest (docs/ui.md, "Nodes and GPUs"):

- ``node:<name>``: the node's entry, its ``gpus[]`` entries (document order) and the ids of the
  jobs whose allocation is on it;
- ``jobs:<bucket>``: the records of the jobs whose id falls in that bucket
  (:func:`job_bucket`, a stable hash of the id, :data:`JOB_BUCKETS` of them);
- ``gpus``: every node's entry and every GPU's, with only what the heatmap and the series read
  (:data:`GPU_FIELDS`, and of the metrics :data:`SUMMARY_METRICS`' statistic);
- ``queues``: the scheduler's queue tree (``queue_parents``, ``cohorts``), the queues, the
  nodes' sizes and every job with only what the queue pages read (:data:`QUEUE_JOB_FIELDS`);
- ``hits`` and ``events:<node>``: what an incident's hit window reads of the snapshot for a
  fault on one node (:meth:`SnapshotIndex.hit_read`): its time, the events naming no node
  (``hits``) or that node (``events:<node>``), each with its position in the document, and the
  ids of the jobs placed on nodes the snapshot does not list. An index stored before these
  parts existed has no ``hits``: its reader decodes the document instead.

Stored as two columns (:class:`BuiltIndex`): a small header naming where each part lies, and
the parts, so that a reader of many snapshots (a node's time series) reads the header and the
bytes of the one part it needs of each.
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from isal import isal_zlib

JOB_BUCKETS = 256
# ISA-L's (python-isal) level 2, its default: zlib's format, which ``zlib.decompress`` reads as
# every reader does. At 131,072 GPUs it compresses the 99 MB document in 0.12 s to 13.1 MB
# (zlib level 6: 1.19 s, 10.2 MB) and the index's 165 MB of parts in 0.33 s to 26.4 MB (zlib
# level 1: 0.99 s, 26.4 MB) -- issue #35.
COMPRESSION_LEVEL = 2

# The GPU metrics the pages chart, each with the statistic they read of it.
SUMMARY_METRICS: dict[str, str] = {
    "util": "mean",
    "tensor_active": "mean",
    "fb_used_frac": "mean",
    "power_w": "mean",
    "temp_c": "max",
    "sm_clock_mhz": "mean",
}
GPU_FIELDS = ("node", "index", "uuid", "health", "mig", "xid", "gpu_model")
QUEUE_JOB_FIELDS = (
    "id",
    "name",
    "tenant",
    "queue",
    "state",
    "gang",
    "pods",
    "gpus_per_pod",
    "submitted",
    "pending_reason",
)


class SnapshotIndexError(ValueError):
    """Bytes that are not a snapshot index (another format, or cut short)."""


@functools.lru_cache(maxsize=1 << 18)
def job_bucket(job_id: str) -> int:
    """The bucket of a job id: the same in every process and release (not Python's hash);
    remembered for the next cycle, which lists the same jobs (160,000 hashes, ~0.25 s of the
    index at 131,072 GPUs: issue #35)."""
    digest = hashlib.blake2b(job_id.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % JOB_BUCKETS


def compress(data: bytes) -> bytes:
    """``data`` as a stored snapshot holds it (its document, its index's header and parts):
    zlib-compressed, by ISA-L (:data:`COMPRESSION_LEVEL`); it lets go of the GIL."""
    return isal_zlib.compress(data, COMPRESSION_LEVEL)


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=str)


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, a decoded document's dicts answered without the ABC
    check (1.5 million calls at 131,072 GPUs, most of the index's time: issue #35)."""
    return type(value) is dict or isinstance(value, Mapping)


def index_parts(document: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of ``document`` by name (uncompressed): what :func:`build_index` stores."""
    node_entries = document.get("nodes") or ()
    gpu_entries = document.get("gpus") or ()
    job_entries = document.get("jobs") or ()
    nodes: dict[str, dict[str, Any]] = {}
    for entry in node_entries:
        if _is_mapping(entry):
            nodes[str(entry.get("name"))] = {"node": entry, "gpus": [], "jobs": []}
    for entry in gpu_entries:
        if _is_mapping(entry) and (node := nodes.get(str(entry.get("node")))) is not None:
            node["gpus"].append(entry)
    buckets: dict[int, list[Any]] = {}
    unlisted: dict[str, list[str]] = {}  # the jobs on nodes the snapshot does not list
    for job in job_entries:
        if not _is_mapping(job) or job.get("id") is None:
            continue
        job_id = str(job["id"])
        buckets.setdefault(job_bucket(job_id), []).append(job)
        if not (pods := job.get("allocation")):
            continue  # most jobs of a big cluster: pending ones
        for node in sorted({str(pod.get("node")) for pod in pods if _is_mapping(pod)}):
            if (listed := nodes.get(node)) is not None:
                listed["jobs"].append(job_id)
            else:
                unlisted.setdefault(node, []).append(job_id)
    parts: dict[str, Any] = {f"node:{name}": part for name, part in nodes.items()}
    parts.update({f"jobs:{bucket}": jobs for bucket, jobs in buckets.items()})
    parts["gpus"] = {
        "nodes": [part["node"] for part in nodes.values()],
        "gpus": [_gpu_summary(g) for g in gpu_entries if _is_mapping(g)],
    }
    scheduler = document.get("scheduler") or {}
    parts["queues"] = {
        "scheduler": {
            key: scheduler[key] for key in ("queue_parents", "cohorts") if key in scheduler
        },
        "queues": list(document.get("queues") or ()),
        "nodes": [{"name": n.get("name"), "gpus": n.get("gpus")} for n in nodes_of(document)],
        "jobs": [_queue_job(job) for job in job_entries if _is_mapping(job)],
    }
    unplaced: list[list[Any]] = []
    placed: dict[str, list[list[Any]]] = {}
    for position, event in enumerate(document.get("events") or ()):
        if not _is_mapping(event):
            continue
        node = event.get("node")
        if node is None or node == "":
            unplaced.append([position, event])
        elif isinstance(node, str):  # a fault's node is a name: no other value matches it
            placed.setdefault(node, []).append([position, event])
    parts["hits"] = {"as_of": document.get("as_of"), "events": unplaced, "unlisted": unlisted}
    parts.update({events_part(node): events for node, events in placed.items()})
    return parts


def nodes_of(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [n for n in document.get("nodes") or () if _is_mapping(n)]


def _gpu_summary(gpu: Mapping[str, Any]) -> dict[str, Any]:
    summary = {key: gpu[key] for key in GPU_FIELDS if key in gpu}
    for metric, statistic in _SUMMARY_ITEMS:
        if metric not in gpu:
            continue
        stats = gpu[metric]
        if type(stats) is dict and len(stats) == 1 and statistic in stats:
            summary[metric] = stats  # the entry's own: most hold that statistic only
        elif stats is not None and _is_mapping(stats) and statistic in stats:
            summary[metric] = {statistic: stats[statistic]}
    return summary


_SUMMARY_ITEMS = tuple(SUMMARY_METRICS.items())
_POD_FIELDS = ("node", "gpus", "share")


def _queue_job(job: Mapping[str, Any]) -> dict[str, Any]:
    slim = {key: job[key] for key in QUEUE_JOB_FIELDS if key in job}
    pods = job.get("allocation")
    slim["allocation"] = (
        [{key: pod[key] for key in _POD_FIELDS if key in pod} for pod in pods if _is_mapping(pod)]
        if pods
        else []
    )
    return slim


@dataclass(frozen=True)
class BuiltIndex:
    """An index as stored: ``header`` (zlib-compressed JSON: part name -> ``[offset, length]``
    in ``body``) and ``body`` (the parts, each zlib-compressed JSON, one after another)."""

    header: bytes
    body: bytes


def build_index(document: Mapping[str, Any]) -> BuiltIndex:
    """The index of ``document``."""
    return _built(index_parts(document), _dumps)


def _built(parts: Mapping[str, Any], dumps: Callable[[Any], bytes]) -> BuiltIndex:
    header: dict[str, list[int]] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, part in parts.items():
        chunk = compress(dumps(part))
        header[name] = [offset, len(chunk)]
        chunks.append(chunk)
        offset += len(chunk)
    return BuiltIndex(compress(_dumps(header)), b"".join(chunks))


def encode_with_index(document: Mapping[str, Any]) -> tuple[bytes, BuiltIndex]:
    """``orjson.dumps(document)`` and ``build_index(document)``, each part encoded by orjson
    as it is (no fallback to ``str``). The parts encode the document's entries again: at
    131,072 GPUs cheaper than one orjson fragment per entry shared by both (~0.5 s, #35).

    Raises what ``orjson.dumps(document)`` raises (a value it cannot encode)."""
    return orjson.dumps(dict(document)), _built(index_parts(document), orjson.dumps)


ReadBytes = Callable[[int, int], bytes]
"""Reads ``length`` bytes of a stored index's body from ``offset`` (in memory, or a substring
of the stored column)."""


class SnapshotIndex:
    """A stored index, read part by part: each part's bytes read, decompressed and parsed only
    when asked for."""

    def __init__(self, header: bytes, read: ReadBytes) -> None:
        try:
            self._header: dict[str, list[int]] = orjson.loads(zlib.decompress(header))
        except (zlib.error, orjson.JSONDecodeError) as error:
            raise SnapshotIndexError(f"not a gpuobs snapshot index header: {error}") from error
        self._read = read

    @classmethod
    def in_memory(cls, header: bytes, body: bytes) -> SnapshotIndex:
        return cls(header, lambda offset, length: body[offset : offset + length])

    def has(self, name: str) -> bool:
        return name in self._header

    def where(self, name: str) -> tuple[int, int] | None:
        """``(offset, length)`` of a part's bytes in the body, or None."""
        found = self._header.get(name)
        return (int(found[0]), int(found[1])) if found else None

    def part(self, name: str) -> Any:
        """The part called ``name``, or None when the snapshot has none by that name."""
        where = self.where(name)
        if where is None:
            return None
        return decode_part(self._read(*where))

    def node(self, name: str) -> Mapping[str, Any] | None:
        """A node's part: ``{"node": entry, "gpus": [...], "jobs": [job ids]}``."""
        return self.part(node_part(name))

    def jobs(
        self, job_ids: Iterable[str], part: Callable[[str], Any] | None = None
    ) -> dict[str, Mapping[str, Any]]:
        """The records of ``job_ids`` that the snapshot lists, by id (``part``: how a part is
        read, :meth:`part` unless given)."""
        wanted = {str(j) for j in job_ids}
        read = part or self.part
        found: dict[str, Mapping[str, Any]] = {}
        for name in job_parts(wanted):
            for job in read(name) or ():
                if str(job.get("id")) in wanted:
                    found[str(job["id"])] = job
        return found

    def hit_read(self, node: str, parts: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """What a fault on ``node`` reads of the snapshot, as its document would give it
        (``incident_hits.jobs_by_node`` and ``on_node``): ``{"as_of", "jobs": the records of the
        jobs placed on the node, in document order, "events": those naming the node or none, in
        document order}``. None for an index stored before it held the ``hits`` part.
        ``parts``: those of :func:`hit_parts` read already (the rest are read here)."""
        parts = dict(parts or {})

        def part(name: str) -> Any:
            if name not in parts:
                parts[name] = self.part(name)
            return parts[name]

        hits = part("hits")
        if hits is None:
            return None
        job_ids = placed_job_ids(hits, part(node_part(node)), node)
        records = self.jobs(job_ids, part)
        placed = part(events_part(node)) or []
        events = sorted([*hits["events"], *placed], key=lambda pair: pair[0])
        return {
            "as_of": hits["as_of"],
            "jobs": [records[j] for j in job_ids if j in records],
            "events": [event for _, event in events],
        }


def node_part(node: str) -> str:
    return f"node:{node}"


def placed_job_ids(
    hits: Mapping[str, Any], found: Mapping[str, Any] | None, node: str
) -> list[str]:
    """The ids of the jobs placed on ``node``, in document order: its part's (``found``), or,
    for a node the snapshot does not list, those the ``hits`` part names."""
    return found["jobs"] if found is not None else hits["unlisted"].get(node, [])


def job_parts(job_ids: Iterable[str]) -> list[str]:
    """The names of the job buckets that hold ``job_ids``' records."""
    return [f"jobs:{bucket}" for bucket in sorted({job_bucket(str(j)) for j in job_ids})]


def events_part(node: str) -> str:
    return f"events:{node}"


def hit_parts(node: str) -> tuple[str, ...]:
    """The parts :meth:`SnapshotIndex.hit_read` reads first for a fault on ``node`` (then the
    job buckets of the jobs they name)."""
    return ("hits", node_part(node), events_part(node))


def decode_part(data: bytes) -> Any:
    """One part's stored bytes, decoded."""
    try:
        return orjson.loads(zlib.decompress(data))
    except (zlib.error, orjson.JSONDecodeError) as error:
        raise SnapshotIndexError(f"a snapshot index part does not decode: {error}") from error
