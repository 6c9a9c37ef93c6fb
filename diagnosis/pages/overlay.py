"""Several GPUs, or a job's GPUs, on one chart over the chosen range (docs/ui.md "Overlaying
GPUs"): ``/clusters/<c>/overlay/?gpu=NODE/INDEX&gpu=...&job=ID&metric=util&range=6h``.

The series come from the stored snapshots the way the GPU page's do
(:func:`diagnosis.pages.support.snapshots.gpu_series`: at most 120 sampled over the range); the
GPUs asked for are matched against the latest snapshot's GPUs, never passed on to a query. Up to
:data:`~diagnosis.charts.overlay.MAX_LINES` GPUs are a line each, more are drawn as their
spread (mean, lowest, highest: three series, aggregated here), and at most :data:`MAX_GPUS` are
read at all. A job's GPUs are those its allocation holds in the latest snapshot; the job is
looked up through :mod:`diagnosis.access` (a manager's other tenants' jobs are a 404). Every
problem with what was asked is shown on the page, never a 500.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_safe

from diagnosis.access import get_cluster_for_user, get_job_for_user
from diagnosis.charts.figures import GPU_SERIES, embed
from diagnosis.charts.overlay import MAX_LINES, gpus_overlay
from diagnosis.pages.live import latest_good_cycle
from diagnosis.pages.support.snapshots import (
    NODE_READ_MAX,
    GpuKey,
    GpuMetrics,
    StoredSnapshot,
    gpu_metrics,
    gpu_metrics_on_nodes,
    gpu_series,
    latest_snapshot,
    snapshot_document,
)
from diagnosis.pages.support.time_range import TimeRange, range_picker
from diagnosis.reports.period import PeriodError

SERIES_POINTS = 120
MAX_GPUS = 4096  # GPUs one chart reads: beyond, the page says so and draws nothing
MAX_ASKED = 64  # GPUs named one by one (a job's may be more)
METRICS = tuple(key for key, _label, _fmt, _unit in GPU_SERIES)
REF = re.compile(r"^(?P<node>[^/\s]{1,253})/(?P<index>\d{1,4})(?:\.(?P<mig>\d{1,3}))?$")


def _asked_refs(query: QueryDict) -> list[str]:
    """The GPU references of ``?gpu=`` (repeated, or several in one, split by spaces or
    commas), in order, each once."""
    refs: list[str] = []
    for value in query.getlist("gpu"):
        for ref in re.split(r"[\s,]+", str(value).strip()):
            if ref and ref not in refs:
                refs.append(ref)
    return refs


def resolve_refs(refs: Iterable[str], metrics: GpuMetrics) -> tuple[list[GpuKey], list[str]]:
    """The latest snapshot's GPUs the references name (``node/index``, ``node/index.mig``; a GPU
    split into MIG instances: each instance), and the references that name none."""
    keys: list[GpuKey] = []
    unknown: list[str] = []
    for ref in refs:
        match = REF.match(ref)
        found: list[GpuKey] = []
        if match:
            node, index = match["node"], int(match["index"])
            mig = int(match["mig"]) if match["mig"] is not None else None
            found = [k for k in metrics.units(node, index) if mig is None or k[2] == mig]
        if not found:
            unknown.append(ref)
        keys += [k for k in found if k not in keys]
    return keys, unknown


def job_keys(document: Mapping[str, Any], job_id: str, metrics: GpuMetrics) -> list[GpuKey]:
    """The GPUs (units) job ``job_id``'s allocation holds in ``document``."""
    for job in document.get("jobs") or ():
        if str(job.get("id")) == job_id:
            held = {
                (str(pod.get("node")), int(index))
                for pod in job.get("allocation") or ()
                for index in pod.get("gpus") or ()
            }
            return [k for k in metrics.gpus if k[:2] in held]
    return []


def _latest_gpus(latest: StoredSnapshot, refs: list[str], *, whole: bool) -> GpuMetrics:
    """The latest snapshot's GPUs the references can name: those of the few nodes they name
    (read from the nodes' parts of its index, issue #35), or all of them (``whole``: a job's,
    which may be on any node; or references to many nodes)."""
    nodes = {match["node"] for ref in refs if (match := REF.match(ref))}
    if whole or len(nodes) > NODE_READ_MAX:
        return gpu_metrics(latest.id)  # the GPUs alone: the jobs are read only for ``?job=``
    return gpu_metrics_on_nodes([latest.id], nodes).get(latest.id) or GpuMetrics({}, {})


def gpu_label(key: GpuKey) -> str:
    node, index, mig = key
    return f"{node}/{index}" + (f" · MIG {mig}" if mig >= 0 else "")


@require_safe
def gpu_overlay(request: HttpRequest, name: str) -> HttpResponse:
    """The chosen GPUs' (or job's GPUs') ``metric`` over the range, on one chart."""
    cluster = get_cluster_for_user(request.user, name)
    metric = request.GET.get("metric") if request.GET.get("metric") in METRICS else "util"
    job_id = (request.GET.get("job") or "").strip()[:255]
    job = get_job_for_user(request.user, cluster, job_id) if job_id else None
    refs = _asked_refs(request.GET)
    context: dict[str, Any] = {
        "cluster": cluster,
        "section": "nodes",
        "metric": metric,
        "metrics": [(key, _(label)) for key, label, _fmt, _unit in GPU_SERIES],
        "asked": " ".join(refs),
        "job": job,
        "job_id": job_id,
        "errors": [],
        "keys": [],
        "max_lines": MAX_LINES,
        "good": latest_good_cycle(request, cluster),  # the live status line (docs/ui.md)
    }
    latest = latest_snapshot(cluster)
    if latest is None:
        return render(request, "diagnosis/gpu_overlay.html", context)
    errors: list[str] = context["errors"]
    if len(refs) > MAX_ASKED:
        errors.append(
            _("At most %(n)d GPUs can be named; the first %(n)d are shown.") % {"n": MAX_ASKED}
        )
        refs = refs[:MAX_ASKED]
    metrics = _latest_gpus(latest, refs, whole=job is not None)
    keys, unknown = resolve_refs(refs, metrics)
    if unknown:
        errors.append(
            _("Not a GPU of the latest snapshot (write NODE/INDEX): %(refs)s")
            % {"refs": ", ".join(unknown)}
        )
    if job is not None:
        held = job_keys(snapshot_document(latest.id), job.external_id, metrics)
        if not held:
            errors.append(_("Job %(job)s holds no GPU in the latest snapshot.") % {"job": job_id})
        keys += [k for k in held if k not in keys]
    if len(keys) > MAX_GPUS:
        errors.append(
            _("%(n)d GPUs are too many for one chart (at most %(max)d).")
            % {"n": len(keys), "max": MAX_GPUS}
        )
        keys = []
    try:
        time_range = TimeRange.parse(request.GET, default_end=latest.as_of, default_preset="6h")
        range_error = ""
    except PeriodError as error:
        time_range = TimeRange.parse({}, default_end=latest.as_of, default_preset="6h")
        range_error = str(error)
    context |= {
        "latest": latest,
        "keys": [(gpu_label(k), k) for k in keys[:MAX_LINES]],
        "gpu_count": len(keys),
        "time_range": time_range,
        "picker": range_picker(request.GET, time_range, range_error),
    }
    if keys:
        series = gpu_series(cluster, keys, time_range.start, time_range.end, SERIES_POINTS)
        context["points"] = max((len(s) for s in series.values()), default=0)
        context["chart"] = embed(
            gpus_overlay({gpu_label(k): series[k] for k in keys}, metric),
            "gpu-overlay",
            label=_("The chosen GPUs' %(metric)s over the range, on one chart")
            % {"metric": dict(context["metrics"])[metric]},
        )
    return render(request, "diagnosis/gpu_overlay.html", context)
