"""A large cluster's collection as shards: one JSON-ready work item per node pool
(:func:`shard_payloads`, each naming its source, ``"source": "prometheus"``), collected anywhere
(:func:`collect_shard`, the registry's ``shard`` of this source: in this process, or a Celery
task on the ``collect`` queue that runs any source's shard by that name), and the results merged
back into one (:func:`merge_shards`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from diagnosis.edge.errors import CollectError
from diagnosis.edge.sources.prometheus import recording
from diagnosis.edge.sources.prometheus.config import PrometheusConfig
from diagnosis.edge.sources.prometheus.metrics import GpuMetrics, NodeInventory, PrometheusSource
from diagnosis.edge.sources.prometheus.promql import PromQLError
from diagnosis.edge.sources.prometheus.wire import PrometheusError


def run_shards_here(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run shards one after another in this process (the embedded mode)."""
    return [collect_shard(payload) for payload in payloads]


def shard_payloads(
    config: PrometheusConfig,
    nodes: Sequence[Mapping[str, Any]],
    uuids: Mapping[str, tuple[str, int]],
    as_of: float,
    window_s: float,
) -> list[dict[str, Any]]:
    """One JSON-ready work item per node pool when the cluster has at least ``shard_min_gpus``
    GPUs and more than one pool; else one item for the whole cluster (no host filter)."""
    total = sum(int(n.get("gpus") or 0) for n in nodes)
    pools: dict[str, list[Mapping[str, Any]]] = {}
    for node in nodes:
        pools.setdefault(str(node.get("pool") or ""), []).append(node)
    split = total >= config.shard_min_gpus and len(pools) > 1
    groups = list(pools.values()) if split else [list(nodes)]
    payloads = []
    for group in groups:
        names = {str(n["name"]) for n in group}
        payloads.append(
            {
                "source": "prometheus",
                "config": config.as_dict(),
                "as_of": as_of,
                "window_s": window_s,
                "nodes": [
                    {"name": n["name"], "gpus": int(n.get("gpus") or 0), "state": n.get("state")}
                    for n in group
                ],
                "hosts": sorted(names) if split else None,
                "uuids": {u: list(w) for u, w in uuids.items() if w[0] in names},
            }
        )
    return payloads


def collect_shard(payload: Mapping[str, Any]) -> dict[str, Any]:
    """One shard's GPU metrics as a JSON-ready dict, or ``{"error", "permanent"}``."""
    try:
        config = PrometheusConfig.parse(payload["config"])
        nodes = [
            NodeInventory(n["name"], int(n["gpus"]), n.get("state") or "ready")
            for n in payload["nodes"]
        ]
        metrics = PrometheusSource(config).gpu_metrics(
            nodes,
            float(payload["as_of"]),
            float(payload["window_s"]),
            uuids={u: (w[0], int(w[1])) for u, w in (payload.get("uuids") or {}).items()},
            hosts=payload.get("hosts"),
        )
    except PrometheusError as exc:
        return {
            "error": str(exc),
            "permanent": exc.permanent,
            "status": exc.status,
            "error_type": exc.error_type,
        }
    except CollectError as exc:
        return {"error": str(exc), "permanent": exc.permanent}
    except PromQLError as exc:
        return {"error": str(exc), "permanent": True}
    return metrics.as_dict()


def merge_shards(results: Sequence[Mapping[str, Any]]) -> GpuMetrics:
    """The shards' results as one; the first failed shard fails the collection."""
    for result in results:
        if "error" in result:
            raise PrometheusError(
                result["error"],
                permanent=bool(result.get("permanent")),
                status=result.get("status"),
                error_type=result.get("error_type"),
            )
    parts = [GpuMetrics.from_dict(r) for r in results]
    newest = [p.newest_sample for p in parts if p.expected]
    report: dict[str, Any] = {"warnings": [], "families": {}}
    for part in parts:
        for key, value in part.report.items():
            if key == "warnings":
                report["warnings"] += [w for w in value if w not in report["warnings"]]
            elif key == "recording_rules":
                continue
            elif key == "families":
                for family, figures in value.items():
                    into = report["families"].setdefault(family, {})
                    for name, number in figures.items():
                        into[name] = into.get(name, 0) + number
            else:
                report[key] = report.get(key, 0) + value
    judged = [p.report["recording_rules"] for p in parts if "recording_rules" in p.report]
    if judged:
        report["recording_rules"] = recording.merged(judged)
    sources: dict[str, int] = {}
    for part in parts:
        for name, count in part.util_sources.items():
            sources[name] = sources.get(name, 0) + count
    intervals = [p.scrape_interval_s for p in parts if p.scrape_interval_s]
    limits = [p.max_data_age_s for p in parts if p.max_data_age_s]
    return GpuMetrics(
        gpus=[gpu for part in parts for gpu in part.gpus],
        cpu_util={k: v for part in parts for k, v in part.cpu_util.items()},
        expected=sum(p.expected for p in parts),
        answered=sum(p.answered for p in parts),
        newest_sample=None if not newest or None in newest else min(newest),
        scrape_interval_s=max(intervals) if intervals else None,
        max_data_age_s=max(limits) if limits else None,
        unmatched_gpus=sum(p.unmatched_gpus for p in parts),
        util_sources=sources,
        report=report,
        topology={k: v for part in parts for k, v in part.topology.items()},
    )
