"""The collector of clusters whose ``metrics_kind`` is ``prometheus``: the scheduler's state (its
adapter, or the simulator's own) plus every GPU's statistics from Prometheus, as one
``gpuobs.snapshot/v1`` document with a ``collection`` section saying how complete and fresh the
metrics are and what the collection cost.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from diagnosis.core.vocabulary import SNAPSHOT_FORMAT, parse_time
from diagnosis.edge.errors import CollectError
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.edge.sim import source as sim
from diagnosis.edge.sources import ClusterLike, scheduler_only
from diagnosis.edge.sources.dcgm import stats as dcgm_stats
from diagnosis.edge.sources.prometheus.config import PrometheusConfig, PrometheusConfigError
from diagnosis.edge.sources.prometheus.metrics import GpuMetrics
from diagnosis.edge.sources.prometheus.promql import PromQLError
from diagnosis.edge.sources.prometheus.shards import (
    ShardRunner,
    merge_shards,
    run_shards_here,
    shard_payloads,
)

# -- the snapshot --------------------------------------------------------------------------------

SCHEDULER_SECTIONS = ("scheduler", "nodes", "queues", "jobs", "events")


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
    started, cpu_started = time.perf_counter(), time.process_time()
    window_s = int(window_s or config.window_s)
    nodes = [n for n in scheduler.get("nodes") or [] if isinstance(n, Mapping) and "name" in n]
    known = {
        _unit_key(g): g
        for g in scheduler.get("gpus") or []
        if isinstance(g, Mapping) and "node" in g and "index" in g
    }
    uuids = {g["uuid"]: (g["node"], g["index"]) for g in known.values() if g.get("uuid")}
    for g in known.values():  # a MIG instance's parent GPU: the UUID its series carry
        parent = g["mig"].get("parent_uuid") if isinstance(g.get("mig"), Mapping) else None
        if isinstance(parent, str) and parent:
            uuids.setdefault(parent, (g["node"], g["index"]))
    at = as_of.timestamp()
    payloads = shard_payloads(config, nodes, uuids, at, window_s)
    runner = shard_runner if shard_runner is not None and len(payloads) > 1 else run_shards_here
    metrics = merge_shards(runner(payloads))
    gpus = merge_gpus(known, metrics.gpus)
    node_list = []
    for node in nodes:
        node = dict(node)
        if node["name"] in metrics.topology:  # measured on the node: wins over the scheduler's
            node["topology"] = metrics.topology[node["name"]]
        if node["name"] in metrics.cpu_util:
            node["cpu_util"] = round(metrics.cpu_util[node["name"]], 6)
        node_list.append(node)

    document: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        "cluster": scheduler.get("cluster") or "cluster",
        "as_of": dcgm_stats.iso(at),
        "window_s": window_s,
        **{
            section: scheduler.get(section) or ([] if section != "scheduler" else {})
            for section in SCHEDULER_SECTIONS
        },
    }
    document["nodes"] = node_list
    document["gpus"] = gpus
    document["collection"] = collection_report(
        config,
        metrics,
        as_of=at,
        window_s=window_s,
        shards=len(payloads),
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
    )
    return document


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
        "util_sources": metrics.util_sources,
        "unmatched_gpus": metrics.unmatched_gpus,
        "shards": shards,
        "seconds": round(seconds, 4),
        "cpu_seconds": round(cpu_seconds, 4),
        **report,
    }


# -- the periodic collector ----------------------------------------------------------------------


def scheduler_part(
    cluster: ClusterLike,
    *,
    previous_as_of: datetime | None = None,
    now: datetime | None = None,
) -> tuple[dict[str, Any], datetime, dict[str, Any]]:
    """The cluster's scheduler state as a snapshot-shaped dict without GPU metrics, the time to
    collect at, and what the adapter reported (its event cursor, the commands it ran)."""
    if cluster.scheduler_kind == "sim":
        return _sim_scheduler_part(cluster, previous_as_of=previous_as_of, now=now)

    document = scheduler_only.collect(cluster, previous_as_of=previous_as_of, now=now)
    reported = document.pop("collection", {})
    return document, _as_of(document), {k: v for k, v in reported.items() if k != "source"}


def _sim_scheduler_part(cluster, *, previous_as_of, now):
    """The simulator's own snapshot minus its GPU metrics (the demo with serve_exporter and a
    real Prometheus). Its clock must be real time (or explicit steps), or its times would not be
    Prometheus's."""

    config = cluster.scheduler_config or {}
    clock = config.get("clock", "wall")
    if clock != "step" and float(config.get("speed", sim_runtime.DEFAULT_SPEED)) != 1.0:
        raise CollectError(
            "a simulated scheduler with Prometheus metrics must run in real time: set "
            'scheduler_config "speed": 1 (or "clock": "step")',
            permanent=True,
        )
    document = sim.collect(cluster, now=now, previous_as_of=previous_as_of)
    document["gpus"] = [
        {key: gpu[key] for key in ("node", "index", "uuid", "health") if key in gpu}
        for gpu in document.get("gpus") or []
    ]
    return document, _as_of(document), {}


def _as_of(document: Mapping[str, Any]) -> datetime:
    as_of = parse_time(document.get("as_of"))
    if as_of is None:
        raise CollectError(
            f"the scheduler's state has no RFC 3339 as_of: {document.get('as_of')!r}",
            permanent=True,
        )
    return as_of


def collect(
    cluster: ClusterLike,
    *,
    previous_as_of: datetime | None = None,
    now: datetime | None = None,
    shard_runner: ShardRunner | None = None,
) -> dict[str, Any]:
    """The collector of clusters whose ``metrics_kind`` is ``prometheus``: the scheduler
    adapter's state plus every GPU's statistics from Prometheus. Pools of a large cluster are
    collected as separate shards through ``shard_runner`` (a Celery group in production)."""
    config = PrometheusConfig.parse(cluster.metrics_config)
    part, as_of, remember = scheduler_part(cluster, previous_as_of=previous_as_of, now=now)
    try:
        document = collect_document(config, part, as_of=as_of, shard_runner=shard_runner)
    except PromQLError as exc:
        raise PrometheusConfigError(str(exc)) from exc
    document["cluster"] = cluster.name
    document["collection"].update(remember)
    return document
