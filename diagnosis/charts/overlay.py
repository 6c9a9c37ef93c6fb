"""Several GPUs on one chart (docs/ui.md "Overlaying GPUs"): a line each while they are few,
else their spread -- the mean, the lowest and the highest at each stored snapshot, aggregated
here on the server, so the browser gets three series whatever the number of GPUs."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from django.utils.translation import gettext

from diagnosis.charts.figures import (
    Figure,
    gpus_util_series,
    metric_label,
    reader_epoch_ms,
    series_layout,
)

MAX_LINES = 16  # GPUs drawn as a line each; more are drawn as their spread


def spread(
    series: Mapping[Any, list[Mapping[str, Any]]], metric: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Times (the snapshots any GPU reported at), and per time the mean, lowest and highest
    ``metric`` over the GPUs that reported it, and how many did (NaN where none did)."""
    times = sorted({row["as_of"] for rows in series.values() for row in rows})
    at = {t: i for i, t in enumerate(times)}
    values = np.full((len(series), len(times)), np.nan)
    for g, rows in enumerate(series.values()):
        for row in rows:
            if row.get(metric) is not None:
                values[g, at[row["as_of"]]] = float(row[metric])
    counts = (~np.isnan(values)).sum(axis=0)
    with warnings.catch_warnings():  # a time no GPU reported at: NaN, said once here
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(values, axis=0) if len(times) else np.array([])
        low = np.nanmin(values, axis=0) if len(times) else np.array([])
        high = np.nanmax(values, axis=0) if len(times) else np.array([])
    return np.array(times, dtype=object), mean, low, high, counts


def gpus_overlay(series: Mapping[str, list[Mapping[str, Any]]], metric: str) -> go.Figure | Figure:
    """``series`` (a GPU's label -> its rows: ``as_of`` and the metrics) on one chart: a line
    each up to :data:`MAX_LINES` GPUs, else the mean with the lowest-to-highest band."""
    if len(series) <= MAX_LINES:
        return gpus_util_series(series, metric)
    label, fmt = metric_label(metric)
    times, mean, low, high, counts = spread(series, metric)
    x = reader_epoch_ms(times)
    band = gettext("lowest to highest")
    highest, lowest, mean_word = gettext("highest"), gettext("lowest"), gettext("mean")
    gpus_word = gettext("GPUs")
    traces = [
        go.Scatter(
            x=x,
            y=high,
            mode="lines",
            line={"width": 0},
            name=band,
            showlegend=False,
            hovertemplate=f"%{{y:{fmt}}}<extra>{highest}</extra>",
        ),
        go.Scatter(
            x=x,
            y=low,
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            name=band,
            fillcolor="rgba(59, 110, 214, 0.2)",
            hovertemplate=f"%{{y:{fmt}}}<extra>{lowest}</extra>",
        ),
        go.Scatter(
            x=x,
            y=mean,
            mode="lines",
            name=gettext("mean of %(n)d GPUs") % {"n": len(series)},
            customdata=counts,
            connectgaps=False,
            hovertemplate=f"%{{y:{fmt}}} (%{{customdata}} {gpus_word})<extra>{mean_word}</extra>",
        ),
    ]
    return go.Figure(data=traces, layout=series_layout(label, fmt))
