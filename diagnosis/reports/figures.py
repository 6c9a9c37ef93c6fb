"""Plotly figures of the fairness report page (the PDF draws the same data with ReportLab):
share vs entitlement over time, waits by size class, the GPU-hour breakdown per tenant.

Each figure is built as the JSON plotly would write for it (``go.Figure(...).to_plotly_json()``:
plain dicts and lists, arrays as plotly's typed arrays, the "none" template spelled out), not
through ``plotly.graph_objects``: validating 150 traces of 50 tenants cost ~50 ms a page
(issue #17). tests/app/reports/test_report_figures.py holds each to what plotly makes of it."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from django.utils.translation import gettext

from diagnosis.charts.figures import (
    ACCENT,
    INK,
    MUTED,
    Figure,
    axis_style,
    figure_layout,
    plain_figure,
    plotly_text,
    reader_epoch_ms,
    time_axis,
    typed_array,
)
from diagnosis.charts.gpu_hours import BUCKET_LABELS
from diagnosis.core.fairness import SIZE_CLASSES, TENANT_BUCKETS
from diagnosis.reports.fairness_report import FairnessReportData

# Tenants drawn at first; the others start hidden (a click on the legend shows them).
SHOWN_TENANTS = 8
PALETTE = (
    "#2f5ddc",
    "#1a7f37",
    "#c0392b",
    "#8e44ad",
    "#d08c2e",
    "#117a8b",
    "#6d4c41",
    "#d63384",
)
BUCKET_COLOURS = {
    "unavailable": "#9aa4b2",
    "held-by-partial-gang": "#d08c2e",
    "allocated-hung": "#7b241c",
    "allocated-idle": "#c0392b",
    "allocated-data-starved": "#8e44ad",
    "allocated-busy": ACCENT,
}


def _times(values: pd.Series) -> np.ndarray:
    return reader_epoch_ms(values)


def _finite(values: Iterable[float]) -> list[float | None]:
    """A list of numbers for JSON: None where one is not finite (plotly writes null)."""
    return [float(v) if np.isfinite(v) else None for v in values]


def share_over_time(data: FairnessReportData) -> Figure:
    """Per tenant: usage (solid), fair share (dashed) and entitlement (dotted) per time bin."""
    ranked = sorted(data.tenants, key=lambda r: -(r.usage or 0))
    shown = {r.tenant for r in ranked[:SHOWN_TENANTS]}
    frames = dict(tuple(data.series.groupby("tenant", sort=False))) if len(data.series) else {}
    empty = data.series.iloc[0:0]
    lines = (
        ("usage", gettext("usage"), "solid", 2),
        ("fair_share", gettext("fair share"), "dash", 1.3),
        ("entitlement", gettext("entitlement"), "dot", 1.3),
    )
    traces = []
    for index, row in enumerate(sorted(data.tenants, key=lambda r: r.tenant)):
        frame = frames.get(row.tenant, empty)
        times = typed_array(_times(frame["bin"]))
        colour = PALETTE[index % len(PALETTE)]
        shown_name = plotly_text(row.tenant)
        for column, label, dash, width in lines:
            traces.append(
                {
                    "hovertemplate": "%{y:.1%}<extra>" + f"{shown_name} {label}" + "</extra>",
                    "legendgroup": row.tenant,
                    "line": {"color": colour, "dash": dash, "width": width},
                    "mode": "lines",
                    "name": f"{shown_name} {label}",
                    "visible": True if row.tenant in shown else "legendonly",
                    "x": times,
                    "y": typed_array(frame[column].to_numpy(dtype=float)),
                    "type": "scatter",
                }
            )
    return plain_figure(
        traces,
        figure_layout(
            height=360,
            hovermode="x unified",
            legend={"orientation": "v", "x": 1.02, "y": 1},
            margin={"l": 64, "r": 16, "t": 16, "b": 40},
            xaxis=time_axis(),
            yaxis=axis_style(
                tickformat=".0%",
                rangemode="tozero",
                title={"text": gettext("share of usable GPUs")},
            ),
        ),
    )


def waits_by_size_class(data: FairnessReportData) -> Figure:
    """p50 and p95 wait (hours) of the shown tenants' jobs that started or still wait, per size
    class."""
    waits = data.report.waits
    names = [gettext("%(size)s GPUs") % {"size": c} for c in SIZE_CLASSES]
    jobs = [waits[c].jobs for c in SIZE_CLASSES]
    bars = [
        {
            "customdata": jobs,
            "hovertemplate": f"{label} %{{y:.2f}} h (%{{customdata}} "
            + gettext("jobs")
            + ")<extra></extra>",
            "marker": {"color": colour},
            "name": label,
            "x": names,
            "y": _finite((getattr(waits[c], f"{label}_s") or 0) / 3600 for c in SIZE_CLASSES),
            "type": "bar",
        }
        for label, colour in (("p50", ACCENT), ("p95", INK))
    ]
    return plain_figure(
        bars,
        figure_layout(
            height=300,
            barmode="group",
            legend={"orientation": "h", "x": 0, "y": 1.12},
            margin={"l": 64, "r": 16, "t": 40, "b": 40},
            xaxis=axis_style(type="category"),
            yaxis=axis_style(title={"text": gettext("wait (hours)")}, rangemode="tozero"),
        ),
    )


def tenant_breakdown(data: FairnessReportData) -> Figure:
    """GPU-hours each tenant held, stacked by accounting bucket."""
    rows = sorted(data.tenants, key=lambda r: r.tenant, reverse=True)
    names = [plotly_text(r.tenant) for r in rows]
    bars = [
        {
            "hovertemplate": "%{y}: %{x:,.1f} "
            + gettext("GPU-hours")
            + "<extra>"
            + gettext(BUCKET_LABELS[bucket])
            + "</extra>",
            "marker": {"color": BUCKET_COLOURS[bucket]},
            "name": gettext(BUCKET_LABELS[bucket]),
            "orientation": "h",
            "x": _finite(r.buckets[bucket] for r in rows),
            "y": names,
            "type": "bar",
        }
        for bucket in TENANT_BUCKETS
    ]
    return plain_figure(
        bars,
        figure_layout(
            height=max(260, 140 + 24 * len(rows)),
            barmode="stack",
            legend={
                "orientation": "h",
                "x": 0,
                "y": -0.12,
                "yanchor": "top",
                "font": {"color": MUTED},
                "traceorder": "normal",
            },
            margin={"l": 120, "r": 16, "t": 16, "b": 40},
            xaxis=axis_style(title={"text": gettext("GPU-hours")}, rangemode="tozero", side="top"),
            yaxis=axis_style(type="category"),
        ),
    )
