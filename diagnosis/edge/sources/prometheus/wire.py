"""Prometheus's HTTP API answers, parsed column-wise: an instant vector as one label dict and one
float per series (:class:`Vector`), a range result straight onto its step grid as a numpy array
(:class:`Matrix`, no Python object per sample). Nothing here talks to a server.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pandas as pd

from diagnosis.core.gc_pause import paused_gc
from diagnosis.edge.errors import CollectError


class PrometheusError(CollectError):
    """Prometheus could not answer a query. ``permanent``: a 4xx (a query or credentials the
    server refuses) rather than an outage, a 5xx or a timeout."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        status: int | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message, permanent=permanent)
        self.status = status
        self.error_type = error_type


# -- parsed responses ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Vector:
    """An instant vector, column-wise: one label dict and one value per series."""

    labels: list[dict[str, str]]
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def column(self, name: str) -> list[str]:
        return [labels.get(name, "") for labels in self.labels]

    def answer(self) -> tuple[list[dict[str, str]], np.ndarray]:
        """The ``(labels, values)`` pair :mod:`diagnosis.edge.sources.dcgm.stats` reads."""
        return self.labels, self.values


@dataclass(frozen=True)
class Matrix:
    """A range result on its step grid: ``values[i, j]`` is series i at ``timestamps[j]`` (NaN
    where the series has no point)."""

    labels: list[dict[str, str]]
    timestamps: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def width(self) -> int:
        """Points per series."""
        return self.values.shape[1]


def envelope_error(body: bytes) -> tuple[str, str]:
    try:
        payload = orjson.loads(body)
        return str(payload.get("errorType", "")), str(payload.get("error", ""))
    except (ValueError, AttributeError):
        return "", body[:200].decode("utf-8", "replace")


def parse_vector(body: bytes) -> tuple[Vector, list[str]]:
    """An instant-query response as a :class:`Vector` and its warnings."""
    with paused_gc():
        return _parse_vector(body)


def _parse_vector(body: bytes) -> tuple[Vector, list[str]]:
    try:
        payload = orjson.loads(body)
    except ValueError as exc:
        raise PrometheusError(f"Prometheus answered something that is not JSON: {exc}") from None
    if payload.get("status") != "success":
        raise PrometheusError(f"Prometheus answered status {payload.get('status')!r}")
    data = payload.get("data") or {}
    if data.get("resultType") not in ("vector", "scalar"):
        raise PrometheusError(f"expected an instant vector, got {data.get('resultType')!r}")
    result = data.get("result") or []
    if data.get("resultType") == "scalar":
        result = [{"metric": {}, "value": result}]
    labels = [r["metric"] for r in result]
    values = np.fromiter(
        (float(r["value"][1]) for r in result), dtype=np.float64, count=len(result)
    )
    return Vector(labels, values), list(payload.get("warnings") or [])


_SERIES = b'{"metric":'
_VALUES = b'"values":['
_WARNINGS = b'"warnings":['
_SAMPLE_LINES = bytes.maketrans(b"[", b"\n")


def parse_matrix(body: bytes, start: float, step: float, points: int) -> tuple[Matrix, list[str]]:
    """A range-query response parsed column-wise onto the grid ``start + k * step``.

    No Python object is made per sample: the series' labels are decoded in one JSON decode;
    their samples (``[t,"v"],...``) are cut out of the body, stripped of quotes, and read as one
    two-column CSV by pandas' C parser; each value lands in its grid cell by one vectorised
    assignment. The byte patterns searched for cannot occur inside JSON strings (their quotes
    would be escaped there).
    """
    with paused_gc():
        return _parse_matrix(body, start, step, points)


def _parse_matrix(body: bytes, start: float, step: float, points: int):
    if not body.startswith(b'{"status":"success"'):
        if body.lstrip().startswith(b"{"):
            payload = orjson.loads(body)
            if payload.get("status") != "success":
                raise PrometheusError(f"Prometheus answered status {payload.get('status')!r}")
            return _matrix_from_payload(payload, start, step, points)
        raise PrometheusError("Prometheus answered something that is not JSON")
    if b'"resultType":"matrix"' not in body[:80]:
        raise PrometheusError("expected a range result (matrix)")
    metrics: list[bytes] = []
    chunks: list[bytes] = []
    position = end_of_data = 0
    while True:
        begin = body.find(_SERIES, position)
        if begin < 0:
            break
        values_at = body.find(_VALUES, begin)
        metrics.append(body[begin + len(_SERIES) : values_at - 1])
        first = values_at + len(_VALUES)
        if body[first : first + 1] == b"]":
            chunks.append(b"")
            position = first
            continue
        last = body.find(b"]]", first)
        chunks.append(body[first + 1 : last])
        position = end_of_data = last + 2
    labels = orjson.loads(b"[" + b",".join(metrics) + b"]") if metrics else []
    values = np.full((len(chunks), points), np.nan)
    # ``t,"v"],[t,"v"`` -> lines ``t,v,``: "[" becomes a line break, "]" and quotes go.
    text = b",[".join(c for c in chunks if c).translate(_SAMPLE_LINES, b']"')
    if text:
        counts = np.array([c.count(b"[") + 1 if c else 0 for c in chunks], dtype=np.int64)
        rows = np.repeat(np.arange(len(chunks)), counts)
        samples = pd.read_csv(
            io.BytesIO(text),
            header=None,
            names=["t", "v", "_"],
            usecols=[0, 1],
            dtype=np.float64,
            engine="c",
        )
        column = np.rint((samples["t"].to_numpy() - start) / step).astype(np.int64)
        keep = (column >= 0) & (column < points)
        values[rows[keep], column[keep]] = samples["v"].to_numpy()[keep]
    warnings: list[str] = []
    at = body.find(_WARNINGS, end_of_data)
    if at >= 0:
        text_tail = body[at + len(_WARNINGS) - 1 :].decode("utf-8", "replace")
        warnings = json.JSONDecoder().raw_decode(text_tail)[0]
    timestamps = start + step * np.arange(points, dtype=np.float64)
    return Matrix(labels, timestamps, values), warnings


def _matrix_from_payload(payload: Mapping[str, Any], start: float, step: float, points: int):
    result = (payload.get("data") or {}).get("result") or []
    rows = [np.asarray(r.get("values") or [], dtype=np.float64).reshape(-1, 2) for r in result]
    labels = [r["metric"] for r in result]
    return _grid(labels, rows, start, step, points), list(payload.get("warnings") or [])


def _grid(labels, rows, start: float, step: float, points: int) -> Matrix:
    values = np.full((len(rows), points), np.nan)
    for i, row in enumerate(rows):
        if len(row):
            column = np.rint((row[:, 0] - start) / step).astype(np.int64)
            keep = (column >= 0) & (column < points)
            values[i, column[keep]] = row[keep, 1]
    timestamps = start + step * np.arange(points, dtype=np.float64)
    return Matrix(labels, timestamps, values)


def join_matrices(
    parts: list[Matrix], offsets: list[int], start: float, step: float, points: int
) -> Matrix:
    """Range answers of time chunks (each starting ``offsets[i]`` points into the grid) and series
    batches as one matrix on the whole grid."""
    if len(parts) == 1 and parts[0].width == points:
        return parts[0]
    index: dict[tuple[tuple[str, str], ...], int] = {}
    labels: list[dict[str, str]] = []
    for part in parts:
        for series in part.labels:
            key = tuple(sorted(series.items()))
            if key not in index:
                index[key] = len(labels)
                labels.append(series)
    values = np.full((len(labels), points), np.nan)
    for part, offset in zip(parts, offsets, strict=True):
        rows = [index[tuple(sorted(s.items()))] for s in part.labels]
        width = part.width
        if rows:
            block = values[rows, offset : offset + width]
            values[rows, offset : offset + width] = np.where(
                np.isnan(part.values), block, part.values
            )
    return Matrix(labels, start + step * np.arange(points, dtype=np.float64), values)
