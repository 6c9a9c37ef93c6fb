"""The SRE's hardware pages (issue 19; docs/ui.md "Nodes and GPUs"): the cluster heatmap and
node list, a node's page and a GPU's page with its metrics over time.

They read the stored snapshots (:mod:`diagnosis.pages.support.snapshots`): the latest one for what
is
there now, at most :data:`SERIES_POINTS` of them spread over the chosen range for the charts.
A manager sees the hardware (cluster-wide, as on the overview) but never another tenant's job:
those are shown as :data:`~diagnosis.access.HIDDEN_JOB`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import get_language
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_safe

from diagnosis.access import (
    HIDDEN_JOB,
    findings_for_user,
    get_cluster_for_user,
    incidents_for_user,
    jobs_for_user,
    with_summary_text,
)
from diagnosis.charts.figures import embed, gpu_heatmap, gpu_metric_series, gpus_util_series
from diagnosis.models import Cluster
from diagnosis.pages.live import latest_good_cycle
from diagnosis.pages.support.page_cache import rendered_once
from diagnosis.pages.support.pagination import paginate
from diagnosis.pages.support.snapshots import (
    GpuKey,
    GpuMetrics,
    StoredSnapshot,
    derived,
    gpu_metrics,
    gpu_series,
    latest_snapshot,
    node_view,
)
from diagnosis.pages.support.sorting import TableSort
from diagnosis.pages.support.time_range import TimeRange, range_picker
from diagnosis.reports.period import PeriodError
from diagnosis.roles import is_tenant_scoped

SERIES_POINTS = 120
NODES_PER_PAGE = 50
FINDINGS_SHOWN = 50
INCIDENTS_SHOWN = 20
HEALTH_STATES: dict[int, Any] = {
    0: _("ok"),
    3: _("unhealthy"),
    4: _("node not ready"),
    5: _("not reported"),
}


# -- what is where ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Which jobs hold which GPU units in one snapshot document, as the reader may see them."""

    jobs_on: dict[tuple[str, int], list[str]]  # (node, index) -> job ids (hidden ones replaced)
    jobs: dict[str, dict[str, Any]]  # job id -> its snapshot record (visible jobs only)


def placement(
    request: HttpRequest, cluster: Cluster, jobs: Iterable[Mapping[str, Any]], nodes: Iterable[str]
) -> Placement:
    """The jobs on ``nodes`` of ``jobs`` (a snapshot's records); for a tenant-scoped reader,
    other tenants' jobs are :data:`HIDDEN_JOB` and left out of ``jobs``."""
    wanted = set(nodes)
    jobs_on: dict[tuple[str, int], list[str]] = {}
    records: dict[str, dict[str, Any]] = {}
    for job in jobs:
        for pod in job.get("allocation") or ():
            if pod.get("node") in wanted:
                records[str(job["id"])] = job
                for index in pod.get("gpus") or ():
                    jobs_on.setdefault((pod["node"], int(index)), []).append(str(job["id"]))
    visible = set(records)
    if records and is_tenant_scoped(request.user):
        visible = set(
            jobs_for_user(request.user, cluster)
            .filter(external_id__in=list(records))
            .values_list("external_id", flat=True)
        )
    return Placement(
        jobs_on={
            key: sorted({j if j in visible else HIDDEN_JOB for j in ids})
            for key, ids in jobs_on.items()
        },
        jobs={j: r for j, r in records.items() if j in visible},
    )


def _range(request: HttpRequest, end: Any) -> tuple[TimeRange, str]:
    """The chart range the query asks for, ending at the latest snapshot by default."""
    try:
        return TimeRange.parse(request.GET, default_end=end, default_preset="6h"), ""
    except PeriodError as error:
        return TimeRange.parse({}, default_end=end, default_preset="6h"), str(error)


def _latest_or_404(cluster: Cluster) -> StoredSnapshot:
    latest = latest_snapshot(cluster)
    if latest is None:
        raise Http404("no snapshot of this cluster yet")
    return latest


def _gpu_label(gpu: Mapping[str, Any]) -> str:
    mig = gpu.get("mig") or {}
    return f"GPU {gpu['index']}" + (f" · MIG {mig.get('instance')}" if mig else "")


def _gpu_url(cluster: Cluster, node: str, gpu: Mapping[str, Any]) -> str:
    url = reverse(
        "diagnosis:gpu", kwargs={"name": cluster.name, "node": node, "index": gpu["index"]}
    )
    mig = gpu.get("mig") or {}
    return f"{url}?mig={mig['instance']}" if mig.get("instance") is not None else url


# -- the heatmap and the node list ---------------------------------------------------------------


@dataclass(frozen=True)
class NodeRow:
    name: str
    pool: str
    state: str
    gpus: int
    reported: int
    util_mean: float | None
    unhealthy: int
    xids: int


def _node_rows(metrics: GpuMetrics, pool: str) -> list[NodeRow]:
    per_node: dict[str, list[dict[str, Any]]] = {}
    for (node, _index, _mig), gpu in metrics.gpus.items():
        per_node.setdefault(node, []).append(gpu)
    rows = []
    for name, record in metrics.nodes.items():
        if pool and record.get("pool") != pool:
            continue
        gpus = per_node.get(name, [])
        utils = [g["util"] for g in gpus if g["util"] is not None]
        rows.append(
            NodeRow(
                name=name,
                pool=str(record.get("pool") or ""),
                state=str(record.get("state") or ""),
                gpus=int(record.get("gpus") or 0),
                reported=len({g["index"] for g in gpus}),
                util_mean=sum(utils) / len(utils) if utils else None,
                unhealthy=sum(g["health"] != "ok" for g in gpus),
                xids=sum(len(g["xid"]) for g in gpus),
            )
        )
    rows.sort(key=lambda r: (r.pool, r.name))
    return rows


def _has_problem(row: NodeRow) -> bool:
    return row.state != "ready" or row.unhealthy > 0 or row.xids > 0 or row.reported < row.gpus


# The node table's orders (?sort=KEY or -KEY, diagnosis/pages/support/sorting.py); the heatmap
# keeps pool and name order whatever the table's. ``problems``: not ready, unhealthy GPUs or
# Xids first, the worst first.
NODE_SORTS: dict[str, Any] = {
    "name": lambda r: (r.pool, r.name),
    "pool": lambda r: r.pool,
    "state": lambda r: r.state,
    "gpus": lambda r: r.gpus,
    "util": lambda r: r.util_mean,
    "unhealthy": lambda r: r.unhealthy,
    "xids": lambda r: r.xids,
    "problems": lambda r: (not _has_problem(r), -r.unhealthy, -r.xids),
}
NODE_SORTS_DESCENDING_FIRST = ("gpus", "unhealthy", "xids")
NODE_STATES = ("ready", "cordoned", "drained", "down")
NODE_HEALTH: dict[str, Any] = {
    "unhealthy": _("with an unhealthy GPU or an Xid"),
    "ok": _("every GPU healthy, no Xid"),
}


@dataclass(frozen=True)
class NodeFilter:
    """The node table's filters: ``?state=`` (one of :data:`NODE_STATES`), ``?health=``
    (:data:`NODE_HEALTH`), ``?problems=1`` (not ready, unhealthy GPUs, Xids or GPUs that did not
    report)."""

    state: str = ""
    health: str = ""
    problems_only: bool = False

    @classmethod
    def parse(cls, query: Mapping[str, Any]) -> NodeFilter:
        state = query.get("state") or ""
        health = query.get("health") or ""
        return cls(
            state=state if state in NODE_STATES else "",
            health=health if health in NODE_HEALTH else "",
            problems_only=query.get("problems") == "1",
        )

    def keeps(self, row: NodeRow) -> bool:
        bad = row.unhealthy > 0 or row.xids > 0
        return (
            (not self.state or row.state == self.state)
            and (not self.health or bad == (self.health == "unhealthy"))
            and (not self.problems_only or _has_problem(row))
        )


def _table_rows(rows: list[NodeRow], sort: TableSort, filters: NodeFilter) -> list[NodeRow]:
    """The node table's rows: those ``filters`` keep, in ``sort``'s order (:data:`NODE_SORTS`),
    ties by pool and name."""
    chosen = [r for r in rows if filters.keeps(r)]
    return sort.apply(chosen, NODE_SORTS, tie=lambda r: (r.pool, r.name))


def heatmap_matrix(
    cluster: Cluster, metrics: GpuMetrics, rows: list[NodeRow], colorby: str
) -> tuple[list[str], np.ndarray, list[list[str]]]:
    """Nodes (columns), a row per GPU index: utilization (MIG instances averaged) or health
    codes (:data:`HEALTH_STATES`), and each cell's GPU page."""
    width = max((r.gpus for r in rows), default=0)
    names = [r.name for r in rows]
    column = {name: i for i, name in enumerate(names)}
    at_row, at_column, utils, bad = [], [], [], []
    for (node, index, _mig), gpu in metrics.gpus.items():
        j = column.get(node)
        if j is None or index >= width:
            continue
        at_row.append(index)
        at_column.append(j)
        utils.append(np.nan if gpu["util"] is None else gpu["util"])
        bad.append(gpu["health"] != "ok")
    cells = (np.array(at_row, dtype=int), np.array(at_column, dtype=int))
    util = np.array(utils, dtype=float)
    known = ~np.isnan(util)
    util_sum = np.zeros((width, len(names)))
    util_n = np.zeros((width, len(names)))
    np.add.at(util_sum, (cells[0][known], cells[1][known]), util[known])
    np.add.at(util_n, (cells[0][known], cells[1][known]), 1)
    reported = np.zeros((width, len(names)), dtype=bool)
    reported[cells] = True
    unhealthy = np.zeros((width, len(names)), dtype=bool)
    flagged = np.array(bad, dtype=bool)
    unhealthy[cells[0][flagged], cells[1][flagged]] = True
    exists = np.arange(width)[:, np.newaxis] < np.array([r.gpus for r in rows], dtype=int)
    base = reverse("diagnosis:node", kwargs={"name": cluster.name, "node": "NODE"})[: -len("NODE/")]
    links = [[f"{base}{name}/gpus/{i}/" for name in names] for i in range(width)]
    if colorby == "health":
        not_ready = np.array([r.state != "ready" for r in rows])[np.newaxis, :]
        values = np.where(unhealthy, 3, 0).astype(float)
        values = np.where(not_ready & exists, 4, values)
        values = np.where(exists & ~reported & ~not_ready, 5, values)
        values = np.where(exists, values, np.nan)
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            values = np.where(util_n > 0, util_sum / np.maximum(util_n, 1), np.nan)
    return names, values, links


def _heatmap_view(
    cluster: Cluster, latest: StoredSnapshot, colorby: str, pool: str
) -> dict[str, Any]:
    """The heatmap (embedded), the node rows and the pools of one stored snapshot: the same
    for every reader (no job names), so kept by the snapshot's id."""
    metrics = gpu_metrics(latest.id)
    rows = _node_rows(metrics, pool)
    nodes, values, links = heatmap_matrix(cluster, metrics, rows, colorby)
    figure = gpu_heatmap(
        nodes,
        values,
        links,
        colorby="state" if colorby == "health" else "util",
        state_labels={k: str(v) for k, v in HEALTH_STATES.items()},
    )
    return {
        "rows": rows,
        "pools": sorted({str(n.get("pool") or "") for n in metrics.nodes.values()} - {""}),
        "node_count": len(rows),
        "gpu_count": sum(r.gpus for r in rows),
        "heatmap": embed(
            figure,
            "gpu-heatmap",
            label=str(_("Every GPU of the cluster by node; click a cell for its GPU page")),
        ),
    }


def heatmap_view(
    cluster: Cluster, latest: StoredSnapshot, colorby: str, pool: str
) -> dict[str, Any]:
    """:func:`_heatmap_view` in the active language, computed once per snapshot across the
    processes sharing the page cache (or read from what the worker rendered after the cycle:
    :mod:`diagnosis.pages.support.prerender`)."""
    key = ("heatmap", cluster.pk, latest.id, latest.as_of, cluster.name, colorby, pool)
    key += (get_language(),)
    return derived(
        key, lambda: rendered_once(key, lambda: _heatmap_view(cluster, latest, colorby, pool))
    )


@require_safe
def node_list(request: HttpRequest, name: str) -> HttpResponse:
    """The heatmap of every GPU (one plotly heatmap, whatever the size) and the nodes, paged."""
    cluster = get_cluster_for_user(request.user, name)
    latest = latest_snapshot(cluster)
    colorby = "health" if request.GET.get("color") == "health" else "util"
    pool = (request.GET.get("pool") or "").strip()
    sort = TableSort.parse(
        request.GET, NODE_SORTS, "name", descending_first=NODE_SORTS_DESCENDING_FIRST
    )
    filters = NodeFilter.parse(request.GET)
    context: dict[str, Any] = {
        "sort": sort.param,
        "table": sort,
        "filters": filters,
        "node_states": NODE_STATES,
        "node_health": NODE_HEALTH,
        "problems_only": filters.problems_only,
        "cluster": cluster,
        "section": "nodes",
        "latest": latest,
        "colorby": colorby,
        "pool": pool,
        "good": latest_good_cycle(request, cluster),  # the live status line (docs/ui.md)
    }
    if latest is not None:
        view = heatmap_view(cluster, latest, colorby, pool)
        rows = _table_rows(view["rows"], sort, filters)
        page, query = paginate(request, rows, NODES_PER_PAGE)
        context |= view | {"page": page, "query": query}
    return render(request, "diagnosis/node_list.html", context)


# -- a node --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuRow:
    gpu: dict[str, Any]
    url: str
    jobs: list[str] = field(default_factory=list)


def _node_findings(
    request: HttpRequest,
    cluster: Cluster,
    node: str,
    index: int | None = None,
    jobs: Iterable[str] = (),
):
    """The findings about the node (or its GPU ``index``) and about ``jobs``, the jobs on it:
    a GPU a deadlocked gang holds shows that gang's finding (issue #32 item 11)."""
    subjects = (
        Q(subject=f"gpu:{node}/{index}")
        if index is not None
        else (Q(subject=f"node:{node}") | Q(subject__startswith=f"gpu:{node}/"))
    )
    shown = [f"job:{job}" for job in jobs if job != HIDDEN_JOB]
    if shown:
        subjects |= Q(subject__in=shown)
    return list(
        with_summary_text(
            findings_for_user(request.user, cluster).filter(subjects).defer("evidence")
        ).order_by("-last_seen", "-id")[:FINDINGS_SHOWN]
    )


def _node_incidents(cluster: Cluster, request: HttpRequest, node: str, index: int | None = None):
    incidents = incidents_for_user(request.user, cluster).filter(node=node)
    if index is not None:
        incidents = incidents.filter(gpu_index=index)
    return list(incidents.order_by("-opened_at", "-id")[:INCIDENTS_SHOWN])


@require_safe
def node_detail(request: HttpRequest, name: str, node: str) -> HttpResponse:
    """One node as the latest snapshot has it: its GPUs and their jobs, health, topology and
    Xids, its incidents and findings, and its GPUs' utilization over the chosen range."""
    cluster = get_cluster_for_user(request.user, name)
    latest = _latest_or_404(cluster)
    view = node_view(latest.id, node)
    if view is None:
        raise Http404("no such node in the latest snapshot")
    record = view.record
    where = placement(request, cluster, view.jobs, [node])
    gpus = view.metrics.of_node(node)
    rows = [
        GpuRow(g, _gpu_url(cluster, node, g), where.jobs_on.get((node, g["index"]), []))
        for g in gpus
    ]
    time_range, range_error = _range(request, latest.as_of)
    keys: list[GpuKey] = [
        (node, g["index"], (g.get("mig") or {}).get("instance", -1)) for g in gpus
    ]
    series = gpu_series(cluster, keys, time_range.start, time_range.end, SERIES_POINTS)
    xids = sorted(
        ({"index": g["index"], **x} for g in gpus for x in g["xid"]),
        key=lambda x: str(x.get("time")),
        reverse=True,
    )
    context = {
        "cluster": cluster,
        "section": "nodes",
        "node": node,
        "record": record,
        "topology": record.get("topology") or {},
        "latest": latest,
        "gpu_rows": rows,
        "missing_gpus": max(0, int(record.get("gpus") or 0) - len({g["index"] for g in gpus})),
        "xids": xids,
        "incidents": _node_incidents(cluster, request, node),
        "findings": _node_findings(request, cluster, node),
        "time_range": time_range,
        "picker": range_picker(request.GET, time_range, range_error),
        "util_chart": embed(
            gpus_util_series({_gpu_label(g): series[k] for g, k in zip(gpus, keys, strict=True)}),
            "node-util",
            label=str(_("Utilization of each GPU of the node over the range")),
        ),
        "points": max((len(s) for s in series.values()), default=0),
        "good": latest_good_cycle(request, cluster),  # the live status line (docs/ui.md)
    }
    return render(request, "diagnosis/node_detail.html", context)


# -- a GPU ---------------------------------------------------------------------------------------


@require_safe
def gpu_detail(request: HttpRequest, name: str, node: str, index: int) -> HttpResponse:
    """One GPU (or MIG instance, ``?mig=``): its record now, its jobs, Xids, incidents and
    findings, and util, tensor activity, framebuffer, power, temperature and SM clock over the
    chosen range."""
    cluster = get_cluster_for_user(request.user, name)
    latest = _latest_or_404(cluster)
    view = node_view(latest.id, node)
    if view is None:
        raise Http404("no such GPU in the latest snapshot")
    metrics = view.metrics
    mig_text = request.GET.get("mig") or ""
    instance = int(mig_text) if mig_text.isdigit() else -1
    key: GpuKey = (node, index, instance)
    gpu = metrics.gpus.get(key)
    if gpu is None and instance == -1:  # a GPU split into MIG instances: its first instance
        key, gpu = next(
            ((k, g) for k, g in metrics.gpus.items() if k[:2] == (node, index)), (key, None)
        )
    record = metrics.nodes.get(node)
    if record is None or index >= int(record.get("gpus") or 0):
        raise Http404("no such GPU in the latest snapshot")
    where = placement(request, cluster, view.jobs, [node])
    time_range, range_error = _range(request, latest.as_of)
    rows = gpu_series(cluster, [key], time_range.start, time_range.end, SERIES_POINTS)[key]
    siblings = [(g, _gpu_url(cluster, node, g)) for g in metrics.of_node(node) if g is not gpu]
    context = {
        "cluster": cluster,
        "section": "nodes",
        "node": node,
        "record": record,
        "index": index,
        "gpu": gpu,
        "gpu_model": metrics.model_of(key),
        "latest": latest,
        "jobs": where.jobs_on.get((node, index), []),
        "siblings": siblings,
        "incidents": _node_incidents(cluster, request, node, index),
        "findings": _node_findings(
            request, cluster, node, index, where.jobs_on.get((node, index), [])
        ),
        "time_range": time_range,
        "picker": range_picker(request.GET, time_range, range_error),
        "points": len(rows),
        "series_chart": embed(
            gpu_metric_series(rows),
            "gpu-series",
            label=str(_("This GPU's metrics over the range, one panel each")),
        ),
        "good": latest_good_cycle(request, cluster),  # the live status line (docs/ui.md)
    }
    return render(request, "diagnosis/gpu_detail.html", context)


@require_safe
def gpu_by_uuid(request: HttpRequest, name: str, uuid: str) -> HttpResponse:
    """``/clusters/<c>/gpus/<uuid>/``: the page of the GPU (or MIG instance) with that UUID."""
    cluster = get_cluster_for_user(request.user, name)
    latest = _latest_or_404(cluster)
    for (node, _index, _instance), gpu in gpu_metrics(latest.id).gpus.items():
        if gpu["uuid"] == uuid:
            return HttpResponseRedirect(_gpu_url(cluster, node, gpu))
    raise Http404("no GPU with this UUID in the latest snapshot")
