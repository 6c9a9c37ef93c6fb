"""The collector of clusters whose ``metrics_kind`` is ``prometheus``: every GPU's statistics
from Prometheus for the nodes and GPUs the scheduler lists, joined with the scheduler's GPU
entries, and a report saying how complete and fresh the metrics are and what the collection
cost (:func:`measure`); :func:`collect_document` makes a whole snapshot of a scheduler-shaped
dict (``manage.py collect --scheduler-snapshot``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from diagnosis.edge.assemble import snapshot_document
from diagnosis.edge.sources import Measurement, MetricsRequest, ShardRunner
from diagnosis.edge.sources.dcgm import stats as dcgm_stats
from diagnosis.edge.sources.prometheus import recording
from diagnosis.edge.sources.prometheus.config import PrometheusConfig, PrometheusConfigError
from diagnosis.edge.sources.prometheus.metrics import GpuMetrics
from diagnosis.edge.sources.prometheus.promql import PromQLError
from diagnosis.edge.sources.prometheus.shards import merge_shards, run_shards_here, shard_payloads

# -- the measurement -----------------------------------------------------------------------------


def gpu_measurement(
    config: PrometheusConfig,
    nodes: Sequence[Mapping[str, Any]],
    scheduler_gpus: Sequence[Mapping[str, Any]],
    *,
    as_of: float,
    window_s: int,
    shard_runner: ShardRunner | None = None,
) -> Measurement:
    """Every GPU's statistics from Prometheus for the window ending at ``as_of`` (Unix
    seconds), on ``nodes`` (the scheduler's; its ``scheduler_gpus`` may give UUIDs and health),
    joined with the scheduler's GPU entries; measured topology and host CPU per node; and the
    ``collection`` report."""
    started, cpu_started = time.perf_counter(), time.process_time()
    known = {
        _unit_key(g): g
        for g in scheduler_gpus
        if isinstance(g, Mapping) and "node" in g and "index" in g
    }
    uuids = {g["uuid"]: (g["node"], g["index"]) for g in known.values() if g.get("uuid")}
    for g in known.values():  # a MIG instance's parent GPU: the UUID its series carry
        parent = g["mig"].get("parent_uuid") if isinstance(g.get("mig"), Mapping) else None
        if isinstance(parent, str) and parent:
            uuids.setdefault(parent, (g["node"], g["index"]))
    payloads = shard_payloads(config, nodes, uuids, as_of, window_s)
    runner = shard_runner if shard_runner is not None and len(payloads) > 1 else run_shards_here
    metrics = merge_shards(runner(payloads))
    node_values: dict[str, dict[str, Any]] = {}
    for node in nodes:  # measured on the node: wins over the scheduler's
        values = node_values.setdefault(node["name"], {})
        if node["name"] in metrics.topology:
            values["topology"] = metrics.topology[node["name"]]
        if node["name"] in metrics.cpu_util:
            values["cpu_util"] = round(metrics.cpu_util[node["name"]], 6)
    return Measurement(
        gpus=merge_gpus(known, metrics.gpus),
        node_values={name: values for name, values in node_values.items() if values},
        window_s=window_s,
        collection=collection_report(
            config,
            metrics,
            as_of=as_of,
            window_s=window_s,
            shards=len(payloads),
            seconds=time.perf_counter() - started,
            cpu_seconds=time.process_time() - cpu_started,
        ),
    )


def measure(request: MetricsRequest) -> Measurement:
    """The source's measure (the registry's ``prometheus``): the pools of a large cluster are
    collected as separate shards through ``request.shard_runner`` (a Celery group in
    production)."""
    config = PrometheusConfig.parse(request.config)
    try:
        return gpu_measurement(
            config,
            _named(request.nodes),
            request.gpus,
            as_of=request.as_of.timestamp(),
            window_s=int(config.window_s),
            shard_runner=request.shard_runner,
        )
    except PromQLError as exc:
        raise PrometheusConfigError(str(exc)) from exc


def collect_document(
    config: PrometheusConfig,
    scheduler: Mapping[str, Any],
    *,
    as_of: datetime,
    window_s: int | None = None,
    shard_runner: ShardRunner | None = None,
) -> dict[str, Any]:
    """A ``gpuobs.snapshot/v1`` document: nodes, queues, jobs and events from ``scheduler`` (a
    snapshot-shaped dict; its ``gpus[]`` may give UUIDs and health), every GPU's statistics from
    Prometheus for the window ending at ``as_of``, and a ``collection`` section saying how
    complete and how fresh the metrics are and what the collection cost."""
    nodes = _named(scheduler.get("nodes") or [])
    at = as_of.timestamp()
    measurement = gpu_measurement(
        config,
        nodes,
        scheduler.get("gpus") or [],
        as_of=at,
        window_s=int(window_s or config.window_s),
        shard_runner=shard_runner,
    )
    return snapshot_document(
        scheduler.get("cluster") or "cluster",
        as_of=dcgm_stats.iso(at),
        scheduler=scheduler.get("scheduler") or {},
        nodes=nodes,
        queues=scheduler.get("queues") or [],
        jobs=scheduler.get("jobs") or [],
        events=scheduler.get("events") or [],
        measurement=measurement,
    )


def _named(nodes: Sequence[Any]) -> list[Mapping[str, Any]]:
    return [n for n in nodes if isinstance(n, Mapping) and "name" in n]


def _unit_key(gpu: Mapping[str, Any]) -> tuple[str, int, int]:
    """(node, index, MIG instance or -1) of a ``gpus[]`` entry."""
    mig = gpu.get("mig")
    instance = mig.get("instance") if isinstance(mig, Mapping) else None
    return (gpu["node"], gpu["index"], instance if isinstance(instance, int) else -1)


def merge_gpus(
    known: Mapping[tuple[str, int, int], Mapping[str, Any]], reported: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The scheduler's GPU entries (UUIDs, health, MIG instances it knows) joined with the
    metrics'. A MIG instance joins by its UUID first (the metrics know it from
    ``dra_mig_device_uuid``; the scheduler's instance number may be its own, e.g. the DRA
    driver's placement ordinal), then by (node, index, instance); the joined entry keeps the
    metrics' ``GPU_I_ID`` as its instance and the scheduler's UUID. A metrics MIG instance that
    joins none of the scheduler's MIG entries of its GPU is left out (its pod cannot be told;
    the scheduler's entries carry the allocations). Where one side splits a GPU into MIG
    instances and the other reports it whole, the split wins, keeping the scheduler's health.
    Xids the scheduler side reports (a health tool's node condition) join the metrics' ones."""
    known = dict(known)
    by_uuid = {g["uuid"]: key for key, g in known.items() if key[2] >= 0 and g.get("uuid")}
    metrics: dict[tuple[str, int, int], dict[str, Any]] = {}
    for entry in reported:
        key = _unit_key(entry)
        scheduler_key = by_uuid.get(entry.get("uuid")) if key[2] >= 0 else None
        if scheduler_key is not None and scheduler_key != key:
            known[key] = known.pop(scheduler_key)  # the metrics' GPU_I_ID names it
        metrics[key] = entry
    scheduler_mig = {key[:2] for key in known if key[2] >= 0}
    for key in [k for k in metrics if k[2] >= 0 and k[:2] in scheduler_mig and k not in known]:
        del metrics[key]
    split = {key[:2] for key in (*metrics, *known) if key[2] >= 0}
    health = {key[:2]: g.get("health") for key, g in known.items() if g.get("health")}
    gpus = []
    for key in sorted(set(metrics) | set(known)):
        if key[2] < 0 and key[:2] in split:
            continue
        entry = dict(metrics.get(key) or {k: v for k, v in known[key].items() if k != "health"})
        given = known.get(key) or {}
        if given.get("uuid") and "uuid" not in entry:
            entry["uuid"] = given["uuid"]
        if "mig" in given and "mig" in entry:
            entry["mig"] = {**given["mig"], **entry["mig"]}
        entry["health"] = given.get("health") or health.get(key[:2]) or "ok"
        if given.get("xid"):  # Xids the scheduler side knows (NVSentinel's SysLogsXIDError)
            _add_xids(entry, given["xid"])
        gpus.append(entry)
    _place_faults_by_uuid(gpus, known)
    return gpus


def _add_xids(entry: dict[str, Any], xids: list[Mapping[str, Any]]) -> None:
    seen = {(x.get("code"), x.get("time")) for x in entry.get("xid") or ()}
    extra = [dict(x) for x in xids if (x.get("code"), x.get("time")) not in seen]
    if extra:
        entry["xid"] = [*(entry.get("xid") or ()), *extra]


def _place_faults_by_uuid(
    gpus: list[dict[str, Any]], known: Mapping[tuple[str, int, int], Mapping[str, Any]]
) -> None:
    """A health fault the scheduler could not place on a GPU, only name by UUID (NVSentinel's
    condition on a device-plugin node: ``faults_by_uuid`` on each of the node's entries), goes
    to the GPU the metrics say has that UUID, with its Xids; the node's other GPUs that were
    unhealthy only for it are healthy again. A UUID the metrics do not know leaves the whole
    node unhealthy, as the scheduler said."""
    faults: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
    only: set[tuple[str, int, int]] = set()
    for key, given in known.items():
        for fault in given.get("faults_by_uuid") or ():
            faults.setdefault(key[0], {})[(str(fault.get("uuid")), str(fault.get("reason")))] = (
                fault
            )
        if given.get("health_only_by_uuid"):
            only.add(key)
    for node, by_key in faults.items():
        on_node = [g for g in gpus if g.get("node") == node]
        by_uuid = {g["uuid"]: g for g in on_node if g.get("uuid")}
        if not all(uuid in by_uuid for uuid, _ in by_key):
            continue
        hit = set()
        for (uuid, _), fault in by_key.items():
            target = by_uuid[uuid]
            target["health"] = "unhealthy"
            _add_xids(target, list(fault.get("xid") or ()))
            hit.add(id(target))
        for entry in on_node:
            if id(entry) not in hit and _unit_key(entry) in only:
                entry["health"] = "ok"


def collection_report(
    config: PrometheusConfig,
    metrics: GpuMetrics,
    *,
    as_of: float,
    window_s: int,
    shards: int,
    seconds: float,
    cpu_seconds: float,
) -> dict[str, Any]:
    """Coverage, data age and cost of one collection; ``judgeable`` is False (and ``problems``
    says why) when the GPU metrics are too incomplete or too old to judge by."""
    coverage = metrics.answered / metrics.expected if metrics.expected else None
    age = as_of - metrics.newest_sample if metrics.newest_sample is not None else None
    problems: list[str] = []
    if coverage is not None and coverage < config.min_coverage:
        problems.append(
            f"GPU metrics cover {metrics.answered} of {metrics.expected} GPUs "
            f"({coverage:.1%}), below {config.min_coverage:.0%}"
        )
    if metrics.expected and (age is None or metrics.max_data_age_s is None):
        problems.append("no GPU metrics at all in the window")
    elif age is not None and metrics.max_data_age_s is not None and age > metrics.max_data_age_s:
        problems.append(
            f"GPU metrics are {age:.0f} s old, more than {metrics.max_data_age_s:.0f} s "
            "(two scrape intervals)"
        )
    notes = []
    if metrics.unmatched_gpus:
        notes.append(
            f"{metrics.unmatched_gpus} GPU(s) in Prometheus are on hosts or indexes the "
            "scheduler does not list"
        )
    degraded = []
    crowded = int(metrics.report.get("crowded_gpus") or 0)
    if crowded:
        degraded.append(
            f"{crowded} GPU(s) have more than {config.max_series_per_gpu} series in one scrape "
            f"({int(metrics.report.get('crowded_series') or 0)} in all: duplicated pod labels, "
            "a cardinality bomb); each is read as copies of one reading, never summed, and "
            "its pods are not listed"
        )
    unrecorded = recording.degradation(metrics.report.get("recording_rules"))
    if unrecorded:
        degraded.append(unrecorded)
    report = dict(metrics.report)
    return {
        "source": "prometheus",
        "url": config.url,
        "window_s": window_s,
        "coverage": None if coverage is None else round(coverage, 6),
        "gpus_expected": metrics.expected,
        "gpus_answered": metrics.answered,
        "data_age_s": None if age is None else round(max(0.0, age), 3),
        "max_data_age_s": metrics.max_data_age_s,
        "scrape_interval_s": metrics.scrape_interval_s,
        "judgeable": not problems,
        "problems": problems,
        "notes": notes,
        "degraded": degraded,
        "util_sources": metrics.util_sources,
        "unmatched_gpus": metrics.unmatched_gpus,
        "shards": shards,
        "seconds": round(seconds, 4),
        "cpu_seconds": round(cpu_seconds, 4),
        **report,
    }
