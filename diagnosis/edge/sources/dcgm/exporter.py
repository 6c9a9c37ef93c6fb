"""Writers of dcgm-exporter's formats: the Prometheus text exposition (what ``/metrics`` serves)
and OpenMetrics history (what ``promtool tsdb create-blocks-from openmetrics`` loads); and the
built-in simulator's GPUs in those formats, so that a real Prometheus can scrape or backfill a
simulated cluster (``manage.py serve_exporter``, ``manage.py export_openmetrics``).

Names, HELP and TYPE lines and labels follow the real exporter (``../shared/data/dcgm/``):
labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, the host as ``hostname`` (the
default, as dcgm-exporter writes it since 2026) or ``Hostname`` (older releases),
``DCGM_FI_DRIVER_VERSION``, and ``container``/``namespace``/``pod`` on GPUs a pod
holds. Integer fields are written as integers, ratio and power fields with six decimals.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from diagnosis.core.simulate.document import REMAP_FAILURE_XIDS, REMAP_PENDING_XIDS, gpu_uuids
from diagnosis.edge.sources.dcgm import fields as dcgm

DRIVER_VERSION = "560.35.03"
INTEGER_FIELDS = frozenset(
    {
        dcgm.GPU_UTIL,
        dcgm.FB_USED,
        dcgm.FB_FREE,
        dcgm.FB_RESERVED,
        dcgm.GPU_TEMP,
        dcgm.PCIE_RX_BYTES,
        dcgm.PCIE_TX_BYTES,
        dcgm.NVLINK_RX_BYTES,
        dcgm.NVLINK_TX_BYTES,
        dcgm.NVLINK_BANDWIDTH_TOTAL,
        dcgm.XID_ERRORS,
        dcgm.XID_ERRORS_COUNT,
        dcgm.CLOCKS_EVENT_REASONS,
        dcgm.ROW_REMAP_PENDING,
        dcgm.ROW_REMAP_FAILURE,
        dcgm.UNCORRECTABLE_REMAPPED_ROWS,
    }
)
# The clock-event reason bits the simulator's throttle indicators stand for: SW thermal
# slowdown (0x20) and the SW power cap (0x4), DCGM_CLOCKS_EVENT_REASON_* in DCGM's dcgm_fields.
THERMAL_REASON = dcgm.THERMAL_REASON_BITS[0]
POWER_REASON = dcgm.POWER_REASON_BITS[0]


@dataclass
class Series:
    """One time series: labels (in the order they are written) and samples (``timestamps`` in
    Unix seconds; NaN values are skipped)."""

    labels: Mapping[str, str]
    timestamps: np.ndarray
    values: np.ndarray


@dataclass
class MetricFamily:
    name: str
    series: list[Series] = field(default_factory=list)
    kind: str | None = None  # gauge | counter; default: dcgm-exporter's type of the field
    help: str | None = None

    def header(self) -> tuple[str, str]:
        kind, text = dcgm.FIELD_HELP.get(self.name, ("gauge", self.name))
        return self.kind or kind, self.help or text


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_text(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in labels.items())


def format_value(name: str, value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if name in INTEGER_FIELDS:
        return str(round(value))
    return f"{value:.6f}"


def exposition(families: Iterable[MetricFamily]) -> str:
    """The Prometheus text exposition (version 0.0.4) of each series' last value, without
    timestamps (the scraper stamps them), as dcgm-exporter serves it."""
    lines: list[str] = []
    for family in families:
        kind, text = family.header()
        lines.append(f"# HELP {family.name} {text}")
        lines.append(f"# TYPE {family.name} {kind}")
        for series in family.series:
            if not len(series.values) or math.isnan(float(series.values[-1])):
                continue
            value = format_value(family.name, float(series.values[-1]))
            lines.append(f"{family.name}{{{label_text(series.labels)}}} {value}")
    return "\n".join(lines) + "\n"


def write_openmetrics(families: Iterable[MetricFamily], out: TextIO) -> int:
    """OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics``: each family's
    samples together, timestamps in seconds, ``# EOF`` last. Counters are declared ``unknown``
    (OpenMetrics would want a ``_total`` suffix the exporter's names lack). Returns the number of
    samples written."""
    written = 0
    for family in families:
        kind, text = family.header()
        out.write(f"# HELP {family.name} {text}\n")
        out.write(f"# TYPE {family.name} {'gauge' if kind == 'gauge' else 'unknown'}\n")
        integer = family.name in INTEGER_FIELDS
        for series in family.series:
            keep = ~np.isnan(series.values)
            if not keep.any():
                continue
            prefix = f"{family.name}{{{label_text(series.labels)}}} "
            values = series.values[keep]
            stamps = series.timestamps[keep]
            shown = (
                np.rint(values).astype(np.int64).astype(str)
                if integer
                else np.char.mod("%.6f", values.astype(np.float64))
            )
            times = _times_text(stamps)
            out.write("".join(f"{prefix}{v} {t}\n" for v, t in zip(shown, times, strict=True)))
            written += len(values)
    out.write("# EOF\n")
    return written


def _times_text(stamps: np.ndarray) -> list[str]:
    if np.all(stamps == np.floor(stamps)):
        return stamps.astype(np.int64).astype(str).tolist()
    return [f"{t:.3f}" for t in stamps]


# -- dcgm-exporter's labels ----------------------------------------------------------------------


@dataclass(frozen=True)
class GpuIdentity:
    host: str
    index: int
    uuid: str
    model: str

    def labels(
        self,
        host_label: str = "hostname",
        *,
        mig: tuple[str, str] | None = None,
        pod: tuple[str, str, str] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """The labels in dcgm-exporter's order; ``mig`` = (GPU_I_PROFILE, GPU_I_ID), ``pod`` =
        (namespace, pod, container); ``extra`` is appended (e.g. ``cluster``)."""
        labels = {
            "gpu": str(self.index),
            "UUID": self.uuid,
            "pci_bus_id": f"00000000:{0x18 + 0x10 * self.index:02X}:00.0",
            "device": f"nvidia{self.index}",
            "modelName": self.model if self.model.startswith("NVIDIA") else f"NVIDIA {self.model}",
        }
        if mig is not None:
            labels["GPU_I_PROFILE"], labels["GPU_I_ID"] = mig
        labels[host_label] = self.host
        labels["DCGM_FI_DRIVER_VERSION"] = DRIVER_VERSION
        if pod is not None:
            labels["container"], labels["namespace"], labels["pod"] = pod[2], pod[0], pod[1]
        labels.update(extra or {})
        return labels


_MEMORY_GB = re.compile(r"(\d+)\s*GB", re.IGNORECASE)
RESERVED_MIB = 512


def framebuffer_mib(model: str) -> int:
    """Total framebuffer of a GPU model, from the size in its name (80 GB when it has none)."""
    match = _MEMORY_GB.search(model or "")
    return int(match.group(1)) * 1024 if match else 80 * 1024


def gpu_fields(
    metric_values: Mapping[str, np.ndarray],
    models: Sequence[str],
    power_limit_w: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The simulator's per-GPU metrics (``(GPUs, times)`` arrays: util, tensor_active,
    fb_used_frac, power_w, temp_c, pcie_rx_Bps, nvlink_Bps, and where given dram_active and the
    throttle indicators) as dcgm-exporter fields; ``power_limit_w`` per GPU, when given, as
    DCGM_FI_DEV_POWER_MGMT_LIMIT."""
    util = metric_values["util"].astype(np.float64)
    total = np.array([framebuffer_mib(m) for m in models], dtype=np.float64)[:, None]
    used = np.rint(metric_values["fb_used_frac"].astype(np.float64) * total)
    reserved = np.minimum(RESERVED_MIB, total - used)
    nvlink = metric_values["nvlink_Bps"].astype(np.float64)
    fields = {
        dcgm.GR_ENGINE_ACTIVE: util,
        dcgm.GPU_UTIL: np.rint(util * 100),
        dcgm.TENSOR_ACTIVE: metric_values["tensor_active"].astype(np.float64),
        dcgm.FB_USED: used,
        dcgm.FB_FREE: total - used - reserved,
        dcgm.FB_RESERVED: reserved,
        dcgm.POWER_USAGE: metric_values["power_w"].astype(np.float64),
        dcgm.GPU_TEMP: np.rint(metric_values["temp_c"].astype(np.float64)),
        dcgm.PCIE_RX_BYTES: np.rint(metric_values["pcie_rx_Bps"].astype(np.float64)),
        dcgm.NVLINK_TX_BYTES: np.rint(nvlink / 2),
        dcgm.NVLINK_RX_BYTES: nvlink - np.rint(nvlink / 2),
    }
    shape = util.shape
    if "dram_active" in metric_values:
        fields[dcgm.DRAM_ACTIVE] = metric_values["dram_active"].astype(np.float64)
    if "throttle_thermal" in metric_values and "throttle_power" in metric_values:
        fields[dcgm.CLOCKS_EVENT_REASONS] = (
            THERMAL_REASON * (metric_values["throttle_thermal"] > 0)
            + POWER_REASON * (metric_values["throttle_power"] > 0)
        ).astype(np.float64)
    if power_limit_w is not None:
        fields[dcgm.POWER_MGMT_LIMIT] = np.broadcast_to(
            np.asarray(power_limit_w, dtype=np.float64)[:, None], shape
        ).copy()
    return fields


PROFILING_FIELDS = frozenset(
    {
        dcgm.GR_ENGINE_ACTIVE,
        dcgm.TENSOR_ACTIVE,
        dcgm.PCIE_RX_BYTES,
        dcgm.NVLINK_TX_BYTES,
        dcgm.NVLINK_RX_BYTES,
        dcgm.DRAM_ACTIVE,
    }
)


# -- the simulator as an exporter ----------------------------------------------------------------


class SimExporter:
    """A simulated cluster's GPUs as dcgm-exporter would show them (one exporter per node,
    merged: the host label tells them apart)."""

    def __init__(self, runtime, host_label: str = "hostname", *, profiling: bool = True) -> None:
        if host_label not in dcgm.HOST_LABELS:
            raise ValueError(f"host label must be one of {', '.join(dcgm.HOST_LABELS)}")

        self.runtime = runtime
        self.host_label = host_label
        self.profiling = profiling
        sim = runtime.simulator
        uuids = gpu_uuids(sim)  # the UUIDs the simulator's snapshots carry
        self.gpus = [
            GpuIdentity(
                host=sim.node_names[int(sim.gpu_node[g])],
                index=int(sim.gpu_index[g]),
                uuid=uuids[g],
                model=sim.node_specs[int(sim.gpu_node[g])].gpu_model,
            )
            for g in range(sim.total_gpus)
        ]

    @property
    def simulator(self):
        return self.runtime.simulator

    def _xid_values(self, times: np.ndarray) -> np.ndarray:
        """The Xid gauge: per GPU and time, the last Xid seen so far (0 before any)."""
        sim = self.simulator
        values = np.zeros((sim.total_gpus, len(times)))
        for moment, node, index, code in sorted(sim.xids):
            gid = int(sim.node_offset[node]) + int(index)
            values[gid, times >= moment] = code
        return values

    def _remap_values(self, times: np.ndarray, codes: frozenset[int]) -> np.ndarray:
        """A row-remapper gauge (pending or failed): 1 from a memory Xid of ``codes`` on, for
        the GPUs not yet repaired (a repair is a reset, which applies the remap)."""
        sim = self.simulator
        values = np.zeros((sim.total_gpus, len(times)))
        for moment, node, index, code in sim.xids:
            gid = int(sim.node_offset[node]) + int(index)
            if code in codes and not sim.gpu_healthy[gid]:
                values[gid, times >= moment] = 1
        return values

    def _pods(self) -> dict[int, tuple[str, str, str]]:
        """GPU -> (namespace, pod, container) for the GPUs bound pods hold now."""
        pods: dict[int, tuple[str, str, str]] = {}
        for job in self.simulator.live.values():
            for number, (_, _, gids) in enumerate(job.pods):
                for gid in gids:
                    pods[int(gid)] = (
                        job.spec.tenant or "default",
                        f"{job.spec.id}-{number}",
                        "main",
                    )
        return pods

    def families(
        self,
        start: float,
        end: float,
        step: float,
        *,
        pod_labels: bool = False,
        extra: Mapping[str, str] | None = None,
    ) -> list[MetricFamily]:
        """Every field of every GPU on ``start, start + step, ... <= end`` (simulated seconds,
        at most the simulator's now)."""
        sim = self.simulator
        series = sim.metric_series(start, end, step)
        fields = gpu_fields(series.values, [g.model for g in self.gpus], sim.fleet.board_w)
        dark = np.isnan(series.values["util"].astype(np.float64))
        since_start = series.timestamps - sim.spec.start.timestamp()
        fields[dcgm.XID_ERRORS] = np.where(dark, np.nan, self._xid_values(since_start))
        fields[dcgm.ROW_REMAP_PENDING] = self._remap_values(since_start, REMAP_PENDING_XIDS)
        fields[dcgm.ROW_REMAP_FAILURE] = self._remap_values(since_start, REMAP_FAILURE_XIDS)
        fields[dcgm.UNCORRECTABLE_REMAPPED_ROWS] = np.zeros_like(fields[dcgm.ROW_REMAP_PENDING])
        pods = self._pods() if pod_labels else {}
        labels = [
            g.labels(self.host_label, pod=pods.get(i), extra=extra) for i, g in enumerate(self.gpus)
        ]
        out = []
        for name, values in fields.items():
            if not self.profiling and name in PROFILING_FIELDS:
                continue
            values = np.where(dark, np.nan, values)
            out.append(
                MetricFamily(
                    name,
                    [
                        Series(labels[i], series.timestamps, values[i])
                        for i in range(len(self.gpus))
                    ],
                )
            )
        return out

    def current(self, at: float, extra: Mapping[str, str] | None = None) -> str:
        """The exposition at simulated second ``at`` (the simulator is run there first)."""
        sim = self.simulator
        with self.runtime.lock:
            if at > sim.now:
                sim.run_until(at)
            families = self.families(at, at, 1.0, pod_labels=True, extra=extra)
        return exposition(families)

    def history(
        self,
        out: TextIO,
        start: float,
        end: float,
        step: float = 15.0,
        extra: Mapping[str, str] | None = None,
    ) -> int:
        """OpenMetrics history of ``[start, end]`` (simulated seconds) into ``out``."""
        sim = self.simulator
        with self.runtime.lock:
            if end > sim.now:
                sim.run_until(end)
            families = self.families(start, end, step, extra=extra)
        return write_openmetrics(families, out)
