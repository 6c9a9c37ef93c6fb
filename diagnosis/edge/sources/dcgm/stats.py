"""From Prometheus's answers about dcgm-exporter series to the snapshot's per-GPU statistics.

Column-wise throughout: each answer arrives as a list of label dicts and an array of values (one
per series); series are keyed by :func:`diagnosis.edge.sources.dcgm.fields.uuid_of` and the MIG
instance, factorised once, and every statistic becomes a dense numpy column over those keys. No
I/O, no Django.

What the answers hold (see ``prometheus.queries.family_queries``): ``util`` (``mean``, ``p10``,
``p90`` per GPU or MIG instance, ``src`` ``prof`` for ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` or ``dev``
for ``DCGM_FI_DEV_GPU_UTIL`` in percent), ``tensor`` (``mean`` per GPU or instance), and per
GPU or MIG instance ``memory`` (``frac``; an instance's own framebuffer where the exporter reports
it per instance), per physical GPU ``power`` (``mean``), ``temperature`` (``max``), ``pcie``
(``mean`` of ``rx`` and ``tx``), ``nvlink`` (``mean`` of ``prof`` bytes/s or of the ``total``
field in its own unit), ``health`` (per physical GPU: ``power_limit`` / ``max_sm_clock``
``max``, ``sm_clock`` ``mean``, ``thermal`` / ``power`` ``frac`` of the window throttled,
``remap`` ``pending`` / ``failure`` / ``uncorrectable``), ``tensor`` with ``src`` ``dram`` for
DRAM activity; ``inventory`` (``last`` sample time per series, with the labels that say
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
    "dram_active_mean": ("tensor", "dram", "mean"),
}
DEVICE = {
    "fb_used_frac_mean": ("memory", "", "frac"),
    "power_w_mean": ("power", "", "mean"),
    "temp_c_max": ("temperature", "", "max"),
    "pcie_rx_Bps_mean": ("pcie", "rx", "mean"),
    "pcie_tx_Bps_mean": ("pcie", "tx", "mean"),
    "nvlink_Bps_mean": ("nvlink", None, "mean"),
    "power_limit_w_max": ("health", "power_limit", "max"),
    "sm_clock_mhz_mean": ("health", "sm_clock", "mean"),
    "max_sm_clock_mhz_max": ("health", "max_sm_clock", "max"),
    "throttle_thermal_frac": ("health", "thermal", "frac"),
    "throttle_power_frac": ("health", "power", "frac"),
    "row_remap_pending": ("health", "remap", "pending"),
    "row_remap_failure": ("health", "remap", "failure"),
    "row_remap_uncorrectable": ("health", "remap", "uncorrectable"),
}
FRACTIONS = frozenset(
    {"util", "tensor_active", "fb_used_frac", "dram_active", "throttle_thermal", "throttle_power"}
)


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


# Series of one GPU scraped together carry the same timestamp; a pod that came after another
# is at least a scrape interval later.
SAME_SCRAPE_S = 0.5


@dataclass
class Inventory:
    """Per (uuid, MIG instance): where the GPU is and who uses it, from its latest series, and
    the time of its latest sample; ``samples``: the most samples any GPU has in the window.

    ``shared``: the units whose latest scrape shows several pods at once (a GPU shared by
    time-slicing or MPS, as dcgm-exporter's ``--kubernetes-virtual-gpus`` labels it: one series
    per pod, beside the device's own from 4.5.3; docs/integrations.md, "Shared GPUs"): unit ->
    the workloads of that scrape, sorted. ``crowded``: the units with more series than the
    collection's bound (``max_series_per_gpu``), with how many they have."""

    rows: dict[tuple[str, str], dcgm.GpuLabels] = field(default_factory=dict)
    last: dict[tuple[str, str], float] = field(default_factory=dict)
    samples: float | None = None
    shared: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    crowded: dict[tuple[str, str], int] = field(default_factory=dict)


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
        if stats[i] == "series":
            uuid, instance = dcgm.uuid_of(labels[i]), dcgm.instance_of(labels[i])
            if uuid and not math.isnan(value):
                result.crowded[(uuid, instance)] = int(value)
            continue
        identity = dcgm.normalize(labels[i])
        if not identity.uuid or math.isnan(value):
            continue
        key = identity.key
        together = key in result.last and value - result.last[key] < SAME_SCRAPE_S
        if together:
            result.shared.setdefault(key, [result.rows[key].workload.as_text()]).append(
                identity.workload.as_text()
            )
            if not identity.workload and result.rows[key].workload:
                identity = result.rows[key]  # the device's own series names no pod
        else:
            result.shared.pop(key, None)
        result.rows[key] = identity
        result.last[key] = max(value, result.last.get(key, value)) if together else value
    for key, workloads in list(result.shared.items()):
        names = sorted(set(workloads) - {""})
        if len(names) > 1 and key not in result.crowded:
            result.shared[key] = names
        else:
            del result.shared[key]
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


def statistics(answers: Mapping[str, Answer], nvlink_total_unit_Bps: float = 1e6) -> pd.DataFrame:
    """Per GPU unit — a whole GPU, or one MIG instance of a GPU — the snapshot's statistics
    (``<metric>_<stat>`` columns), ``util_src`` (``prof`` or ``dev``), ``uuid`` (the physical
    GPU's) and ``instance`` (the MIG ``GPU_I_ID``, "" for a whole GPU); index ``uuid\x1finstance``.

    A GPU shared by several pods is one unit: Prometheus already read it from the device's own
    series, or averaged the copies (``prometheus.queries``); nothing here multiplies by pods.
    A MIG instance keeps its own activity (util, tensor) and framebuffer; the device-wide
    quantities (power, temperature, PCIe, NVLink) are its GPU's, as Prometheus aggregated them per
    physical GPU. A GPU with MIG instances is no unit of its own (its GPU-level series only give
    those device-wide quantities).
    """
    tables = {
        name: _Table.of(answers[name])
        for name in (
            "util",
            "tensor",
            "memory",
            "power",
            "temperature",
            "pcie",
            "nvlink",
            "health",
        )
        if name in answers
    }
    unit_keys: set[tuple[str, str]] = set()
    for name in ("util", "tensor", "memory"):
        table = tables[name]
        unit_keys.update(zip(table.uuid.tolist(), table.instance.tolist(), strict=True))
    device_uuids = {u for u, _ in unit_keys}
    for name in ("power", "temperature", "pcie", "nvlink", "health"):
        if name in tables:
            device_uuids.update(tables[name].uuid.tolist())
    unit_keys.update((u, "") for u in device_uuids)
    split = {u for u, i in unit_keys if i}
    keys = sorted((u, i) for u, i in unit_keys if u and (i or u not in split))
    index = pd.Index([f"{u}\x1f{i}" for u, i in keys])
    frame = pd.DataFrame(index=index)
    frame["uuid"] = [u for u, _ in keys]
    frame["instance"] = [i for _, i in keys]
    for column, (name, src, stat) in ACTIVITY.items():
        values, origin = _dense(tables[name], src, stat, index, by_instance=True)
        if name == "util":
            values = np.where(origin == "dev", values / 100.0, values)
            frame["util_src"] = np.where(origin != "", origin, frame.get("util_src", ""))
        frame[column] = values
    if "util_src" not in frame:
        frame["util_src"] = ""
    frame["util_src"] = frame["util_src"].fillna("")
    physical = pd.Index(frame["uuid"].to_numpy())
    for column, (name, src, stat) in DEVICE.items():
        if name not in tables:
            continue  # an answer from before the family existed (a stored collection)
        if name == "memory":
            values, _ = _dense(tables[name], src, stat, index, by_instance=True)
        else:
            gpus = pd.Index(sorted(device_uuids - {""}))
            per_gpu, origin = _dense(tables[name], src, stat, gpus, by_instance=False)
            if name == "nvlink":
                per_gpu = np.where(origin == "total", per_gpu * nvlink_total_unit_Bps, per_gpu)
            positions = gpus.get_indexer(physical)
            values = np.where(positions >= 0, per_gpu[np.maximum(positions, 0)], np.nan)
        frame[column] = values
    return frame


# -- the pods of a shared GPU --------------------------------------------------------------------


def holders(answer: Answer) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Per (uuid, MIG instance), each pod's own part of a shared GPU (``prometheus.queries.
    process_query``: dcgm-exporter's per-process series, from 4.5.3): ``[{"workload",
    "util": {"mean"}, "fb_used_frac": {"mean"}}]`` sorted by workload, fractions of the
    whole GPU to 6 decimals."""
    labels, values = answer
    parts: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for series, value in zip(labels, np.asarray(values, dtype=float).tolist(), strict=True):
        identity = dcgm.normalize(series)
        workload = identity.workload.as_text()
        metric = {"util": "util", "fb": "fb_used_frac"}.get(series.get("src", ""))
        if not identity.uuid or not workload or metric is None or math.isnan(value):
            continue
        value = value / 100.0 if metric == "util" else value
        holder = parts.setdefault(identity.key, {}).setdefault(workload, {"workload": workload})
        holder[metric] = {"mean": round(min(1.0, max(0.0, value)), 6)}
    return {key: [by[w] for w in sorted(by)] for key, by in parts.items()}


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
    """The snapshot's ``gpus[]`` entries of the GPU units found on the scheduler's nodes, keyed
    by (node, index, MIG instance or -1); ``last_seen`` per physical GPU (node, index)."""

    gpus: dict[tuple[str, int, int], dict[str, Any]]
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
    holders: Mapping[tuple[str, str], list[dict[str, Any]]] | None = None,
) -> Placement:
    """Each GPU unit's entry, placed by its GPU's UUID when the scheduler knows it, else by its
    host label (either spelling, short or full name; the scrape target's node for
    ``localhost``) and ``gpu`` index; a shared GPU's ``holders`` (:func:`holders`) where known.
    A MIG instance is an entry of its own with ``mig`` (profile, ``GPU_I_ID``, parent UUID,
    compute fraction) and its own workload; its ``uuid`` is the instance's
    (``dra_mig_device_uuid``) when the exporter names it."""
    hosts = dcgm.host_index(list(node_gpus))
    instances: dict[str, list[str]] = {}
    last: dict[str, float] = {}
    for (uuid, instance), seen in inventory_.last.items():
        instances.setdefault(uuid, []).append(instance)
        last[uuid] = max(last.get(uuid, -math.inf), seen)
    by_uuid: dict[str, list[dict[str, Any]]] = {}
    for event in xids:
        by_uuid.setdefault(event.uuid, []).append({"code": event.code, "time": iso(event.time)})
    skip = {"util_src", "uuid", "instance"}
    metric_columns = [(c, *c.rsplit("_", 1)) for c in frame.columns if c not in skip]
    rounded = _rounded(frame, metric_columns)
    columns = [(metric, stat, rounded[c].tolist()) for c, metric, stat in metric_columns]
    util_src = frame["util_src"].tolist() if "util_src" in frame else [""] * len(frame)
    row_of = {key: i for i, key in enumerate(frame.index)}
    split = {u for u, i in inventory_.last if i} | set(frame["uuid"][frame["instance"] != ""])
    units = {tuple(key.split("\x1f", 1)) for key in frame.index}
    units |= {(u, i) for u, i in inventory_.last if i or u not in split}
    placed: dict[tuple[str, int, int], dict[str, Any]] = {}
    last_seen: dict[tuple[str, int], float] = {}
    sources: dict[str, int] = {}
    where_of: dict[str, tuple[str, int] | None] = {}
    unmatched: set[str] = set()
    occupied: set[tuple[str, int]] = set()  # a physical GPU is one UUID's
    for uuid, instance in sorted(units):
        if uuid not in where_of:
            where = uuids.get(uuid)
            if where is None and uuid in instances:
                latest = max(instances[uuid], key=lambda i, u=uuid: inventory_.last[(u, i)])
                identity = inventory_.rows[(uuid, latest)]
                node = dcgm.node_for_host(identity.host, hosts)
                if node is not None and identity.gpu is not None:
                    where = (node, identity.gpu)
            if where is not None and (where[1] >= node_gpus.get(where[0], 0) or where in occupied):
                where = None
            if where is not None:
                occupied.add(where)
            where_of[uuid] = where
        where = where_of[uuid]
        gi = int(instance) if instance.isdigit() else -1
        if where is None or (instance and gi < 0):
            unmatched.add(uuid)
            continue
        entry: dict[str, Any] = {"node": where[0], "index": where[1]}
        identity = inventory_.rows.get((uuid, instance))
        if instance:
            profile = identity.mig_profile if identity else ""
            model = identity.model if identity else ""
            mig: dict[str, Any] = {"instance": gi, "parent_uuid": uuid}
            if profile:
                mig["profile"] = profile
                mig["compute_fraction"] = round(dcgm.mig_share(profile, model), 6) or None
            entry["mig"] = {k: v for k, v in mig.items() if v is not None}
            if identity and identity.mig_uuid:
                entry["uuid"] = identity.mig_uuid
        else:
            entry["uuid"] = uuid
        row = row_of.get(f"{uuid}\x1f{instance}")
        if row is not None:
            for metric, stat, values in columns:
                value = values[row]
                if value == value:  # not NaN
                    entry.setdefault(metric, {})[stat] = value
            if util_src[row]:
                sources[util_src[row]] = sources.get(util_src[row], 0) + 1
        if uuid in by_uuid and not instance:
            entry["xid"] = by_uuid[uuid]
        if identity is not None:
            workload = identity.workload
            shared = inventory_.shared.get((uuid, instance))
            if shared:
                entry["workload"] = ", ".join(shared)
                if holders and (uuid, instance) in holders:
                    entry["holders"] = holders[(uuid, instance)]
            elif workload:
                entry["workload"] = workload.as_text()
            if workload.hpc_job:
                entry["hpc_job"] = workload.hpc_job
        placed[(where[0], where[1], gi)] = entry
    for uuid, where in where_of.items():
        if where is not None and uuid in last:
            last_seen[where] = last[uuid]
    # Xids of a split GPU: on its first instance (the snapshot keeps Xids per physical GPU).
    for uuid, where in where_of.items():
        if where is not None and uuid in by_uuid and uuid in split:
            first = min((k for k in placed if k[:2] == where), default=None)
            if first is not None:
                placed[first]["xid"] = by_uuid[uuid]
    newest = max(last_seen.values()) if last_seen else None
    return Placement(placed, last_seen, len(unmatched), sources, newest)


# -- hardware: NVLink fabric cliques and the topology textfile metric -----------------------------


@dataclass
class Hardware:
    """``cliques``: GPU UUID -> its cluster-wide NVLink domain; ``topology``: node -> its
    snapshot ``topology`` object, from the textfile metric (GPUs without a series: unknown)."""

    cliques: dict[str, str] = field(default_factory=dict)
    topology: dict[str, dict[str, Any]] = field(default_factory=dict)


def hardware(answer: Answer, node_gpus: Mapping[str, int]) -> Hardware:
    labels, values = answer
    result = Hardware()
    hosts = dcgm.host_index(list(node_gpus))
    per_node: dict[str, dict[int, tuple[str, str]]] = {}
    for series, value in zip(labels, np.asarray(values, dtype=float).tolist(), strict=True):
        if series.get("src") == "fabric":
            uuid = dcgm.uuid_of(series)
            clique = dcgm.fabric_clique(series.get(dcgm.FABRIC_CLUSTER_UUID, ""), value)
            if uuid and clique:
                result.cliques[uuid] = clique
            continue
        node = dcgm.node_for_host(series.get("hostname", ""), hosts)
        gpu = series.get("gpu", "")
        if node is None or not gpu.isdigit() or int(gpu) >= node_gpus[node]:
            continue
        per_node.setdefault(node, {})[int(gpu)] = (
            series.get("nvlink_domain", ""),
            series.get("numa", ""),
        )
    for node, gpus in per_node.items():
        domains: dict[str, list[int]] = {}
        for index, (domain, _) in sorted(gpus.items()):
            if domain:
                domains.setdefault(domain, []).append(index)
        numa = [
            int(gpus[i][1]) if i in gpus and gpus[i][1].isdigit() else None
            for i in range(node_gpus[node])
        ]
        topology: dict[str, Any] = {"nvlink_domains": sorted(domains.values())}
        if any(n is not None for n in numa):
            topology["numa"] = numa
        result.topology[node] = topology
    return result


def iso(seconds: float) -> str:
    """Unix seconds as RFC 3339 UTC, to the millisecond (``2026-11-29T08:00:00.25Z``)."""
    return format_time(datetime.fromtimestamp(round(seconds, 3), UTC))
