"""Issue #35: the GPUs-over-time chart of the node page, the job page and the overlay
(``diagnosis.charts.figures.gpus_util_series``) and the GPU page's six panels
(``gpu_metric_series``) are built as plotly's JSON of them, not through
``plotly.graph_objects``: each must be the figure plotly itself writes for the same lines.

The series: three GPUs over three snapshot times, one silent at the middle one (a shorter
line), one with a metric missing (a gap), one whose label is markup; the reader in a zone
other than UTC (the time axis is in the reader's wall time)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import numpy as np
import plotly.graph_objects as go
import pytest
from django.utils import timezone, translation

from diagnosis.charts.figures import (
    gpu_metric_series,
    gpu_metric_series_validated,
    gpus_util_series,
    metric_label,
    plotly_text,
    reader_epoch_ms,
    series_layout,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TIMES = [T0 + timedelta(minutes=m) for m in (0, 10, 20)]
SERIES = {
    "n1/0": [
        {"as_of": t, "util": u, "fb_used_frac": 0.5}
        for t, u in zip(TIMES, (0.1, 0.2, 0.3), strict=True)
    ],
    "n1/1": [{"as_of": t, "util": 0.9, "fb_used_frac": 0.4} for t in (TIMES[0], TIMES[2])],
    "<b>n2</b>/0 MIG 1": [
        {"as_of": TIMES[0], "util": None, "fb_used_frac": 0.1},
        {"as_of": TIMES[1], "util": 0.7, "fb_used_frac": None},
    ],
}


@pytest.fixture(autouse=True)
def reader_in_tokyo():
    with timezone.override("Asia/Tokyo"):
        yield


def through_plotly(series, metric: str) -> go.Figure:
    """The same chart made by plotly's validated objects, a ``go.Scatter`` a GPU."""
    label, fmt = metric_label(metric)
    traces = [
        go.Scatter(
            x=reader_epoch_ms(row["as_of"] for row in rows),
            y=np.array([np.nan if r[metric] is None else r[metric] for r in rows], dtype=float),
            name=plotly_text(name),
            mode="lines",
            connectgaps=False,
            hovertemplate=f"%{{y:{fmt}}}<extra>{plotly_text(name)}</extra>",
        )
        for name, rows in series.items()
    ]
    return go.Figure(data=traces, layout=series_layout(label, fmt))


def decoded(array: dict[str, str]) -> list[float]:
    return np.frombuffer(base64.b64decode(array["bdata"]), dtype="<f8").tolist()


@pytest.mark.parametrize("metric", ["util", "fb_used_frac"])
def test_the_chart_is_what_plotly_writes_for_the_same_lines(metric: str) -> None:
    figure = gpus_util_series(SERIES, metric)

    validated = go.Figure(figure)  # raises on any property plotly does not know

    assert json.loads(json.dumps(figure)) == json.loads(through_plotly(SERIES, metric).to_json())
    assert json.loads(validated.to_json()) == json.loads(json.dumps(figure))


def test_each_gpu_is_a_line_at_its_own_times_in_the_readers_zone() -> None:
    traces = gpus_util_series(SERIES, "util")["data"]

    tokyo_noon = datetime(2026, 3, 1, 21, 0, tzinfo=UTC).replace(tzinfo=None)  # 12:00 UTC
    noon_ms = (tokyo_noon - datetime(1970, 1, 1)).total_seconds() * 1000
    assert [t["name"] for t in traces] == ["n1/0", "n1/1", "&lt;b&gt;n2&lt;/b&gt;/0 MIG 1"]
    assert decoded(traces[1]["x"]) == [noon_ms, noon_ms + 20 * 60_000]
    assert decoded(traces[0]["y"]) == [0.1, 0.2, 0.3]
    assert np.isnan(decoded(traces[2]["y"])[0])  # a gap, never a zero


def test_no_gpu_is_an_empty_chart() -> None:
    assert gpus_util_series({}, "util")["data"] == []


def gpu_rows(count: int) -> list[dict]:
    return [
        {
            "as_of": T0 + timedelta(minutes=i),
            "util": i / count,
            "tensor_active": None if i == 1 else 0.25,
            "fb_used_frac": 0.5,
            "power_w": 300.0 + i,
            "temp_c": 60.0,
            "sm_clock_mhz": None,
        }
        for i in range(count)
    ]


@pytest.mark.parametrize("count", [3, 40])  # markers on a short range, lines on a long one
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_gpu_panels_are_what_plotly_writes_for_them(count: int, language: str) -> None:
    with translation.override(language):
        figure = gpu_metric_series(gpu_rows(count))
        reference = gpu_metric_series_validated(gpu_rows(count))

    assert json.loads(json.dumps(figure)) == json.loads(reference.to_json())


def test_the_gpu_panels_are_in_the_readers_language_and_zone() -> None:
    with translation.override("zh-hans"):
        chinese = gpu_metric_series(gpu_rows(3))["layout"]
    with timezone.override("UTC"):
        utc = gpu_metric_series(gpu_rows(3))["layout"]
    english = gpu_metric_series(gpu_rows(3))["layout"]

    titles = [a["text"] for a in english["annotations"]]
    assert titles[0] == "GPU utilization"
    assert [a["text"] for a in chinese["annotations"]] != titles
    assert english["xaxis6"]["title"]["text"] == "UTC+9"
    assert utc["xaxis6"]["title"]["text"] != "UTC+9"
