"""From Prometheus's answers about dcgm-exporter series to the snapshot's per-GPU statistics.

Column-wise throughout: each answer arrives as a list of label dicts and an array of values (one
per series); series are keyed by :func:`diagnosis.edge.sources.dcgm.fields.uuid_of` and the MIG
instance, factorised once, and every statistic becomes a dense numpy column over those keys. No
I/O, no Django.

What the answers hold (see ``prometheus.queries.family_queries``): ``util`` (``mean``, ``p10``,
``p90`` per GPU or MIG instance, ``src`` ``prof`` for ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` or ``dev``
for ``DCGM_FI_DEV_GPU_UTIL`` in percent), ``tensor`` (``mean`` per GPU or instance), and per
physical GPU ``memory`` (``frac``), ``power`` (``mean``), ``temperature`` (``max``), ``pcie``
(``mean`` of ``rx`` and ``tx``), ``nvlink`` (``mean`` of ``prof`` bytes/s or of the ``total``
field in its own unit); ``inventory`` (``last`` sample time per series, with the labels that say
where the GPU is and who uses it, and ``samples``: the most samples any GPU has in the window).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.vocabulary import format_time
from diagnosis.edge.sources.dcgm import fields as dcgm

Answer = tuple[list[dict[str, str]], np.ndarray]  # labels per series, value per series

# Snapshot statistic -> (answer, src, stat); activity statistics are per GPU or MIG instance.
ACTIVITY = {
    "util_mean": ("util", None, "mean"),
    "util_p10": ("util", None, "p10"),
    "util_p90": ("util", None, "p90"),
    "tensor_active_mean": ("tensor", "", "mean"),
}
DEVICE = {
    "fb_used_frac_mean": ("memory", "", "frac"),
    "power_w_mean": ("power", "", "mean"),
    "temp_c_max": ("temperature", "", "max"),
    "pcie_rx_Bps_mean": ("pcie", "rx", "mean"),
    "pcie_tx_Bps_mean": ("pcie", "tx", "mean"),
    "nvlink_Bps_mean": ("nvlink", None, "mean"),
}
FRACTIONS = frozenset({"util", "tensor_active", "fb_used_frac"})


def _columns(answer: Answer, *names: str) -> list[list[str]]:
    labels = answer[0]
    return [[series.get(name) or "" for series in labels] for name in names]


@dataclass(frozen=True)
class _Table:
    """One answer column-wise: each series' GPU, MIG instance, ``src``, ``stat`` and value."""

    uuid: np.ndarray
    instance: np.ndarray
    src: np.ndarray
    stat: np.ndarray
    value: np.ndarray

    @classmethod
    def of(cls, answer: Answer) -> _Table:
        labels, values = answer
        uuids, instances = dcgm.keys_of(labels)
        srcs, stats = _columns(answer, "src", "stat")
        return cls(
            np.array(uuids, dtype=object),
            np.array(instances, dtype=object),
            np.array(srcs, dtype=object),
            np.array(stats, dtype=object),
            np.asarray(values, dtype=np.float64),
        )


# -- inventory -----------------------------------------------------------------------------------


@dataclass
class Inventory:
    """Per (uuid, MIG instance): where the GPU is and who uses it, from its latest series, and
    the time of its latest sample; ``samples``: the most samples any GPU has in the window."""

    rows: dict[tuple[str, str], dcgm.GpuLabels] = field(default_factory=dict)
    last: dict[tuple[str, str], float] = field(default_factory=dict)
    samples: float | None = None

    def workloads(self, uuid: str, instances: Sequence[str]) -> tuple[str, str]:
        """The workloads (and Slurm jobs) on a GPU, each MIG instance's latest."""
        if len(instances) == 1:
            workload = self.rows[(uuid, instances[0])].workload
            return workload.as_text(), workload.hpc_job
        names = {self.rows[(uuid, i)].workload.as_text() for i in instances}
        jobs = {self.rows[(uuid, i)].workload.hpc_job for i in instances}
        return ", ".join(sorted(names - {""})), ", ".join(sorted(jobs - {""}))


def inventory(answer: Answer) -> Inventory:
    labels, values = answer
    result = Inventory()
    (stats,) = _columns(answer, "stat")
    order = np.argsort(values, kind="stable")  # the latest series of a key comes last
    for i in order.tolist():
        value = float(values[i])
        if stats[i] == "samples":
            result.samples = value if not math.isnan(value) else None
            continue
        identity = dcgm.normalize(labels[i])
        if not identity.uuid or math.isnan(value):
            continue
        result.rows[identity.key] = identity
        result.last[identity.key] = value
    return result


# -- statistics ----------------------------------------------------------------------------------


def _dense(table: _Table, src: str | None, stat: str, index: pd.Index, by_instance: bool):
    """One (src, stat) statistic as a column over ``index`` (keys ``uuid`` or ``uuid\x1finst``);
    with ``src`` None, each key's own src, returned beside the values."""
    keys = table.uuid + "\x1f" + table.instance if by_instance else table.uuid
    mask = table.stat == stat
    if src is not None:
        mask &= table.src == src
    positions = index.get_indexer(keys[mask])
    out = np.full(len(index), np.nan)
    found = positions >= 0
    out[positions[found]] = table.value[mask][found]
    origin = np.full(len(index), "", dtype=object)
    origin[positions[found]] = table.src[mask][found]
    return out, origin


def statistics(
    answers: Mapping[str, Answer], inventory_: Inventory, nvlink_total_unit_Bps: float = 1e6
) -> pd.DataFrame:
    """Per physical GPU (index: uuid): the snapshot's statistics (``<metric>_<stat>`` columns)
    and ``util_src`` (``prof`` or ``dev``).

    MIG instances combine into their GPU: activity weighted by each instance's share of the GPU
    (``3g.40gb`` = 3/7), device-wide quantities as Prometheus summed them per GPU.
    """
    tables = {
        name: _Table.of(answers[name])
        for name in ("util", "tensor", "memory", "power", "temperature", "pcie", "nvlink")
    }
    activity_keys = set()
    for name in ("util", "tensor"):
        table = tables[name]
        activity_keys.update(zip(table.uuid.tolist(), table.instance.tolist(), strict=True))
    activity_index = pd.Index([f"{u}\x1f{i}" for u, i in sorted(activity_keys) if u])
    device_uuids = {u for u, _ in activity_keys}
    for name in ("memory", "power", "temperature", "pcie", "nvlink"):
        device_uuids.update(tables[name].uuid.tolist())
    device_uuids.discard("")
    gpus = pd.Index(sorted(device_uuids), name="uuid")

    activity = pd.DataFrame(index=activity_index)
    for column, (name, src, stat) in ACTIVITY.items():
        values, origin = _dense(tables[name], src, stat, activity_index, by_instance=True)
        if name == "util":
            values = np.where(origin == "dev", values / 100.0, values)
            activity["util_src"] = np.where(origin != "", origin, activity.get("util_src", ""))
        activity[column] = values
    if "util_src" not in activity:
        activity["util_src"] = ""
    pairs = [key.split("\x1f", 1) for key in activity.index]
    activity_uuid = pd.Index([u for u, _ in pairs], dtype=object)
    activity_instance = pd.Index([i for _, i in pairs], dtype=object)

    frame = pd.DataFrame(index=gpus)
    whole = np.asarray(activity_instance == "", dtype=bool)
    for column in (*ACTIVITY, "util_src"):
        frame[column] = pd.Series(activity[column].to_numpy()[whole], index=activity_uuid[whole])
    mig = ~whole
    if mig.any():
        _combine_mig(frame, activity[mig], activity_uuid[mig], activity_instance[mig], inventory_)
    frame["util_src"] = frame["util_src"].fillna("")

    for column, (name, src, stat) in DEVICE.items():
        values, origin = _dense(tables[name], src, stat, gpus, by_instance=False)
        if name == "nvlink":
            values = np.where(origin == "total", values * nvlink_total_unit_Bps, values)
        frame[column] = values
    return frame


def _combine_mig(frame, rows: pd.DataFrame, uuids, instances, inventory_: Inventory) -> None:
    shares = np.array(
        [
            dcgm.mig_share(
                inventory_.rows[(u, i)].mig_profile if (u, i) in inventory_.rows else "",
                inventory_.rows[(u, i)].model if (u, i) in inventory_.rows else "",
            )
            for u, i in zip(uuids, instances, strict=True)
        ]
    )
    groups = pd.Index(uuids)
    for column in ACTIVITY:
        weighted = pd.Series(rows[column].to_numpy() * shares, index=groups)
        combined = weighted.groupby(level=0).sum(min_count=1).clip(upper=1.0)
        frame.loc[combined.index, column] = frame.loc[combined.index, column].fillna(combined)
    sources = pd.Series(rows["util_src"].to_numpy(), index=groups).groupby(level=0).max()
    missing = frame.loc[sources.index, "util_src"].isna() | (
        frame.loc[sources.index, "util_src"] == ""
    )
    frame.loc[sources.index[missing.to_numpy()], "util_src"] = sources[missing.to_numpy()]


# -- Xids ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class XidEvent:
    uuid: str
    code: int
    time: float


def xid_events(
    labels: Sequence[Mapping[str, str]],
    timestamps: np.ndarray,
    values: np.ndarray,
    window_start: float,
) -> list[XidEvent]:
    """Xids that appeared in the window, from the Xid series on a step grid (rows: series): the
    gauge changed to a non-zero value (or a non-zero series began) inside it; the exporter's
    counter grew (or began above zero) inside it. The code is the ``err_code`` (gauge) or ``xid``
    (counter) label when present, else the gauge's value."""
    events: dict[tuple[str, int], float] = {}
    inside = timestamps >= window_start - 1e-6
    for series, row in zip(labels, values, strict=True):
        uuid = dcgm.uuid_of(series)
        seen = ~np.isnan(row)
        if not uuid or not seen.any():
            continue
        observed = row[seen]
        times = timestamps[seen]
        previous = np.concatenate([[np.nan], observed[:-1]])
        counter = series.get("src") == "count"
        if counter:
            hits = (np.isnan(previous) & (observed > 0)) | (observed > previous)
            label = series.get("xid", "")
        else:
            began = np.isnan(previous) & (observed != 0)
            changed = (observed != previous) & (observed != 0) & ~np.isnan(previous)
            hits = began | changed
            label = series.get("err_code", "")
        hits &= inside[seen]
        for value, moment in zip(observed[hits], times[hits], strict=True):
            if label.isdigit() and int(label) > 0:
                code = int(label)
            elif counter:
                continue  # a counter without its xid label names no code
            else:
                code = int(value)
            if code > 0:
                key = (uuid, code)
                events[key] = min(events.get(key, math.inf), float(moment))
    return [XidEvent(u, c, t) for (u, c), t in sorted(events.items(), key=lambda kv: kv[1])]


# -- placing GPUs on the scheduler's nodes -------------------------------------------------------


@dataclass
class Placement:
    """The snapshot's ``gpus[]`` entries of the GPUs found on the scheduler's nodes."""

    gpus: dict[tuple[str, int], dict[str, Any]]
    last_seen: dict[tuple[str, int], float]
    unmatched: int
    util_sources: dict[str, int]
    newest: float | None


def _rounded(frame: pd.DataFrame, columns: Sequence[tuple[str, str, str]]) -> pd.DataFrame:
    """Fractions clipped to 0..1 and kept to 6 decimals, byte rates whole, the rest to 3
    decimals (what the snapshot needs, and no more digits in its JSON)."""
    out = frame.copy()
    for column, metric, _ in columns:
        values = out[column].to_numpy(dtype=np.float64)
        if metric in FRACTIONS:
            out[column] = np.round(np.clip(values, 0.0, 1.0), 6)
        elif metric.endswith("_Bps"):
            out[column] = np.round(values)
        else:
            out[column] = np.round(values, 3)
    return out


def place(
    frame: pd.DataFrame,
    inventory_: Inventory,
    xids: Sequence[XidEvent],
    node_gpus: Mapping[str, int],
    uuids: Mapping[str, tuple[str, int]],
) -> Placement:
    """Each GPU's entry, placed by its UUID when the scheduler knows it, else by its host label
    (either spelling, short or full name) and ``gpu`` index."""
    hosts = dcgm.host_index(list(node_gpus))
    instances: dict[str, list[str]] = {}
    last: dict[str, float] = {}
    for (uuid, instance), seen in inventory_.last.items():
        instances.setdefault(uuid, []).append(instance)
        last[uuid] = max(last.get(uuid, -math.inf), seen)
    by_uuid: dict[str, list[dict[str, Any]]] = {}
    for event in xids:
        by_uuid.setdefault(event.uuid, []).append({"code": event.code, "time": iso(event.time)})
    metric_columns = [(c, *c.rsplit("_", 1)) for c in frame.columns if c != "util_src"]
    rounded = _rounded(frame, metric_columns)
    columns = [(metric, stat, rounded[c].tolist()) for c, metric, stat in metric_columns]
    util_src = frame["util_src"].tolist() if "util_src" in frame else [""] * len(frame)
    row_of = {uuid: i for i, uuid in enumerate(frame.index)}
    placed: dict[tuple[str, int], dict[str, Any]] = {}
    last_seen: dict[tuple[str, int], float] = {}
    sources: dict[str, int] = {}
    unmatched = 0
    for uuid in sorted(set(row_of) | set(instances)):
        where = uuids.get(uuid)
        if where is None and uuid in instances:
            latest = max(instances[uuid], key=lambda i: inventory_.last[(uuid, i)])
            identity = inventory_.rows[(uuid, latest)]
            node = dcgm.node_for_host(identity.host, hosts)
            if node is not None and identity.gpu is not None:
                where = (node, identity.gpu)
        if where is None or where[1] >= node_gpus.get(where[0], 0) or where in placed:
            unmatched += 1
            continue
        entry: dict[str, Any] = {"node": where[0], "index": where[1], "uuid": uuid}
        row = row_of.get(uuid)
        if row is not None:
            for metric, stat, values in columns:
                value = values[row]
                if value == value:  # not NaN
                    entry.setdefault(metric, {})[stat] = value
            if util_src[row]:
                sources[util_src[row]] = sources.get(util_src[row], 0) + 1
        if uuid in by_uuid:
            entry["xid"] = by_uuid[uuid]
        if uuid in instances:
            workload, job = inventory_.workloads(uuid, instances[uuid])
            if workload:
                entry["workload"] = workload
            if job:
                entry["hpc_job"] = job
            last_seen[where] = last[uuid]
        placed[where] = entry
    newest = max(last_seen.values()) if last_seen else None
    return Placement(placed, last_seen, unmatched, sources, newest)


def iso(seconds: float) -> str:
    """Unix seconds as RFC 3339 UTC, to the millisecond (``2026-11-29T08:00:00.25Z``)."""
    return format_time(datetime.fromtimestamp(round(seconds, 3), UTC))
