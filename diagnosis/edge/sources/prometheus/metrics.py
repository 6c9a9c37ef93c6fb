"""One collection of GPU metrics: the family queries sent in parallel, the fallbacks their answers
call for, at most one Xid range read, and every GPU's window statistics placed on the nodes the
scheduler lists (:mod:`diagnosis.edge.sources.dcgm.stats`), with how complete and fresh they are.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diagnosis.core.gc_pause import paused_gc
from diagnosis.edge import errors
from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.edge.sources.dcgm import stats as dcgm_stats
from diagnosis.edge.sources.prometheus.client import PrometheusClient, SourceReport
from diagnosis.edge.sources.prometheus.config import PrometheusConfig
from diagnosis.edge.sources.prometheus.queries import (
    family_queries,
    process_query,
    xid_range_query,
)
from diagnosis.edge.sources.prometheus.recording import Judgement, detection_query, judge
from diagnosis.edge.sources.prometheus.wire import Vector

PER_POD_BATCH = 500  # shared GPUs named in one per-pod query (a regex of their UUIDs)
DETECTION_TTL_S = 60.0
# (url, matchers, headers, window) -> (clock, marker labels, marker times) of this process
_detections: dict[tuple, tuple[float, list[dict[str, str]], list[float]]] = {}


def forget_detections() -> None:
    """Drop the cached recording-rule detections (a test's fresh start)."""
    _detections.clear()


@dataclass(frozen=True)
class NodeInventory:
    """What the scheduler says the metrics should cover."""

    name: str
    gpus: int
    state: str = "ready"


@dataclass
class GpuMetrics:
    """The GPU part of a snapshot, and how complete it is."""

    gpus: list[dict[str, Any]]
    cpu_util: dict[str, float]
    expected: int
    answered: int
    newest_sample: float | None
    scrape_interval_s: float | None
    max_data_age_s: float | None
    unmatched_gpus: int
    util_sources: dict[str, int]
    report: dict[str, Any]
    topology: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> topology

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpus": self.gpus,
            "cpu_util": self.cpu_util,
            "expected": self.expected,
            "answered": self.answered,
            "newest_sample": self.newest_sample,
            "scrape_interval_s": self.scrape_interval_s,
            "max_data_age_s": self.max_data_age_s,
            "unmatched_gpus": self.unmatched_gpus,
            "util_sources": self.util_sources,
            "report": self.report,
            "topology": self.topology,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuMetrics:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


class PrometheusSource:
    """Reads the per-GPU window statistics of a set of nodes from Prometheus."""

    def __init__(
        self,
        config: PrometheusConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.sleep = sleep
        self.clock = clock

    def gpu_metrics(
        self,
        nodes: Sequence[NodeInventory],
        as_of: float,
        window_s: float | None = None,
        *,
        uuids: Mapping[str, tuple[str, int]] | None = None,
        hosts: Sequence[str] | None = None,
    ) -> GpuMetrics:
        """Statistics of every GPU of ``nodes`` over ``[as_of - window_s, as_of]``.

        ``uuids`` (GPU UUID -> (node, index)), when the scheduler knows them, place series
        exactly; otherwise the host label and the ``gpu`` index do. ``hosts`` narrows the queries
        to those hosts (a shard).
        """
        with paused_gc():
            return self._gpu_metrics(nodes, as_of, window_s, uuids=uuids, hosts=hosts)

    def _gpu_metrics(self, nodes, as_of, window_s, *, uuids, hosts) -> GpuMetrics:
        config = self.config
        window_s = float(window_s or config.window_s)
        report = SourceReport()
        selection = config.selection(hosts)
        node_selection = config.node_selection(hosts)
        with PrometheusClient(config, report, sleep=self.sleep) as client:
            rules = self._recording_rules(client, selection, window_s, as_of)
            recorded = rules.recorded if rules is not None else frozenset()
            queries = family_queries(
                selection,
                node_selection,
                window_s,
                max_series_per_gpu=config.max_series_per_gpu,
                recorded=recorded,
            )
            with ThreadPoolExecutor(max_workers=config.parallel_queries) as pool:
                futures = {
                    pool.submit(client.instant, text, as_of, name): name
                    for name, text in queries.items()
                }
                vectors = {}
                try:
                    for future in as_completed(futures):
                        vectors[futures[future]] = future.result()
                except BaseException:
                    client.abort()  # the first failure fails the collection: stop the rest
                    raise
            answers = {name: vector.answer() for name, vector in vectors.items()}
            inventory = self._complete(
                client, answers, selection, node_selection, window_s, as_of, recorded
            )
            shared = sorted({uuid for uuid, _ in inventory.shared})
            if shared:  # each pod's own part, where the exporter writes it (usually no GPU)
                answers["process"] = self._per_pod(client, selection, shared, window_s, as_of)
            interval = config.scrape_interval_s or _estimate_interval(inventory.samples, window_s)
            matrix = self._xid_matrix(client, selection, vectors["xid"], as_of, window_s, interval)
        events = (
            dcgm_stats.xid_events(matrix.labels, matrix.timestamps, matrix.values, as_of - window_s)
            if matrix is not None
            else []
        )
        frame = dcgm_stats.statistics(answers, config.nvlink_total_unit_Bps)
        node_gpus = {n.name: n.gpus for n in nodes}
        placement = dcgm_stats.place(
            frame,
            inventory,
            events,
            node_gpus,
            uuids or {},
            holders=dcgm_stats.holders(answers["process"]) if "process" in answers else None,
        )
        found = dcgm_stats.hardware(answers["hardware"], node_gpus)
        for entry in placement.gpus.values():
            parent = entry.get("mig", {}).get("parent_uuid") or entry.get("uuid")
            if parent in found.cliques:
                entry["nvlink_clique"] = found.cliques[parent]
        stale_limit = config.max_data_age_s or (2 * interval if interval else None)
        down = {n.name for n in nodes if n.state == "down"}
        answered = sum(
            1
            for (node, _), seen in placement.last_seen.items()
            if node not in down and stale_limit is not None and as_of - seen <= stale_limit
        )
        hosts_of = dcgm.host_index(list(node_gpus))
        cpu = {
            node: value
            for host, value in _cpu(vectors["cpu"]).items()
            if (node := dcgm.node_for_host(host, hosts_of))
        }
        return GpuMetrics(
            gpus=[placement.gpus[key] for key in sorted(placement.gpus)],
            cpu_util=cpu,
            expected=sum(n.gpus for n in nodes if n.state != "down"),
            answered=answered,
            newest_sample=placement.newest,
            scrape_interval_s=interval,
            max_data_age_s=stale_limit,
            unmatched_gpus=placement.unmatched,
            util_sources=placement.util_sources,
            report={
                **report.as_dict(),
                "crowded_gpus": len(inventory.crowded),
                "crowded_series": sum(inventory.crowded.values()),
                **({"recording_rules": rules.as_dict()} if rules is not None else {}),
            },
            topology=found.topology,
        )

    def _recording_rules(self, client, selection, window_s, as_of) -> Judgement | None:
        """Which families read recorded series (:mod:`.recording`): None when the setting is
        ``off``. The markers' answer is reused for :data:`DETECTION_TTL_S` while it says every
        family is fresh, or that this cluster has no rules at all."""
        config = self.config
        if config.recording_rules == "off":
            return None
        key = (config.url, config.matchers, config.headers, window_s)
        cached = _detections.get(key)
        max_age = config.recording_rules_max_age_s
        judgement = None
        if cached is not None and self.clock() - cached[0] <= DETECTION_TTL_S:
            judgement = judge(cached[1], cached[2], window_s, as_of, max_age)
            if judgement.deployed and not judgement.all_recorded:
                judgement = None  # asked again: the rules may have caught up
        if judgement is None:
            vector = client.instant(detection_query(selection, window_s), as_of, "recording-rules")
            markers, times = vector.labels, vector.values.tolist()
            _detections[key] = (self.clock(), markers, times)
            judgement = judge(markers, times, window_s, as_of, max_age)
        if config.recording_rules == "require" and not judgement.all_recorded:
            reasons = "; ".join(f"{f}: {r}" for f, r in sorted(judgement.raw.items()))
            raise errors.CollectError(
                f"metrics_config.recording_rules is require, and recorded series are missing "
                f"({reasons})"
            )
        return judgement

    def _complete(self, client, answers, selection, node_selection, window_s, as_of, recorded):
        """Send the fallback queries the first answers call for (see :func:`family_queries`),
        replace those answers, and return the inventory."""
        fallbacks = family_queries(
            selection,
            node_selection,
            window_s,
            fallback=True,
            max_series_per_gpu=self.config.max_series_per_gpu,
            recorded=recorded,
        )
        inventory = dcgm_stats.inventory(answers["inventory"])
        if not inventory.last and inventory.samples:
            vector = client.instant(fallbacks["inventory"], as_of, "inventory-window")
            answers["inventory"] = vector.answer()
            inventory = dcgm_stats.inventory(answers["inventory"])
        keys = set(inventory.last)
        redo = []
        for name in ("util", "memory"):
            if keys - set(zip(*dcgm.keys_of(answers[name][0]), strict=True)):
                redo.append(name)
        if {u for u, _ in keys} - set(dcgm.keys_of(answers["nvlink"][0])[0]):
            redo.append("nvlink")
        for name in redo:
            vector = client.instant(fallbacks[name], as_of, f"{name}-fallback")
            answers[name] = vector.answer()
        return inventory

    def _per_pod(self, client, selection, uuids, window_s, as_of) -> dcgm_stats.Answer:
        """:func:`process_query` over the shared GPUs, ``PER_POD_BATCH`` UUIDs a query."""
        labels: list[dict[str, str]] = []
        values = []
        for start in range(0, len(uuids), PER_POD_BATCH):
            batch = uuids[start : start + PER_POD_BATCH]
            vector = client.instant(process_query(selection, batch, window_s), as_of, "process")
            labels += vector.labels
            values.append(vector.values)
        return labels, np.concatenate(values)

    def _xid_matrix(self, client, selection, vector: Vector, as_of, window_s, interval):
        candidates = sorted({dcgm.uuid_of(labels) for labels in vector.labels} - {""})
        if not candidates:
            return None
        step = max(1.0, float(interval or 15.0))
        start = as_of - window_s - step
        return client.range(
            lambda batch: xid_range_query(selection, batch),
            start,
            as_of,
            step,
            "xid-detail",
            items=candidates,
            series_per_item=2,
        )


def _estimate_interval(samples: float | None, window_s: float) -> float | None:
    """The scrape interval, from the most samples any GPU has in the window."""
    if not samples:
        return None
    return max(1.0, window_s / max(1.0, samples - 1.0))


def _cpu(vector: Vector) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in zip(vector.column("nodename"), vector.values, strict=True):
        if name and not math.isnan(value):
            out[name] = float(min(1.0, max(0.0, value)))
    return out
