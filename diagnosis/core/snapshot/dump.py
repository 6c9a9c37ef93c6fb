"""Dumping a :class:`ClusterSnapshot` back to its ``gpuobs.snapshot/v1`` document."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import numpy as np
import orjson
import pandas as pd

from diagnosis.core.snapshot.frame import (
    GPU_BASE_COLUMNS,
    WHOLE_GPU,
    ClusterSnapshot,
    format_time,
)
from diagnosis.core.snapshot_index import BuiltIndex, build_index, encode_with_index
from diagnosis.core.vocabulary import SNAPSHOT_FORMAT


def dump(snapshot: ClusterSnapshot, *, cluster: str | None = None) -> dict[str, Any]:
    """The ``gpuobs.snapshot/v1`` document of a snapshot; ``load(dump(s))`` equals ``s``
    (``cluster``: another cluster's name in it).

    Built column by column (each frame column read once as a Python list), not row by row:
    at 16,384 GPUs / 20,000 jobs a cycle stores this document every minute (issue #17).
    """
    return dict(lazy_dump(snapshot, cluster=cluster))


def lazy_dump(
    snapshot: ClusterSnapshot, *, cluster: str | None = None, gpu_metrics: bool = True
) -> Mapping[str, Any]:
    """:func:`dump`'s document, each part built from the frames when it is first read: what
    a reader of a few parts needs without the rest (on-call reads the nodes, the GPUs' health
    and the events while the whole document is dumped in another process: issue #35). Without
    ``gpu_metrics`` its GPU entries lack their metrics."""
    parts: dict[str, Callable[[ClusterSnapshot], Any]] = {
        "format": lambda _: SNAPSHOT_FORMAT,
        "cluster": lambda s: s.cluster,
        "as_of": lambda s: format_time(s.as_of),
        "window_s": lambda s: int(s.window_s),
        "scheduler": lambda s: dict(s.scheduler),
        "nodes": _dump_nodes,
        "gpus": functools.partial(_dump_gpus, metrics=gpu_metrics),
        "queues": _dump_queues,
        "jobs": _dump_jobs,
        "events": _dump_events,
    }
    parts.update({key: functools.partial(_as_is, value) for key, value in snapshot.extra.items()})
    if cluster is not None:
        parts["cluster"] = functools.partial(_as_is, cluster)
    return _LazyDocument(snapshot, parts)


class _LazyDocument(Mapping[str, Any]):
    def __init__(
        self, snapshot: ClusterSnapshot, parts: dict[str, Callable[[ClusterSnapshot], Any]]
    ) -> None:
        self._snapshot = snapshot
        self._parts = parts
        self._built: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._built:
            self._built[key] = self._parts[key](self._snapshot)
        return self._built[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)


def dump_jobs_on(snapshot: ClusterSnapshot, nodes: Collection[str]) -> list[dict[str, Any]]:
    """The entries of ``dump(snapshot)["jobs"]`` that have a pod on one of ``nodes``, in its
    order: a few nodes' jobs without dumping all of them (160,000 at 131,072 GPUs: ~2 s)."""
    allocations, jobs = snapshot.allocations, snapshot.jobs
    on_nodes = allocations["node"].isin(list(nodes)).to_numpy()
    held = set(allocations["job"].to_numpy()[on_nodes].tolist())
    return _dump_jobs(
        dataclasses.replace(
            snapshot,
            jobs=jobs[jobs["id"].isin(held).to_numpy()],
            allocations=allocations[allocations["job"].isin(held).to_numpy()],
        )
    )


def _as_is(value: Any, _snapshot: ClusterSnapshot) -> Any:
    return value


def _dump_queues(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    return [
        _drop_none(
            {
                "name": name,
                "tenant": _text(tenant),
                "weight": _plain(weight),
                "deserved_gpus": _plain(deserved),
                "capability_gpus": _plain(capability),
            }
        )
        for name, tenant, weight, deserved, capability in zip(
            *_columns(
                snapshot.queues, "name", "tenant", "weight", "deserved_gpus", "capability_gpus"
            ),
            strict=True,
        )
    ]


def _dump_events(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    events = snapshot.events
    return [
        {
            "time": time,
            "kind": kind,
            "job": _text(job),
            "node": _text(node),
            "reason": _text(reason),
            "message": _text(message),
        }
        for time, kind, job, node, reason, message in zip(
            _times(events["time"]),
            *_columns(events, "kind", "job", "node", "reason", "message"),
            strict=True,
        )
    ]


def dumps(snapshot: ClusterSnapshot, *, indent: int | None = None) -> str:
    return json.dumps(dump(snapshot), indent=indent, allow_nan=False)


# The parts of a document :func:`dump` builds from the frames: their numbers are finite (the
# loader refuses others). Anything else in a document (``scheduler``, the extra keys) is passed
# through as the file had it and is checked before the fast encoder sees it.
_FRAME_PARTS = frozenset({"nodes", "gpus", "queues", "jobs", "events"})


def encode(document: Mapping[str, Any]) -> bytes:
    """The compact UTF-8 JSON of a snapshot document, as it is stored.

    It decodes to what ``json.dumps(document, separators=(",", ":"), ensure_ascii=False)``
    writes (orjson writes it ~10x faster: 0.3 s -> 0.03 s for 12 MB at 16,384 GPUs). Where the
    two would differ -- a non-finite number (orjson writes ``null``, json ``NaN``), a key that
    is not text, an integer beyond 64 bits -- json writes it, as it always did."""
    if _passed_through_finite(document):
        try:
            return orjson.dumps(document)
        except (orjson.JSONEncodeError, TypeError):
            pass
    return _encoded_by_json(document)


def encode_indexed(document: Mapping[str, Any]) -> tuple[bytes, BuiltIndex]:
    """``encode(document)`` and ``build_index(document)``, the same bytes, both written by
    orjson where it encodes the document
    (:func:`~diagnosis.core.snapshot_index.encode_with_index`)."""
    if _passed_through_finite(document):
        try:
            return encode_with_index(document)
        except (orjson.JSONEncodeError, TypeError):
            pass
    return _encoded_by_json(document), build_index(document)


def _passed_through_finite(document: Mapping[str, Any]) -> bool:
    return all(_finite(value) for key, value in document.items() if key not in _FRAME_PARTS)


def _encoded_by_json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def _finite(value: Any) -> bool:
    """Whether a passed-through JSON value holds no NaN or infinity (at any depth)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(item) for item in value)
    return True


def _dump_nodes(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    gpus = snapshot.gpus
    physical = gpus[~gpus[["node", "index"]].duplicated().to_numpy()]
    rows_of: dict[Any, list[int]] = {}
    for row, node in enumerate(physical["node"].tolist()):
        rows_of.setdefault(node, []).append(row)
    indexes, domains, numas = _columns(physical, "index", "nvlink_domain", "numa")
    topology: dict[str, dict[str, Any]] = {}
    for node, rows in rows_of.items():
        entry: dict[str, Any] = {}
        node_domains = [domains[r] for r in rows]
        present = sorted({d for d in node_domains if d >= 0})
        if present:
            entry["nvlink_domains"] = [
                [indexes[r] for r, d in zip(rows, node_domains, strict=True) if d == domain]
                for domain in present
            ]
        node_numa = [numas[r] for r in rows]
        if any(m >= 0 for m in node_numa):
            entry["numa"] = [int(m) if m >= 0 else None for m in node_numa]
        if entry:
            topology[node] = entry
    nodes = []
    for name, pool, gpu_model, count, state, cpu_util in zip(
        *_columns(snapshot.nodes, "name", "pool", "gpu_model", "gpus", "state", "cpu_util"),
        strict=True,
    ):
        node = _drop_none(
            {
                "name": name,
                "pool": pool,
                "gpu_model": _text(gpu_model),
                "gpus": int(count),
                "state": state,
                "cpu_util": _plain(cpu_util),
            }
        )
        if name in topology:
            node["topology"] = topology[name]
        nodes.append(node)
    return nodes


def _dump_gpus(snapshot: ClusterSnapshot, *, metrics: bool = True) -> list[dict[str, Any]]:
    gpus = snapshot.gpus
    gpus = gpus[gpus["reported"].to_numpy(dtype=bool)]
    xids: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for node, index, code, time in zip(
        *_columns(snapshot.xids, "node", "index", "code"),
        _times(snapshot.xids["time"]),
        strict=True,
    ):
        xids.setdefault((node, int(index)), []).append({"code": int(code), "time": time})
    # a dict, not the Series: Series.get was ~60% of the GPUs' dump (131,072 calls, issue #35)
    node_models = dict(
        zip(snapshot.nodes.index.tolist(), *_texts(snapshot.nodes, "gpu_model"), strict=True)
    )
    out = []
    for (
        node,
        index,
        uuid,
        health,
        clique,
        guessed,
        instance,
        profile,
        parent,
        capacity,
        model,
    ) in zip(
        *_columns(gpus, "node"),
        *_ints(gpus, "index"),
        *_texts(gpus, "uuid"),
        *_columns(gpus, "health"),
        *_texts(gpus, "nvlink_clique"),
        *_columns(gpus, "index_guessed"),
        *_ints(gpus, "mig_instance"),
        *_columns(gpus, "mig_profile", "mig_parent_uuid", "capacity"),
        *_texts(gpus, "gpu_model"),
        strict=True,
    ):
        entry: dict[str, Any] = {"node": node, "index": index}
        if model is not None and model != node_models.get(node):
            entry["gpu_model"] = model  # its own, unlike its node's
        if uuid is not None:
            entry["uuid"] = uuid
        entry["health"] = health
        if clique is not None:
            entry["nvlink_clique"] = clique
        if guessed:
            entry["index_guessed"] = True
        if instance != WHOLE_GPU:
            entry["mig"] = _drop_none(
                {
                    "profile": _text(profile),
                    "instance": instance,
                    "parent_uuid": _text(parent),
                    "compute_fraction": _plain(capacity),
                }
            )
        out.append(entry)
    for column in gpus.columns if metrics else ():
        if column in GPU_BASE_COLUMNS:
            continue
        values = _plain_values(gpus[column])
        if values is None:
            continue
        metric, stat = column.rsplit("_", 1)
        for entry, value in zip(out, values, strict=True):
            if value is not _MISSING:
                entry.setdefault(metric, {})[stat] = value
    if xids:
        for entry in out:
            key = (entry["node"], entry["index"])
            if key in xids:
                entry["xid"] = xids[key]
    return out


def _dump_jobs(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    allocation = _dump_allocation(snapshot)
    jobs = snapshot.jobs
    out = []
    for (
        job_id,
        name,
        tenant,
        queue,
        pool,
        kind,
        priority,
        state,
        submitted,
        started,
        ended,
        pods,
        gpus_per_pod,
        gang,
        min_member,
        pending_reason,
        partial_since,
        preemptions,
        tp,
        tflops,
    ) in zip(
        *_columns(jobs, "id"),
        *_texts(jobs, "name", "tenant", "queue", "pool", "kind"),
        *_ints(jobs, "priority"),
        *_columns(jobs, "state"),
        _times(jobs["submitted"]),
        _times(jobs["started"]),
        _times(jobs["ended"]),
        *_ints(jobs, "pods", "gpus_per_pod"),
        jobs["gang"].to_numpy(dtype=bool).tolist(),
        *_ints(jobs, "min_member"),
        *_texts(jobs, "pending_reason"),
        _times(jobs["partial_since"]),
        *_ints(jobs, "preemptions"),
        *_columns(jobs, "tp", "achieved_tflops_per_gpu"),
        strict=True,
    ):
        job = {
            "id": job_id,
            "name": name,
            "tenant": tenant,
            "queue": queue,
            "pool": pool,
            "kind": kind,
            "priority": priority,
            "state": state,
            "submitted": submitted,
            "started": started,
            "ended": ended,
            "pods": pods,
            "gpus_per_pod": gpus_per_pod,
            "gang": gang,
            "min_member": min_member,
            "allocation": allocation.get(job_id, []),
            "pending_reason": pending_reason,
            "partial_since": partial_since,
            "preemptions": preemptions,
        }
        if not math.isnan(tp):
            job["parallelism"] = {"tp": int(tp)}
        if not math.isnan(tflops):
            job["achieved_tflops_per_gpu"] = float(tflops)
        out.append(job)
    return out


def _dump_allocation(snapshot: ClusterSnapshot) -> dict[str, list[dict[str, Any]]]:
    """Each job's pods as the document lists them, in the order the frame first names them."""
    allocations = snapshot.allocations
    job_col, pod_col, node_col, index_col, instance_col, share_col, guessed_col = _columns(
        allocations, "job", "pod", "node", "index", "mig_instance", "share", "guessed"
    )
    rows_of: dict[tuple[Any, Any], list[int]] = {}
    for row, key in enumerate(zip(job_col, pod_col, strict=True)):
        if _is_missing(key[0]) or _is_missing(key[1]):
            continue  # as groupby drops a missing key
        rows_of.setdefault(key, []).append(row)
    uuid_of: dict[tuple[Any, Any, Any], Any] | None = None
    allocation: dict[str, list[dict[str, Any]]] = {}
    for (job, _pod), rows in rows_of.items():
        first = rows[0]
        pod: dict[str, Any] = {"node": node_col[first], "gpus": [index_col[r] for r in rows]}
        instances = [instance_col[r] for r in rows]
        if any(i != WHOLE_GPU for i in instances):
            if uuid_of is None:
                gpus = snapshot.gpus
                uuid_of = dict(
                    zip(
                        zip(*_columns(gpus, "node", "index", "mig_instance"), strict=True),
                        gpus["uuid"].tolist(),
                        strict=True,
                    )
                )
            pod["uuids"] = [
                uuid_of.get((pod["node"], index, instance))
                for index, instance in zip(pod["gpus"], instances, strict=True)
            ]
        share = float(share_col[first])
        if share != 1.0:
            pod["share"] = share
        if bool(guessed_col[first]):
            pod["gpus_guessed"] = True
        allocation.setdefault(job, []).append(pod)
    return allocation


def _columns(frame: pd.DataFrame, *names: str) -> list[list[Any]]:
    """Columns of a frame as Python lists (numpy scalars become Python numbers)."""
    return [frame[name].tolist() for name in names]


def _texts(frame: pd.DataFrame, *names: str) -> list[list[str | None]]:
    """Text columns of a frame as :func:`_text` gives each value."""
    return [[v if isinstance(v, str) else None for v in frame[name].tolist()] for name in names]


def _ints(frame: pd.DataFrame, *names: str) -> list[list[int]]:
    """Whole-number columns of a frame as Python ints (``int`` of each value)."""
    return [frame[name].to_numpy(dtype=np.int64).tolist() for name in names]


def _times(column: pd.Series) -> list[str | None]:
    """A time column as :func:`format_time` writes each value: where the column holds
    UTC-convertible times (the frames' dtype), its present times' whole seconds formatted in
    one numpy call, and only a fraction of a second or a year strftime pads in Python."""
    if not isinstance(column.dtype, pd.DatetimeTZDtype):
        return [format_time(value) for value in column.tolist()]
    moments = column.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy().astype("datetime64[us]")
    out = np.full(len(moments), None, dtype=object)
    rows = np.flatnonzero(~np.isnat(moments))
    moments = moments[rows]
    seconds = moments.astype("datetime64[s]")
    out[rows] = np.strings.add(np.datetime_as_string(seconds, unit="s"), "Z")
    micros = (moments - seconds).astype(np.int64)
    for i in np.flatnonzero(micros).tolist():
        out[rows[i]] = f"{seconds[i]}.{micros[i]:06d}".rstrip("0") + "Z"
    years = seconds.astype("datetime64[Y]").astype(np.int64) + 1970
    for i in np.flatnonzero((years < 1000) | (years > 9999)).tolist():
        moment = pd.Timestamp(np.datetime_as_string(moments[i], unit="us"), tz="UTC")
        out[rows[i]] = format_time(moment)
    return out.tolist()


_MISSING = object()


def _plain_values(column: pd.Series) -> list[Any] | None:
    """A metric column as :func:`_plain` gives each value, ``_MISSING`` where the value is
    missing (None or NaN); None where every value is. A float column is judged in numpy, and
    only its whole and missing values are touched in Python."""
    if column.dtype.kind != "f":
        values = [
            _MISSING if value is None or math.isnan(value) else _plain(value)
            for value in column.tolist()
        ]
        return values if any(value is not _MISSING for value in values) else None
    floats = column.to_numpy(dtype="float64")
    missing = np.isnan(floats)
    if missing.all():
        return None
    values = floats.tolist()
    for row in np.flatnonzero(np.isfinite(floats) & (floats == np.floor(floats))).tolist():
        values[row] = int(values[row])
    for row in np.flatnonzero(missing).tolist():
        values[row] = _MISSING
    return values


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


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
