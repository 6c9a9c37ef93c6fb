"""Plotly figures of the fairness report page (the PDF draws the same data with ReportLab):
share vs entitlement over time, waits by size class, the GPU-hour breakdown per tenant."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from django.utils.translation import gettext

from diagnosis.charts import (
    ACCENT,
    BUCKET_LABELS,
    INK,
    MUTED,
    axis_style,
    figure_layout,
    plotly_text,
)
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
    moments = pd.to_datetime(values, utc=True).dt.tz_localize(None)
    return moments.to_numpy(dtype="datetime64[ms]").astype(np.int64).astype(float)


def share_over_time(data: FairnessReportData) -> go.Figure:
    """Per tenant: usage (solid), fair share (dashed) and entitlement (dotted) per time bin."""
    ranked = sorted(data.tenants, key=lambda r: -(r.usage or 0))
    shown = {r.tenant for r in ranked[:SHOWN_TENANTS]}
    traces = []
    for index, row in enumerate(sorted(data.tenants, key=lambda r: r.tenant)):
        frame = data.series[data.series["tenant"] == row.tenant]
        times = _times(frame["bin"])
        colour = PALETTE[index % len(PALETTE)]
        shown_name = plotly_text(row.tenant)
        for column, label, dash in (
            ("usage", gettext("usage"), "solid"),
            ("fair_share", gettext("fair share"), "dash"),
            ("entitlement", gettext("entitlement"), "dot"),
        ):
            traces.append(
                go.Scatter(
                    x=times,
                    y=frame[column].to_numpy(dtype=float),
                    name=f"{shown_name} {label}",
                    legendgroup=row.tenant,
                    mode="lines",
                    line={"color": colour, "width": 2 if column == "usage" else 1.3, "dash": dash},
                    visible=True if row.tenant in shown else "legendonly",
                    hovertemplate="%{y:.1%}<extra>" + f"{shown_name} {label}" + "</extra>",
                )
            )
    return go.Figure(
        data=traces,
        layout=figure_layout(
            height=360,
            hovermode="x unified",
            legend={"orientation": "v", "x": 1.02, "y": 1},
            margin={"l": 64, "r": 16, "t": 16, "b": 40},
            xaxis=axis_style(type="date"),
            yaxis=axis_style(
                tickformat=".0%",
                rangemode="tozero",
                title={"text": gettext("share of usable GPUs")},
            ),
        ),
    )


def waits_by_size_class(data: FairnessReportData) -> go.Figure:
    """p50 and p95 wait (hours) of the shown tenants' started jobs, per size class."""
    waits = data.report.waits
    names = [gettext("%(size)s GPUs") % {"size": c} for c in SIZE_CLASSES]
    bars = [
        go.Bar(
            x=names,
            y=[(waits[c].p50_s or 0) / 3600 for c in SIZE_CLASSES],
            name="p50",
            marker={"color": ACCENT},
            customdata=[waits[c].jobs for c in SIZE_CLASSES],
            hovertemplate="p50 %{y:.2f} h (%{customdata} " + gettext("jobs") + ")<extra></extra>",
        ),
        go.Bar(
            x=names,
            y=[(waits[c].p95_s or 0) / 3600 for c in SIZE_CLASSES],
            name="p95",
            marker={"color": INK},
            customdata=[waits[c].jobs for c in SIZE_CLASSES],
            hovertemplate="p95 %{y:.2f} h (%{customdata} " + gettext("jobs") + ")<extra></extra>",
        ),
    ]
    return go.Figure(
        data=bars,
        layout=figure_layout(
            height=300,
            barmode="group",
            legend={"orientation": "h", "x": 0, "y": 1.12},
            margin={"l": 64, "r": 16, "t": 40, "b": 40},
            xaxis=axis_style(type="category"),
            yaxis=axis_style(title={"text": gettext("wait (hours)")}, rangemode="tozero"),
        ),
    )


def tenant_breakdown(data: FairnessReportData) -> go.Figure:
    """GPU-hours each tenant held, stacked by accounting bucket."""
    rows = sorted(data.tenants, key=lambda r: r.tenant, reverse=True)
    bars = [
        go.Bar(
            y=[plotly_text(r.tenant) for r in rows],
            x=[r.buckets[bucket] for r in rows],
            name=gettext(BUCKET_LABELS[bucket]),
            orientation="h",
            marker={"color": BUCKET_COLOURS[bucket]},
            hovertemplate="%{y}: %{x:,.1f} "
            + gettext("GPU-hours")
            + "<extra>"
            + gettext(BUCKET_LABELS[bucket])
            + "</extra>",
        )
        for bucket in TENANT_BUCKETS
    ]
    return go.Figure(
        data=bars,
        layout=figure_layout(
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
