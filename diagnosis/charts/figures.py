"""The plotly figures of the pages (overview, nodes and GPUs, jobs, a recommendation's impact) and
their embedding as JSON that ``static/js/gpuobs-charts.js`` draws (:func:`embed`): no inline
script, so a strict Content-Security-Policy (``script-src 'self'``) can stay on. Every figure
shares one layout and one theme (CHART_THEMES)."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language, gettext, gettext_noop
from plotly.subplots import make_subplots

from diagnosis.charts.gpu_hours import BUCKET_HELP, BUCKET_LABELS, GpuHoursBreakdown
from diagnosis.pages.support.time_zone import zone_label

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
INK = "#1d2430"
MUTED = "#5f6b7a"
GRID = "#e6e9ee"
ACCENT = "#2f5ddc"
ACTIVITY = "#1a7f37"
# The page's light and dark themes (docs/ui.md "Dark mode"): figures are built in the light
# one; gpuobs-charts.js repaints text, grid lines and the waterfall's total in the reader's.
CHART_THEMES: dict[str, dict[str, str]] = {
    "light": {"ink": INK, "grid": GRID},
    "dark": {"ink": "#dbe2ec", "grid": "#323b48"},
}
_CHART_THEMES_JSON = json.dumps(CHART_THEMES, separators=(",", ":"))


# plotly's "none" template as to_plotly_json writes it (plotly.js knows no template names)
NONE_TEMPLATE = pio.templates["none"].to_plotly_json()

Figure = dict[str, Any]  # a figure as plotly's JSON of it: plain dicts and lists (see embed)


def typed_array(values: Iterable[float] | np.ndarray) -> dict[str, str]:
    """Numbers as plotly's typed array (little-endian float64, base64), as plotly writes a
    numpy array: NaN stays NaN (a gap in the line)."""
    array = np.ascontiguousarray(np.asarray(values, dtype="<f8"))
    return {"dtype": "f8", "bdata": base64.b64encode(array.tobytes()).decode("ascii")}


def plain_figure(traces: list[dict[str, Any]], layout: Mapping[str, Any]) -> Figure:
    """A figure of ``traces`` (dicts, as ``to_plotly_json`` writes them) and ``layout`` (a
    :func:`figure_layout`), its template spelled out as plotly would."""
    return {"data": traces, "layout": {**layout, "template": NONE_TEMPLATE}}


def figure_layout(**overrides: Any) -> dict[str, Any]:
    # template "none": plotly's default template would add ~7 kB of JSON to every figure.
    layout: dict[str, Any] = {
        "template": "none",
        "font": {"family": FONT, "size": 13, "color": INK},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "margin": {"l": 64, "r": 16, "t": 16, "b": 56},
        "hoverlabel": {"font": {"family": FONT}},
    }
    layout.update(overrides)
    return layout


def axis_style(**overrides: Any) -> dict[str, Any]:
    axis = {"gridcolor": GRID, "zerolinecolor": GRID, "linecolor": GRID, "automargin": True}
    axis.update(overrides)
    return axis


def reader_epoch_ms(times: Iterable[datetime] | pd.Series) -> np.ndarray:
    """Moments as a date axis reads them: milliseconds since the epoch of their wall time in the
    reader's zone (plotly draws dates without a zone; docs/ui.md "Clocks and time zones"), as
    plain floats (binary typed arrays: datetimes cost ~10 ms of JSON)."""
    series = times if isinstance(times, pd.Series) else pd.Series(list(times))
    local = pd.to_datetime(series, utc=True).dt.tz_convert(timezone.get_current_timezone_name())
    naive = local.dt.tz_localize(None)
    return naive.to_numpy(dtype="datetime64[ms]").astype(np.int64).astype(float)


def time_axis(*, titled: bool = True, **overrides: Any) -> dict[str, Any]:
    """A date axis in the reader's zone, labelled with it (``UTC+8``) under the axis (unless
    ``titled`` is off: a stack of panels labels its last) and in the hover."""
    label = zone_label(timezone.localtime())
    axis = axis_style(type="date", hoverformat=f"%Y-%m-%d %H:%M:%S {label}", **overrides)
    if titled:
        axis["title"] = {"text": label, "standoff": 4}
    return axis


def _gpu_hours_text(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def gpu_hours_waterfall(
    breakdown: GpuHoursBreakdown,
    links: Mapping[str, str] | None = None,
    costs: Mapping[str, Any] | None = None,
) -> go.Figure:
    """The buckets in docs/accounting.md bucket order, each adding its GPU-hours, up to the
    capacity.

    ``links`` maps a bucket to the URL of the findings behind it; a click on its bar goes there.
    ``costs`` maps a bucket (and ``capacity``) to its cost, shown on hover (docs/accounting.md
    "Cost"); empty when the cluster is not priced.
    """
    links = links or {}
    costs = costs or {}
    names = [b.bucket for b in breakdown.buckets]
    # two lines per label: after the comma (English ", ", Chinese "，")
    labels = [
        gettext(BUCKET_LABELS[name]).replace(", ", ",<br>").replace("，", "，<br>")
        for name in names
    ] + [gettext("Capacity")]
    values = [b.gpu_hours for b in breakdown.buckets] + [breakdown.capacity_gpu_hours]
    shares = [b.share for b in breakdown.buckets] + [1.0 if breakdown.capacity_gpu_hours else None]
    text = [
        _gpu_hours_text(v) + (f" ({s:.0%})" if s is not None and v else "")
        for v, s in zip(values, shares, strict=True)
    ]
    helps = [gettext(BUCKET_HELP[name]) for name in names] + [gettext("every GPU of the cluster")]
    customdata = [
        [links.get(name, ""), help_text, f"<br>{costs[name]}" if name in costs else ""]
        for name, help_text in zip([*names, "capacity"], helps, strict=True)
    ]
    waterfall = go.Waterfall(
        x=labels,
        y=values,
        measure=["relative"] * len(names) + ["total"],
        text=text,
        textposition="outside",
        cliponaxis=False,
        customdata=customdata,
        hovertemplate="<b>%{x}</b><br>%{y:,.1f} "
        + gettext("GPU-hours")
        + "%{customdata[2]}<br>%{customdata[1]}<extra></extra>",
        increasing={"marker": {"color": ACCENT}},
        decreasing={"marker": {"color": ACCENT}},
        totals={"marker": {"color": INK}},
        connector={"line": {"color": "#9aa4b2", "width": 1, "dash": "dot"}},
    )
    top = max(breakdown.capacity_gpu_hours, 1.0)
    # The layout goes to the constructor: update_layout() costs four times as much (a deep copy).
    figure = go.Figure(
        data=[waterfall],
        layout=figure_layout(
            height=380,
            showlegend=False,
            xaxis=axis_style(type="category", tickfont={"size": 12}),
            yaxis=axis_style(
                title={"text": gettext("GPU-hours")}, rangemode="tozero", range=[0, top * 1.12]
            ),
        ),
    )
    return figure


def utilization_trend(cycles: pd.DataFrame) -> go.Figure:
    """Allocation and activity utilization over time, from columns ``as_of``,
    ``allocation_utilization`` and ``activity_utilization`` (fractions; NaN where unknown).

    A gap of more than three typical cycle intervals breaks the lines instead of drawing a
    straight line over time for which there is no data.
    """
    frame = cycles.sort_values("as_of").reset_index(drop=True)
    if len(frame) > 2:
        steps = frame["as_of"].diff()
        typical = steps.median()
        gaps = frame.loc[steps > typical * 3, "as_of"] - typical
        if len(gaps):
            breaks = pd.DataFrame({"as_of": gaps.to_numpy()})
            frame = pd.concat([frame, breaks], ignore_index=True).sort_values("as_of")
    times = reader_epoch_ms(frame["as_of"])
    traces = [
        go.Scatter(
            x=times,
            y=frame[column].to_numpy(dtype=float, na_value=np.nan),
            name=name,
            mode="lines",
            line={"color": color, "width": 2},
            connectgaps=False,
            hovertemplate="%{y:.1%}<extra>" + short + "</extra>",
        )
        for column, name, short, color in (
            (
                "allocation_utilization",
                gettext("Allocation (GPUs held ÷ GPUs)"),
                gettext("Allocation"),
                ACCENT,
            ),
            (
                "activity_utilization",
                gettext("Activity (mean GPU util)"),
                gettext("Activity"),
                ACTIVITY,
            ),
        )
    ]
    figure = go.Figure(
        data=traces,
        layout=figure_layout(
            height=300,
            hovermode="x unified",
            legend={"orientation": "h", "x": 0, "y": 1.12},
            margin={"l": 64, "r": 16, "t": 40, "b": 40},
            xaxis=time_axis(),
            yaxis=axis_style(
                tickformat=".0%", range=[0, 1.02], title={"text": gettext("utilization")}
            ),
        ),
    )
    return figure


@dataclass(frozen=True)
class TimeMark:
    """Something that happened at a snapshot time, drawn on a time chart as a dotted line with
    a label: an incident opened, a change applied."""

    at: datetime
    kind: str  # "incident" or "change"
    text: str


TIME_MARK_COLOURS = {"incident": "#c62828", "change": ACTIVITY}


def add_time_marks(figure: go.Figure, marks: Iterable[TimeMark]) -> go.Figure:
    """``marks`` as vertical lines across ``figure``'s date axis, labelled at the top (the hover
    text names each)."""
    shapes, annotations = [], []
    for mark in marks:
        x = timezone.localtime(mark.at).strftime("%Y-%m-%d %H:%M:%S")  # the axis's zone
        colour = TIME_MARK_COLOURS.get(mark.kind, MUTED)
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"color": colour, "width": 1, "dash": "dot"},
            }
        )
        annotations.append(
            {
                "x": x,
                "y": 1,
                "xref": "x",
                "yref": "paper",
                "yanchor": "bottom",
                "text": "⚠" if mark.kind == "incident" else "✓",
                "hovertext": plotly_text(mark.text),
                "showarrow": False,
                "font": {"color": colour, "size": 13},
            }
        )
    if shapes:
        figure.layout.shapes = tuple(figure.layout.shapes) + tuple(shapes)
        figure.layout.annotations = tuple(figure.layout.annotations) + tuple(annotations)
    return figure


# -- recommendation impact -----------------------------------------------------------------------

HARM = "#c62828"
IMPACT_COLUMNS = 4
IMPACT_UNITS = {"fraction": (100.0, "%"), "s": (1 / 60, "min"), "GPUs": (1.0, "GPUs")}


def recommendation_impact(impact: Mapping[str, Any]) -> go.Figure | None:
    """A recommendation's simulated impact: per metric (``impact["metrics"]`` rows of
    ``diagnosis.core.recommend.impact``), the mean of the current and of the proposed replays over
    the seeds, the seeds' range as error bars, the proposed bar coloured by the row's verdict.
    None when nothing was simulated."""

    rows = [r for r in impact.get("metrics") or () if isinstance(r, Mapping) and "current" in r]
    if not rows:
        return None
    titles = []  # two short lines: the metric and, unless cluster-wide, what it is of
    for row in rows:
        subject = (
            "" if row.get("subject") == "cluster" else f"<br>{plotly_text(row.get('subject'))}"
        )
        label = gettext(str(row.get("label") or row.get("metric")))  # the core's English
        titles.append(f"{plotly_text(label)}{subject}")
    columns = min(IMPACT_COLUMNS, len(rows))
    lines = -(-len(rows) // columns)
    figure = make_subplots(
        rows=lines,
        cols=columns,
        subplot_titles=titles,
        horizontal_spacing=0.08,
        vertical_spacing=0.5 / lines if lines > 1 else 0.0,
    )
    for number, row in enumerate(rows):
        at = {"row": number // columns + 1, "col": number % columns + 1}
        scale, unit = IMPACT_UNITS.get(str(row.get("unit")), (1.0, ""))
        colour = {"improves": ACTIVITY, "harms": HARM}.get(str(row.get("verdict")), ACCENT)
        verdict = plotly_text(row.get("verdict"))
        for name, key, bar_colour in (
            ("current", "current", MUTED),
            ("proposed", "proposed", colour),
        ):
            stats = row.get(key) or {}
            mean = _scaled(stats.get("mean"), scale)
            low, high = _scaled(stats.get("min"), scale), _scaled(stats.get("max"), scale)
            figure.add_trace(
                go.Bar(
                    x=[name],
                    y=[mean],
                    marker={"color": bar_colour},
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": [None if high is None or mean is None else high - mean],
                        "arrayminus": [None if low is None or mean is None else mean - low],
                        "color": INK,
                        "thickness": 1,
                    },
                    hovertemplate=f"{name}: %{{y:.3g}} {unit}<extra>{verdict}</extra>",
                    showlegend=False,
                ),
                **at,
            )
        figure.update_yaxes(title_text=unit, **at, **axis_style(rangemode="tozero"))
    figure.update_xaxes(**axis_style())
    figure.update_layout(
        **figure_layout(
            height=60 + 270 * lines, margin={"l": 56, "r": 16, "t": 56, "b": 32}, bargap=0.35
        )
    )
    figure.update_annotations(font={"size": 12})
    return figure


def _scaled(value: Any, scale: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        return None
    return float(value) * scale


# -- embedding -----------------------------------------------------------------------------------

# Escapes that keep a JSON text inert inside <script type="application/json"> (as json_script).
_JSON_SCRIPT_ESCAPES = {ord(">"): "\\u003E", ord("<"): "\\u003C", ord("&"): "\\u0026"}


def plotly_text(value: object) -> str:
    """A name (tenant, queue, job) as plotly text: plotly reads ``<a href>``, ``<b>`` and the
    like in labels, legends and hover text as markup, so ``&``, ``<`` and ``>`` are escaped
    (plotly shows the entities as the characters) and a name can never become a link."""
    return html.escape(str(value), quote=False)


def embed(figure: go.Figure | Mapping[str, Any], element_id: str, *, label: str) -> SafeString:
    """The figure as a container div plus its JSON; ``gpuobs-charts.js`` draws it on load.

    ``figure``: a plotly figure, or the same figure's JSON as plain dicts and lists (what
    ``to_plotly_json`` gives; arrays as plotly's typed arrays or lists of finite numbers or
    None): building a figure of many traces as dicts costs a fraction of plotly's validation
    (diagnosis/reports/figures.py). ``label`` names the chart for screen readers (the pages
    repeat its figures as a table).
    """
    if isinstance(figure, go.Figure):
        text = figure.to_json(validate=False)
    else:
        text = json.dumps(figure, separators=(",", ":"), allow_nan=False)
    payload = text.translate(_JSON_SCRIPT_ESCAPES)
    return format_html(
        '<div class="chart" id="{id}" data-figure="{id}-figure" data-themes="{themes}" role="img"'
        ' aria-label="{label}"></div>'
        '<script id="{id}-figure" type="application/json">{payload}</script>',
        id=element_id,
        label=label,
        themes=_CHART_THEMES_JSON,
        payload=mark_safe(payload),  # noqa: S308 - the figure's JSON, with <, > and & escaped
    )


# -- nodes and GPUs (issue 19): the heatmap and the time series of the node, GPU and job pages ---

# The GPU metrics the time series show: key, label, y-axis format, unit (docs/ui.md).
GPU_SERIES: tuple[tuple[str, str, str, str], ...] = (
    ("util", gettext_noop("GPU utilization"), ".0%", ""),
    ("tensor_active", gettext_noop("Tensor-core activity"), ".0%", ""),
    ("fb_used_frac", gettext_noop("Framebuffer used"), ".0%", ""),
    ("power_w", gettext_noop("Power"), ",.0f", " W"),
    ("temp_c", gettext_noop("Temperature"), ",.0f", " °C"),
    ("sm_clock_mhz", gettext_noop("SM clock"), ",.0f", " MHz"),
)
# Utilization from idle to busy (docs/ui.md "Nodes and GPUs"): an idle GPU (0%) is a strong orange,
# never the page's grey, so it reads apart from an empty cell (no utilization reported: the
# heatmap leaves it transparent, the panel's own colour) in the light and the dark theme alike.
HEATMAP_IDLE = "#d9480f"
HEATMAP_UTIL_SCALE = [[0.0, HEATMAP_IDLE], [0.05, "#fdba74"], [0.5, "#8fb5f0"], [1.0, "#1d3f9e"]]


def _column(rows: list[Mapping[str, Any]], key: str) -> np.ndarray:
    return np.array(
        [np.nan if row.get(key) is None else float(row[key]) for row in rows], dtype=float
    )


def gpu_metric_series_validated(rows: list[Mapping[str, Any]]) -> go.Figure:
    """:func:`gpu_metric_series` through plotly's validated objects (its panels' layout, and
    what the tests hold it to)."""
    figure = make_subplots(
        rows=len(GPU_SERIES),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.035,
        subplot_titles=[gettext(label) for _key, label, _fmt, _unit in GPU_SERIES],
    )
    times = reader_epoch_ms(row["as_of"] for row in rows)
    for i, (key, english, fmt, unit) in enumerate(GPU_SERIES, start=1):
        label = gettext(english)
        figure.add_trace(
            go.Scatter(
                x=times,
                y=_column(rows, key),
                name=label,
                mode="lines+markers" if len(rows) < 30 else "lines",
                marker={"size": 4},
                line={"color": ACCENT if i % 2 else ACTIVITY, "width": 2},
                connectgaps=False,
                hovertemplate=f"%{{y:{fmt}}}{unit}<extra>{label}</extra>",
            ),
            row=i,
            col=1,
        )
        axis = "yaxis" if i == 1 else f"yaxis{i}"
        figure.layout[axis].update(axis_style(tickformat=fmt, ticksuffix=unit, rangemode="tozero"))
        if fmt == ".0%":
            figure.layout[axis].update(range=[0, 1.02])
    for i in range(1, len(GPU_SERIES) + 1):
        axis = time_axis(titled=i == len(GPU_SERIES))
        figure.layout["xaxis" if i == 1 else f"xaxis{i}"].update(axis)
    figure.layout.update(
        figure_layout(
            height=150 * len(GPU_SERIES),
            showlegend=False,
            hovermode="x unified",
            margin={"l": 64, "r": 16, "t": 32, "b": 40},
        )
    )
    return figure


def gpu_metric_series(rows: list[Mapping[str, Any]]) -> Figure:
    """One GPU over time: a panel per metric of :data:`GPU_SERIES` (rows: ``as_of`` and the
    metrics, None where the snapshot had none), on one shared time axis. Built as plotly's
    JSON of it, the panels' layout made by plotly once per language and zone: the subplots and
    six validated traces took ~80 ms a GPU page (issue #35)."""
    times = typed_array(reader_epoch_ms(row["as_of"] for row in rows))
    traces = []
    for i, (key, english, fmt, unit) in enumerate(GPU_SERIES, start=1):
        label = gettext(english)
        traces.append(
            {
                "type": "scatter",
                "x": times,
                "y": typed_array(_column(rows, key)),
                "name": label,
                "mode": "lines+markers" if len(rows) < 30 else "lines",
                "marker": {"size": 4},
                "line": {"color": ACCENT if i % 2 else ACTIVITY, "width": 2},
                "connectgaps": False,
                "hovertemplate": f"%{{y:{fmt}}}{unit}<extra>{label}</extra>",
                "xaxis": f"x{i}" if i > 1 else "x",
                "yaxis": f"y{i}" if i > 1 else "y",
            }
        )
    layout = _panels_layout(get_language(), zone_label(timezone.localtime()))
    return {"data": traces, "layout": layout}


@lru_cache(maxsize=64)
def _panels_layout(language: str, zone: str) -> dict[str, Any]:
    """The layout of :func:`gpu_metric_series` in the active ``language`` and ``zone`` (the
    arguments name what it depends on), as plotly writes it. Shared: never changed."""
    return json.loads(gpu_metric_series_validated([]).to_json())["layout"]


def gpus_util_series(series: Mapping[str, list[Mapping[str, Any]]], metric: str = "util") -> Figure:
    """Several GPUs' ``metric`` over time, a line each (the node page, the job page, the
    overlay): ``series`` maps a GPU's label to its rows (``as_of`` and the metric). Built as
    plotly's JSON of it: a job's 64 GPUs are 64 traces a chart, which plotly's validation took
    ~70 ms to build (issue #35); tests/app/pages/test_series_figures.py holds it to plotly's."""
    label, fmt = metric_label(metric)
    times = sorted({row["as_of"] for rows in series.values() for row in rows})
    epoch = dict(zip(times, reader_epoch_ms(times).tolist(), strict=True)) if times else {}
    traces = []
    for name, rows in series.items():
        text = plotly_text(name)
        traces.append(
            {
                "type": "scatter",
                "x": typed_array([epoch[row["as_of"]] for row in rows]),
                "y": typed_array(_column(list(rows), metric)),
                "name": text,
                "mode": "lines",
                "connectgaps": False,
                "hovertemplate": f"%{{y:{fmt}}}<extra>{text}</extra>",
            }
        )
    return plain_figure(traces, series_layout(label, fmt))


def metric_label(metric: str) -> tuple[str, str]:
    """The translated name and the plotly number format of a :data:`GPU_SERIES` metric."""
    return next(((gettext(lbl), f) for k, lbl, f, _u in GPU_SERIES if k == metric), (metric, ".2f"))


def series_layout(label: str, fmt: str) -> dict[str, Any]:
    """The layout of a chart of GPUs' metric over time: the metric ``label`` on the y axis in
    plotly format ``fmt`` (0..102% for fractions), time in the reader's zone on the x axis, the
    legend below."""
    return figure_layout(
        height=300,
        hovermode="x unified",
        legend={"orientation": "h", "x": 0, "y": -0.18},
        margin={"l": 64, "r": 16, "t": 16, "b": 40},
        xaxis=time_axis(),
        yaxis=axis_style(
            tickformat=fmt, range=[0, 1.02] if fmt == ".0%" else None, title={"text": label}
        ),
    )


def gpu_heatmap(
    nodes: list[str],
    values: np.ndarray,
    links: list[list[str]],
    *,
    colorby: str = "util",
    state_labels: Mapping[int, str] | None = None,
) -> go.Figure:
    """The cluster's GPUs as one heatmap: a column per node, a row per GPU index, coloured by
    utilization (``values`` a fraction, NaN where unknown) or by state (``values`` the codes of
    ``state_labels``). ``links[row][column]`` is the GPU's page: a click goes there."""
    if colorby == "state" and state_labels:
        codes = sorted(state_labels)
        palette = ["#f3f5f8", "#1d3f9e", "#f0a35e", "#c62828", "#9aa4b2", "#ffffff"]
        top = max(codes) if codes else 1
        scale = []
        for code in codes:
            color = palette[code % len(palette)]
            low, high = code / (top + 1), (code + 1) / (top + 1)
            scale += [[low, color], [high, color]]
        heat = go.Heatmap(
            x=[plotly_text(node) for node in nodes],
            z=values,
            customdata=links,
            zmin=0,
            zmax=top + 1,
            colorscale=scale,
            colorbar={
                "tickvals": [c + 0.5 for c in codes],
                "ticktext": [state_labels[c] for c in codes],
            },
            hovertemplate="%{x} GPU %{y}<extra></extra>",
            xgap=1,
            ygap=1,
        )
    else:
        heat = go.Heatmap(
            x=[plotly_text(node) for node in nodes],
            z=values,
            customdata=links,
            zmin=0,
            zmax=1,
            colorscale=HEATMAP_UTIL_SCALE,
            colorbar={"tickformat": ".0%", "title": {"text": gettext("util")}},
            hovertemplate="%{x} GPU %{y}: %{z:.0%}<extra></extra>",
            hoverongaps=False,
            xgap=1 if len(nodes) <= 256 else 0,
            ygap=1,
        )
    rows = values.shape[0] if values.ndim == 2 else 0
    return go.Figure(
        data=[heat],
        layout=figure_layout(
            height=max(220, 40 + 22 * rows),
            margin={"l": 48, "r": 16, "t": 8, "b": 64},
            xaxis=axis_style(
                type="category", showticklabels=len(nodes) <= 64, title={"text": gettext("node")}
            ),
            yaxis=axis_style(
                title={"text": gettext("GPU")}, autorange="reversed", dtick=1, type="linear"
            ),
        ),
    )
