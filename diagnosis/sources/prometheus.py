"""The Prometheus metrics source (DESIGN.md sections 3 and 9): dcgm-exporter metrics read from
Prometheus or a compatible server (Thanos, Mimir, VictoriaMetrics).

One collection sends a fixed set of server-side aggregated instant queries over the window, one
per metric family (:data:`FAMILIES`), plus at most one range query for the few GPUs whose Xid
gauge was non-zero; the number of queries does not grow with the cluster. Responses are
requested gzip-compressed and parsed column-wise into numpy arrays. Every label value in a query
goes through :func:`diagnosis.sources.promql.quote`; label names come from an allowlist.

A cluster's ``metrics_config`` (parsed by :meth:`PrometheusConfig.parse`; every error names its
field)::

    {"url": "https://prometheus.example.org",
     "matchers": {"cluster": "a100-east"},      # extra label matchers on every series
     "host_label": "auto",                      # or "Hostname" / "hostname"
     "timeout_s": 30, "retries": 2, "backoff_s": 0.5,
     "verify_tls": true, "ca_file": "/etc/ssl/prom-ca.pem",
     "bearer_token_env": "PROM_TOKEN",          # or "bearer_token_file", or basic auth:
     "username": "gpuobs", "password_env": "PROM_PASSWORD",
     "window_s": 900, "scrape_interval_s": 15, "min_coverage": 0.95,
     "shard_min_gpus": 4096}

Secrets never sit in the config: it names the environment variable (or file) holding them.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from diagnosis.sources import ClusterLike, CollectError, dcgm
from diagnosis.sources.promql import (
    ALLOWED_LABELS,
    LABEL_NAME,
    Matcher,
    PromQLError,
    Selection,
    by,
    duration,
    matchers_from_mapping,
    tagged,
    union,
)

DEFAULT_WINDOW_S = 900
MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses query_range beyond this many points
MAX_SAMPLES = 25_000_000  # never ask one query for more (estimated) samples than this
MIN_COVERAGE = 0.95
USER_AGENT = "gpuobs-prometheus-source"
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


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


class ConfigError(CollectError):
    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


# -- configuration -------------------------------------------------------------------------------


def _number(raw: Mapping[str, Any], key: str, prefix: str, default: float | None, **limits):
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigError(f"{prefix}.{key}: expected a number, got {value!r}")
    low, high = limits.get("minimum"), limits.get("maximum")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(f"{prefix}.{key}: must lie in [{low}, {high}], got {value!r}")
    return value


def _text(raw: Mapping[str, Any], key: str, prefix: str) -> str | None:
    value = raw.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{prefix}.{key}: expected a string, got {value!r}")
    return value


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    matchers: tuple[tuple[str, str], ...] = ()
    extra_label_names: frozenset[str] = frozenset()
    host_label: str = "auto"
    timeout_s: float = 30.0
    retries: int = 2
    backoff_s: float = 0.5
    verify_tls: bool = True
    ca_file: str | None = None
    bearer_token_env: str | None = None
    bearer_token_file: str | None = None
    username: str | None = None
    password_env: str | None = None
    window_s: int = DEFAULT_WINDOW_S
    scrape_interval_s: float | None = None
    max_data_age_s: float | None = None
    min_coverage: float = MIN_COVERAGE
    parallel_queries: int = 4
    shard_min_gpus: int = 4096
    nvlink_total_unit_Bps: float = 1e6

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, prefix: str = "metrics_config"):
        """The typed settings, or :class:`ConfigError` naming the bad field."""
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{prefix}: expected an object with at least 'url'")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"{prefix}: unknown setting(s) {', '.join(unknown)}")
        url = _text(raw, "url", prefix)
        if url is None:
            raise ConfigError(f"{prefix}.url: required (e.g. http://prometheus:9090)")
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{prefix}.url: expected an http(s) URL, got {url!r}")
        extra = raw.get("extra_label_names") or []
        if not isinstance(extra, list) or not all(
            isinstance(n, str) and LABEL_NAME.fullmatch(n) for n in extra
        ):
            raise ConfigError(f"{prefix}.extra_label_names: expected a list of label names")
        matchers = raw.get("matchers") or {}
        if not isinstance(matchers, Mapping) or not all(
            isinstance(v, str) for v in matchers.values()
        ):
            raise ConfigError(f"{prefix}.matchers: expected an object of label -> value")
        for name in matchers:
            if name not in ALLOWED_LABELS and name not in extra:
                raise ConfigError(
                    f"{prefix}.matchers: label {name!r} is not on the allowlist; add it to "
                    "extra_label_names"
                )
        host_label = raw.get("host_label", "auto")
        if host_label not in ("auto", *dcgm.HOST_LABELS):
            raise ConfigError(f"{prefix}.host_label: one of auto, Hostname, hostname")
        verify = raw.get("verify_tls", True)
        if not isinstance(verify, bool):
            raise ConfigError(f"{prefix}.verify_tls: expected true or false")
        config = cls(
            url=url.rstrip("/"),
            matchers=tuple(sorted(matchers.items())),
            extra_label_names=frozenset(extra),
            host_label=host_label,
            timeout_s=float(_number(raw, "timeout_s", prefix, 30.0, minimum=0.1, maximum=600)),
            retries=int(_number(raw, "retries", prefix, 2, minimum=0, maximum=10)),
            backoff_s=float(_number(raw, "backoff_s", prefix, 0.5, minimum=0, maximum=60)),
            verify_tls=verify,
            ca_file=_text(raw, "ca_file", prefix),
            bearer_token_env=_text(raw, "bearer_token_env", prefix),
            bearer_token_file=_text(raw, "bearer_token_file", prefix),
            username=_text(raw, "username", prefix),
            password_env=_text(raw, "password_env", prefix),
            window_s=int(_number(raw, "window_s", prefix, DEFAULT_WINDOW_S, minimum=60)),
            scrape_interval_s=_number(raw, "scrape_interval_s", prefix, None, minimum=0.1),
            max_data_age_s=_number(raw, "max_data_age_s", prefix, None, minimum=1),
            min_coverage=float(
                _number(raw, "min_coverage", prefix, MIN_COVERAGE, minimum=0, maximum=1)
            ),
            parallel_queries=int(
                _number(raw, "parallel_queries", prefix, 4, minimum=1, maximum=16)
            ),
            shard_min_gpus=int(_number(raw, "shard_min_gpus", prefix, 4096, minimum=1)),
            nvlink_total_unit_Bps=float(
                _number(raw, "nvlink_total_unit_Bps", prefix, 1e6, minimum=0)
            ),
        )
        if config.ca_file is not None and not os.path.isfile(config.ca_file):
            raise ConfigError(f"{prefix}.ca_file: no such file {config.ca_file!r}")
        return config

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (what a shard task carries); no secrets are in it."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "matchers":
                value = dict(value)
            elif name == "extra_label_names":
                value = sorted(value)
            if value is not None:
                out[name] = value
        return out

    def auth(self) -> tuple[dict[str, str], tuple[str, str] | None]:
        """Headers and basic-auth pair, read from the environment or the token file now."""
        headers: dict[str, str] = {}
        token = None
        if self.bearer_token_env:
            token = os.environ.get(self.bearer_token_env)
            if not token:
                raise ConfigError(
                    f"metrics_config.bearer_token_env: environment variable "
                    f"{self.bearer_token_env} is not set"
                )
        elif self.bearer_token_file:
            try:
                with open(self.bearer_token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()
            except OSError as exc:
                raise ConfigError(
                    f"metrics_config.bearer_token_file: cannot read {self.bearer_token_file}: "
                    f"{exc.strerror}"
                ) from None
        if token:
            headers["Authorization"] = f"Bearer {token}"
            return headers, None
        if self.username:
            password = os.environ.get(self.password_env or "", "")
            if self.password_env and not password:
                raise ConfigError(
                    f"metrics_config.password_env: environment variable {self.password_env} "
                    "is not set"
                )
            return headers, (self.username, password)
        return headers, None

    def selection(self, hosts: Sequence[str] | None = None) -> Selection:
        """The series of this cluster (and, for a shard, of these hosts only)."""
        fixed = matchers_from_mapping(dict(self.matchers))
        if not hosts:
            return Selection(fixed, ((),), self.extra_label_names)
        labels = dcgm.HOST_LABELS if self.host_label == "auto" else (self.host_label,)
        alternatives = tuple((Matcher.any_of(label, hosts),) for label in labels)
        return Selection(fixed, alternatives, self.extra_label_names)

    def node_selection(self, hosts: Sequence[str] | None = None) -> Selection:
        fixed = matchers_from_mapping(dict(self.matchers))
        alternatives = ((Matcher.any_of("nodename", hosts),),) if hosts else ((),)
        return Selection(fixed, alternatives, self.extra_label_names)


# -- what one collection cost --------------------------------------------------------------------


@dataclass
class QueryRecord:
    family: str
    kind: str  # instant | range
    seconds: float
    wire_bytes: int
    bytes: int
    series: int
    attempts: int


@dataclass
class SourceReport:
    """Queries sent, bytes received and warnings, for the cycle's ``source`` record."""

    queries: list[QueryRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: QueryRecord, warnings: Iterable[str]) -> None:
        with self.lock:
            self.queries.append(record)
            for warning in warnings:
                if warning not in self.warnings:
                    self.warnings.append(str(warning))

    def as_dict(self) -> dict[str, Any]:
        families: dict[str, dict[str, float]] = {}
        for q in self.queries:
            entry = families.setdefault(q.family, {"queries": 0, "bytes": 0, "series": 0})
            entry["queries"] += 1
            entry["bytes"] += q.bytes
            entry["series"] += q.series
        return {
            "queries": len(self.queries),
            "bytes": sum(q.bytes for q in self.queries),
            "wire_bytes": sum(q.wire_bytes for q in self.queries),
            "query_seconds": round(sum(q.seconds for q in self.queries), 4),
            "retries": sum(q.attempts - 1 for q in self.queries),
            "warnings": list(self.warnings),
            "families": families,
        }


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


@dataclass(frozen=True)
class Matrix:
    """A range result on its step grid: ``values[i, j]`` is series i at ``timestamps[j]`` (NaN
    where the series has no point)."""

    labels: list[dict[str, str]]
    timestamps: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


def _envelope_error(body: bytes) -> tuple[str, str]:
    try:
        payload = json.loads(body)
        return str(payload.get("errorType", "")), str(payload.get("error", ""))
    except (ValueError, AttributeError):
        return "", body[:200].decode("utf-8", "replace")


def parse_vector(body: bytes) -> tuple[Vector, list[str]]:
    """An instant-query response as a :class:`Vector` and its warnings."""
    try:
        payload = json.loads(body)
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


def parse_matrix(body: bytes, start: float, step: float, points: int) -> tuple[Matrix, list[str]]:
    """A range-query response parsed column-wise onto the grid ``start + k * step``.

    Series labels are decoded as JSON one series at a time; the samples of a series are turned
    into numbers in one pass (``[t,"v"],...`` stripped of brackets and quotes, read by numpy), so
    no Python object is made per sample. The byte patterns searched for cannot occur inside JSON
    strings (their quotes would be escaped there).
    """
    if not body.startswith(b'{"status":"success"'):
        if body.lstrip().startswith(b"{"):
            payload = json.loads(body)
            if payload.get("status") != "success":
                raise PrometheusError(f"Prometheus answered status {payload.get('status')!r}")
            return _matrix_from_payload(payload, start, step, points)
        raise PrometheusError("Prometheus answered something that is not JSON")
    if b'"resultType":"matrix"' not in body[:80]:
        raise PrometheusError("expected a range result (matrix)")
    labels: list[dict[str, str]] = []
    rows: list[np.ndarray] = []
    position = 0
    end_of_data = 0
    while True:
        begin = body.find(_SERIES, position)
        if begin < 0:
            break
        values_at = body.find(_VALUES, begin)
        labels.append(json.loads(body[begin + len(_SERIES) : values_at - 1]))
        first = values_at + len(_VALUES)
        if body[first : first + 1] == b"]":
            rows.append(np.empty((0, 2)))
            position = first
            continue
        last = body.find(b"]]", first)
        numbers = np.fromstring(body[first:last].translate(None, b'[]"').decode(), sep=",")
        rows.append(numbers.reshape(-1, 2))
        position = end_of_data = last + 2
    warnings: list[str] = []
    at = body.find(_WARNINGS, end_of_data)
    if at >= 0:
        text = body[at + len(_WARNINGS) - 1 :].decode("utf-8", "replace")
        warnings = json.JSONDecoder().raw_decode(text)[0]
    return _grid(labels, rows, start, step, points), warnings


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


# -- the guards ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RangePlan:
    """How to split one range read: time chunks ``(start, points)`` and series batches."""

    chunks: tuple[tuple[float, int], ...]
    series_batches: int

    @property
    def queries(self) -> int:
        return len(self.chunks) * self.series_batches


def plan_range(
    start: float,
    end: float,
    step: float,
    series: int,
    *,
    max_points: int = MAX_POINTS_PER_SERIES,
    max_samples: int = MAX_SAMPLES,
) -> RangePlan:
    """Split a range read so that no query asks more than ``max_points`` points per series or an
    estimated ``max_samples`` samples (``series`` × points)."""
    if step <= 0 or end < start:
        raise ValueError("need step > 0 and end >= start")
    points = math.floor((end - start) / step + 1e-9) + 1
    series = max(1, series)
    batches = max(1, math.ceil(series / max_samples))
    per_batch = math.ceil(series / batches)
    per_chunk = max(1, min(max_points, points, max_samples // per_batch))
    chunks = []
    for first in range(0, points, per_chunk):
        chunks.append((start + first * step, min(per_chunk, points - first)))
    return RangePlan(tuple(chunks), batches)


def batches_of(items: Sequence[str], count: int) -> list[list[str]]:
    size = math.ceil(len(items) / count) if items else 0
    return [list(items[i : i + size]) for i in range(0, len(items), size)] if size else [[]]


# -- the client ----------------------------------------------------------------------------------


class PrometheusClient:
    """Queries one Prometheus. The connection (session, TLS, headers, auth) is set up by
    prometheus-api-client's ``PrometheusConnect``; requests go through that session directly,
    because the library's query helpers drop the response's ``warnings`` and error body and
    decode samples one dict at a time. Retries (transient failures only, with exponential
    backoff) happen here and nowhere else.
    """

    def __init__(
        self,
        config: PrometheusConfig,
        report: SourceReport | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.report = report or SourceReport()
        self.sleep = sleep
        headers, auth = config.auth()
        self.session = requests.Session()
        self.session.verify = config.ca_file or config.verify_tls
        self.connection = PrometheusConnect(
            url=config.url,
            headers=headers,
            disable_ssl=not config.verify_tls,
            retry=Retry(total=0, raise_on_status=False),
            auth=auth,
            session=self.session,
            timeout=config.timeout_s,
            method="POST",
        )
        self.headers = {**headers, "Accept-Encoding": "gzip", "User-Agent": USER_AGENT}
        self.auth = auth

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def instant(self, expression: str, at: float, family: str) -> Vector:
        """An instant query evaluated at ``at`` (Unix seconds)."""
        started = time.perf_counter()
        body, wire, attempts = self._post(
            "/api/v1/query", {"query": expression, "time": _ts(at)}, family
        )
        vector, warnings = parse_vector(body)
        self.report.add(
            QueryRecord(
                family,
                "instant",
                time.perf_counter() - started,
                wire,
                len(body),
                len(vector),
                attempts,
            ),
            warnings,
        )
        return vector

    def range(
        self,
        expression: Callable[[Sequence[str]], str] | str,
        start: float,
        end: float,
        step: float,
        family: str,
        *,
        items: Sequence[str] = (),
        series_per_item: int = 1,
        max_points: int = MAX_POINTS_PER_SERIES,
        max_samples: int = MAX_SAMPLES,
    ) -> Matrix:
        """A range read on the grid ``start, start + step, ... <= end``, split so that no query
        exceeds the guards. ``expression`` is either the PromQL text, or a function building it
        for a batch of ``items`` (e.g. GPU UUIDs) when the series must be split too."""
        series = max(1, len(items) * series_per_item)
        plan = plan_range(start, end, step, series, max_points=max_points, max_samples=max_samples)
        batches = batches_of(list(items), plan.series_batches) if items else [[]]
        total_points = sum(points for _, points in plan.chunks)
        parts: list[Matrix] = []
        offsets: list[int] = []
        for batch in batches:
            text = expression(batch) if callable(expression) else expression
            offset = 0
            for chunk_start, points in plan.chunks:
                parts.append(self._range_once(text, chunk_start, step, points, family))
                offsets.append(offset)
                offset += points
        return _join(parts, offsets, start, step, total_points)

    def _range_once(self, text: str, start: float, step: float, points: int, family: str):
        started = time.perf_counter()
        end = start + (points - 1) * step
        params = {"query": text, "start": _ts(start), "end": _ts(end), "step": _ts(step)}
        body, wire, attempts = self._post("/api/v1/query_range", params, family)
        matrix, warnings = parse_matrix(body, start, step, points)
        self.report.add(
            QueryRecord(
                family,
                "range",
                time.perf_counter() - started,
                wire,
                len(body),
                len(matrix),
                attempts,
            ),
            warnings,
        )
        return matrix

    def _post(self, path: str, data: dict[str, str], family: str) -> tuple[bytes, int, int]:
        """The decoded body of a successful answer, its size on the wire and the attempts it
        took; or :class:`PrometheusError` once retries are spent (or at once for a 4xx)."""
        url = self.config.url + path
        data = {**data, "timeout": f"{self.config.timeout_s:g}s"}
        attempts = self.config.retries + 1
        problem = ""
        for attempt in range(1, attempts + 1):
            try:
                response = self.session.post(
                    url,
                    data=data,
                    headers=self.headers,
                    auth=self.auth,
                    timeout=self.config.timeout_s,
                    stream=True,
                )
                try:
                    wire = response.raw.read(decode_content=False)
                finally:
                    response.close()
            except requests.Timeout:
                problem = (
                    f"Prometheus at {self.config.url} did not answer within "
                    f"{self.config.timeout_s:g} s"
                )
            except requests.ConnectionError as exc:
                problem = f"Prometheus at {self.config.url} is unreachable: {_reason(exc)}"
            else:
                body = _decode(wire, response.headers.get("Content-Encoding", ""))
                if response.status_code == 200:
                    return body, len(wire), attempt
                error_type, error = _envelope_error(body)
                problem = (
                    f"Prometheus answered HTTP {response.status_code} to the {family} query"
                    + (f" ({error_type}: {error})" if error_type or error else "")
                )
                if response.status_code not in RETRY_STATUS:
                    raise PrometheusError(
                        problem, permanent=True, status=response.status_code, error_type=error_type
                    )
            if attempt < attempts:
                self.sleep(min(30.0, self.config.backoff_s * 2 ** (attempt - 1)))
        raise PrometheusError(f"{problem} (after {attempts} attempt{'s' * (attempts > 1)})")


def _ts(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "No route to host"):
        if marker in text:
            return marker
    return text[:200]


def _decode(wire: bytes, encoding: str) -> bytes:
    if "gzip" in encoding:
        return gzip.decompress(wire)
    if "deflate" in encoding:
        return zlib.decompress(wire)
    return wire


def _join(parts: list[Matrix], offsets: list[int], start: float, step: float, points: int):
    if len(parts) == 1 and parts[0].values.shape[1] == points:
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
        width = part.values.shape[1]
        if rows:
            block = values[rows, offset : offset + width]
            values[rows, offset : offset + width] = np.where(
                np.isnan(part.values), block, part.values
            )
    return Matrix(labels, start + step * np.arange(points, dtype=np.float64), values)


# -- the metric families -------------------------------------------------------------------------

K = dcgm.KEY_LABELS
# The time of a series' latest sample in the window: the instant selector finds it within the
# lookback (5 min); the subquery, older ones (``timestamp(last_over_time(...))`` would give the
# evaluation time instead).
LAST_SAMPLE = "timestamp({s}) or max_over_time(timestamp({s})[{w}:])"


def _stat(template: str, selection: Selection, metric: str, window: str, group: str) -> str:
    inner = selection.over(template.replace("{w}", window), metric)
    return f"{group} {by(K)} ({inner})"


def _means(selection: Selection, metric: str, window: str, **tags: str) -> list[str]:
    return [
        tagged(
            _stat("sum_over_time({s}[{w}])", selection, metric, window, "sum"), stat="sum", **tags
        ),
        tagged(
            _stat("count_over_time({s}[{w}])", selection, metric, window, "sum"),
            stat="count",
            **tags,
        ),
    ]


def family_queries(
    selection: Selection, node_selection: Selection, window_s: float
) -> dict[str, str]:
    """The instant queries of one collection, one per metric family (DESIGN.md section 3)."""
    w = duration(window_s)
    key_match = f"on ({', '.join(K)})"

    def over(template: str, metric: str) -> str:
        return selection.over(template.replace("{w}", w), metric)

    inventory = union(
        [
            tagged(
                f"sum {by(dcgm.INVENTORY_LABELS)} ("
                f"{over('count_over_time({s}[{w}])', dcgm.GR_ENGINE_ACTIVE)} or "
                f"{over('count_over_time({s}[{w}])', dcgm.GPU_UTIL)})",
                stat="count",
            ),
            tagged(
                f"max {by(dcgm.INVENTORY_LABELS)} ("
                f"{over(LAST_SAMPLE, dcgm.GR_ENGINE_ACTIVE)} or "
                f"{over(LAST_SAMPLE, dcgm.GPU_UTIL)})",
                stat="last",
            ),
        ]
    )

    def util_parts(metric: str, src: str) -> str:
        return union(
            [
                *_means(selection, metric, w, src=src),
                tagged(
                    _stat("quantile_over_time(0.1, {s}[{w}])", selection, metric, w, "min"),
                    stat="p10",
                    src=src,
                ),
                tagged(
                    _stat("quantile_over_time(0.9, {s}[{w}])", selection, metric, w, "max"),
                    stat="p90",
                    src=src,
                ),
            ]
        )

    def fallback(primary: str, secondary: str) -> str:
        return f"({primary}) or {key_match} ({secondary})"

    queries = {
        "inventory": inventory,
        "util": fallback(
            util_parts(dcgm.GR_ENGINE_ACTIVE, "prof"), util_parts(dcgm.GPU_UTIL, "dev")
        ),
        "tensor": union(_means(selection, dcgm.TENSOR_ACTIVE, w)),
        "memory": union(
            [
                tagged(
                    _stat("sum_over_time({s}[{w}])", selection, metric, w, "sum"),
                    stat="sum",
                    src=src,
                )
                for metric, src in (
                    (dcgm.FB_USED, "used"),
                    (dcgm.FB_FREE, "free"),
                    (dcgm.FB_RESERVED, "reserved"),
                )
            ]
        ),
        "power": union(_means(selection, dcgm.POWER_USAGE, w)),
        "temperature": tagged(
            _stat("max_over_time({s}[{w}])", selection, dcgm.GPU_TEMP, w, "max"), stat="max"
        ),
        "pcie": union(
            [
                *_means(selection, dcgm.PCIE_RX_BYTES, w, src="rx"),
                tagged(
                    _stat("sum_over_time({s}[{w}])", selection, dcgm.PCIE_TX_BYTES, w, "sum"),
                    stat="sum",
                    src="tx",
                ),
            ]
        ),
        "nvlink": fallback(
            union(
                [
                    *_means(selection, dcgm.NVLINK_RX_BYTES, w, src="rx"),
                    tagged(
                        _stat("sum_over_time({s}[{w}])", selection, dcgm.NVLINK_TX_BYTES, w, "sum"),
                        stat="sum",
                        src="tx",
                    ),
                ]
            ),
            union(_means(selection, dcgm.NVLINK_BANDWIDTH_TOTAL, w, src="total")),
        ),
        "xid": union(
            [
                tagged(
                    f"max {by((*K, 'err_code'))} ("
                    f"{over('max_over_time({s}[{w}])', dcgm.XID_ERRORS)}) > 0",
                    stat="max",
                    src="gauge",
                ),
                tagged(
                    f"max {by((*K, 'xid'))} ("
                    f"{over('max_over_time({s}[{w}])', dcgm.XID_ERRORS_COUNT)}) > 0",
                    stat="max",
                    src="count",
                ),
            ]
        ),
        "cpu": (
            f"(1 - avg by (instance) ("
            f"{_node_over(selection, 'rate({s}[{w}])'.replace('{w}', w))})) "
            f"* on (instance) group_left (nodename) max by (instance, nodename) ("
            f"{node_selection.over('{s}', 'node_uname_info')})"
        ),
    }
    return queries


def _node_over(selection: Selection, template: str) -> str:
    fixed = Selection(selection.matchers, ((),), selection.extra_label_names)
    return fixed.over(template, "node_cpu_seconds_total", (Matcher.equal("mode", "idle"),))


def xid_range_query(selection: Selection, uuids: Sequence[str]) -> str:
    """The Xid gauge and the exporter's Xid counter of a few GPUs, for finding when each Xid
    appeared."""
    alternatives = tuple((Matcher.any_of(label, uuids),) for label in dcgm.UUID_LABELS)
    narrowed = replace(
        selection,
        alternatives=tuple(
            (*alt, *uuid_alt) for alt in selection.alternatives for uuid_alt in alternatives
        ),
    )
    return union(
        [
            tagged(
                f"max {by((*K, 'err_code'))} ({narrowed.over('{s}', dcgm.XID_ERRORS)})", src="gauge"
            ),
            tagged(
                f"max {by((*K, 'xid'))} ({narrowed.over('{s}', dcgm.XID_ERRORS_COUNT)})",
                src="count",
            ),
        ]
    )


# -- from responses to per-GPU statistics --------------------------------------------------------


def _frame(vector: Vector, extra: Sequence[str] = ()) -> pd.DataFrame:
    """A stats response as columns uuid, instance, stat, src (and ``extra`` labels), value."""
    frame = pd.DataFrame(
        {
            "uuid": [dcgm.uuid_of(m) for m in vector.labels],
            "instance": [dcgm.instance_of(m) for m in vector.labels],
            "stat": vector.column("stat"),
            "src": vector.column("src"),
            **{name: vector.column(name) for name in extra},
            "value": vector.values,
        }
    )
    return frame[frame["uuid"] != ""]


def _wide(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (uuid, instance), one column per ``<src>_<stat>``."""
    if frame.empty:
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=["uuid", "instance"]))
    frame = frame.assign(column=frame["src"].where(frame["src"] != "", "v") + "_" + frame["stat"])
    return frame.pivot_table(
        index=["uuid", "instance"], columns="column", values="value", aggfunc="max"
    )


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    if name in frame:
        return frame[name].astype("float64")
    return pd.Series(np.nan, index=frame.index, dtype="float64")


def _ratio(numerator: pd.Series, denominator: pd.Series) -> pd.Series:
    return numerator / denominator.where(denominator > 0)


def instance_statistics(
    vectors: Mapping[str, Vector], nvlink_total_unit_Bps: float = 1e6
) -> pd.DataFrame:
    """Per (uuid, MIG instance): the snapshot's statistics and where util came from."""
    util = _wide(_frame(vectors["util"]))
    stats = pd.DataFrame(index=util.index)
    has_prof = _col(util, "prof_count").notna()
    scale = pd.Series(np.where(has_prof, 1.0, 0.01), index=util.index)
    pick = {
        stat: _col(util, f"prof_{stat}").where(has_prof, _col(util, f"dev_{stat}"))
        for stat in ("sum", "count", "p10", "p90")
    }
    stats["util_mean"] = _ratio(pick["sum"], pick["count"]) * scale
    stats["util_p10"] = pick["p10"] * scale
    stats["util_p90"] = pick["p90"] * scale
    stats["util_src"] = np.where(has_prof, "prof", np.where(pick["count"].notna(), "dev", ""))

    def join(name: str, frame: pd.DataFrame) -> None:
        nonlocal stats
        stats = stats.join(frame.rename(columns=lambda c: f"{name}:{c}"), how="outer")

    for family in ("tensor", "memory", "power", "temperature", "pcie", "nvlink"):
        join(family, _wide(_frame(vectors[family])))
    stats["tensor_active_mean"] = _ratio(_col(stats, "tensor:v_sum"), _col(stats, "tensor:v_count"))
    used = _col(stats, "memory:used_sum")
    total = used + _col(stats, "memory:free_sum") + _col(stats, "memory:reserved_sum").fillna(0)
    stats["fb_used"] = used
    stats["fb_total"] = total
    stats["fb_used_frac_mean"] = _ratio(used, total)
    stats["power_w_mean"] = _ratio(_col(stats, "power:v_sum"), _col(stats, "power:v_count"))
    stats["temp_c_max"] = _col(stats, "temperature:v_max")
    pcie_count = _col(stats, "pcie:rx_count")
    stats["pcie_rx_Bps_mean"] = _ratio(_col(stats, "pcie:rx_sum"), pcie_count)
    stats["pcie_tx_Bps_mean"] = _ratio(_col(stats, "pcie:tx_sum"), pcie_count)
    prof_nvlink = _ratio(
        _col(stats, "nvlink:rx_sum") + _col(stats, "nvlink:tx_sum").fillna(0),
        _col(stats, "nvlink:rx_count"),
    )
    total_nvlink = (
        _ratio(_col(stats, "nvlink:total_sum"), _col(stats, "nvlink:total_count"))
        * nvlink_total_unit_Bps
    )
    stats["nvlink_Bps_mean"] = prof_nvlink.where(prof_nvlink.notna(), total_nvlink)
    keep = [c for c in stats.columns if ":" not in c]
    stats = stats[keep]
    stats["util_src"] = stats["util_src"].fillna("")
    return stats


FRACTIONS = ("util_mean", "util_p10", "util_p90", "tensor_active_mean", "fb_used_frac_mean")
WEIGHTED = ("util_mean", "util_p10", "util_p90", "tensor_active_mean")
PHYSICAL = ("power_w_mean", "temp_c_max", "pcie_rx_Bps_mean", "pcie_tx_Bps_mean", "nvlink_Bps_mean")


def physical_statistics(stats: pd.DataFrame, identity: pd.DataFrame) -> pd.DataFrame:
    """Per physical GPU (uuid): whole-GPU series as they are; MIG instances combined — activity
    weighted by each instance's share of the GPU (``3g.40gb`` = 3/7), memory summed, device-wide
    quantities (power, temperature, PCIe, NVLink) taken once (their max)."""
    stats = stats.join(identity[["mig_profile", "model"]], how="left")
    instance = stats.index.get_level_values("instance")
    whole = stats[instance == ""].droplevel("instance")
    mig = stats[instance != ""]
    if mig.empty:
        return whole.drop(columns=["mig_profile", "model", "fb_used", "fb_total"])
    share = np.array(
        [
            dcgm.mig_share(p or "", m or "")
            for p, m in zip(mig["mig_profile"], mig["model"], strict=True)
        ]
    )
    uuids = mig.index.get_level_values("uuid")
    combined = pd.DataFrame(index=pd.Index(sorted(set(uuids)), name="uuid"))
    for column in WEIGHTED:
        weighted = (mig[column] * share).groupby(uuids).sum(min_count=1)
        combined[column] = weighted.clip(upper=1.0)
    used = mig["fb_used"].groupby(uuids).sum(min_count=1)
    total = mig["fb_total"].groupby(uuids).sum(min_count=1)
    combined["fb_used_frac_mean"] = _ratio(used, total)
    for column in PHYSICAL:
        combined[column] = mig[column].groupby(uuids).max()
    sources = mig["util_src"].groupby(uuids).agg(lambda s: "prof" if "prof" in set(s) else max(s))
    combined["util_src"] = sources
    whole = whole.drop(columns=["mig_profile", "model", "fb_used", "fb_total"])
    return whole.combine_first(combined)


def inventory_identity(vector: Vector) -> pd.DataFrame:
    """Per (uuid, instance): host, gpu index, model, MIG profile, workload, samples in the window
    and the time of the latest sample, from the inventory response. When a GPU's series split
    (its pod labels changed), counts add up and the latest series names the workload."""
    rows = []
    for labels, stat, value in zip(
        vector.labels, vector.column("stat"), vector.values, strict=True
    ):
        ident = dcgm.normalize(labels)
        if not ident.uuid:
            continue
        rows.append(
            (
                ident.uuid,
                ident.instance,
                ident.host,
                ident.gpu,
                ident.model,
                ident.mig_profile,
                ident.workload.as_text(),
                ident.workload.hpc_job,
                stat,
                value,
            )
        )
    columns = [
        "uuid",
        "instance",
        "host",
        "gpu",
        "model",
        "mig_profile",
        "workload",
        "hpc_job",
        "stat",
        "value",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    if frame.empty:
        empty = pd.DataFrame(columns=[*columns[2:8], "count", "last"])
        empty.index = pd.MultiIndex.from_tuples([], names=["uuid", "instance"])
        return empty
    series = frame.pivot_table(
        index=columns[:8], columns="stat", values="value", aggfunc="max", dropna=False
    ).reset_index()
    series.columns.name = None
    for stat in ("count", "last"):
        if stat not in series:
            series[stat] = np.nan
    series = series[series["count"].notna() | series["last"].notna()]
    series = series.sort_values("last", na_position="first")
    grouped = series.groupby(["uuid", "instance"], sort=False)
    identity = grouped[columns[2:8]].last()
    identity["count"] = grouped["count"].sum(min_count=1)
    identity["last"] = grouped["last"].max()
    return identity


@dataclass(frozen=True)
class XidEvent:
    uuid: str
    code: int
    time: float


def xid_events(matrix: Matrix, window_start: float) -> list[XidEvent]:
    """Xids that appeared in the window: the gauge changed to a non-zero value (or a non-zero
    series began) inside it; the exporter's counter grew (or began above zero) inside it. The
    code is the ``err_code`` (gauge) or ``xid`` (counter) label when present, else the value."""
    events: dict[tuple[str, int], float] = {}
    inside = matrix.timestamps >= window_start - 1e-6
    for labels, row in zip(matrix.labels, matrix.values, strict=True):
        uuid = dcgm.uuid_of(labels)
        seen = ~np.isnan(row)
        if not uuid or not seen.any():
            continue
        values = row[seen]
        times = matrix.timestamps[seen]
        in_window = inside[seen]
        previous = np.concatenate([[np.nan], values[:-1]])
        if labels.get("src") == "count":
            started = np.isnan(previous) & (values > 0)
            grew = values > previous
            hits = in_window & (started | grew)
            label = labels.get("xid", "")
        else:
            started = np.isnan(previous) & (values != 0)
            changed = (values != previous) & (values != 0) & ~np.isnan(previous)
            hits = in_window & (started | changed)
            label = labels.get("err_code", "")
        for value, moment in zip(values[hits], times[hits], strict=True):
            code = int(label) if label.isdigit() and int(label) > 0 else int(value)
            if code <= 0 or (labels.get("src") == "count" and not label.isdigit()):
                continue
            key = (uuid, code)
            events[key] = min(events.get(key, math.inf), float(moment))
    return [XidEvent(u, c, t) for (u, c), t in sorted(events.items(), key=lambda kv: kv[1])]


# -- one collection ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeInventory:
    """What the scheduler says the metrics should cover."""

    name: str
    gpus: int
    state: str = "ready"


@dataclass
class GpuMetrics:
    """The GPU part of a snapshot, and how complete it is."""

    gpus: list[dict[str, Any]]
    cpu_util: dict[str, float]
    expected: int
    answered: int
    newest_sample: float | None
    scrape_interval_s: float | None
    max_data_age_s: float | None
    unmatched_gpus: int
    util_sources: dict[str, int]
    report: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpus": self.gpus,
            "cpu_util": self.cpu_util,
            "expected": self.expected,
            "answered": self.answered,
            "newest_sample": self.newest_sample,
            "scrape_interval_s": self.scrape_interval_s,
            "max_data_age_s": self.max_data_age_s,
            "unmatched_gpus": self.unmatched_gpus,
            "util_sources": self.util_sources,
            "report": self.report,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuMetrics:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


class PrometheusSource:
    """Reads the per-GPU window statistics of a set of nodes from Prometheus."""

    def __init__(
        self, config: PrometheusConfig, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.config = config
        self.sleep = sleep

    def gpu_metrics(
        self,
        nodes: Sequence[NodeInventory],
        as_of: float,
        window_s: float | None = None,
        *,
        uuids: Mapping[str, tuple[str, int]] | None = None,
        hosts: Sequence[str] | None = None,
    ) -> GpuMetrics:
        """Statistics of every GPU of ``nodes`` over ``[as_of - window_s, as_of]``.

        ``uuids`` (GPU UUID -> (node, index)), when the scheduler knows them, place series
        exactly; otherwise the host label and the ``gpu`` index do. ``hosts`` narrows the queries
        to those hosts (a shard).
        """
        config = self.config
        window_s = float(window_s or config.window_s)
        report = SourceReport()
        selection = config.selection(hosts)
        node_selection = config.node_selection(hosts)
        queries = family_queries(selection, node_selection, window_s)
        with PrometheusClient(config, report, sleep=self.sleep) as client:
            with ThreadPoolExecutor(max_workers=config.parallel_queries) as pool:
                futures = {
                    name: pool.submit(client.instant, text, as_of, name)
                    for name, text in queries.items()
                }
                vectors = {name: future.result() for name, future in futures.items()}
            identity = inventory_identity(vectors["inventory"])
            interval = config.scrape_interval_s or _estimate_interval(identity, window_s)
            xid_matrix = self._xid_matrix(
                client, selection, vectors["xid"], as_of, window_s, interval
            )
        stats = instance_statistics(vectors, config.nvlink_total_unit_Bps)
        physical = physical_statistics(stats, identity) if len(stats) else stats
        stale_limit = config.max_data_age_s or (2 * interval if interval else None)
        return _assemble(
            nodes,
            identity,
            physical,
            xid_events(xid_matrix, as_of - window_s) if xid_matrix is not None else [],
            _cpu(vectors["cpu"]),
            uuids=uuids or {},
            as_of=as_of,
            interval=interval,
            stale_limit=stale_limit,
            report=report.as_dict(),
        )

    def _xid_matrix(self, client, selection, vector: Vector, as_of, window_s, interval):
        candidates = sorted({dcgm.uuid_of(labels) for labels in vector.labels} - {""})
        if not candidates:
            return None
        step = max(1.0, float(interval or 15.0))
        start = as_of - window_s - step
        return client.range(
            lambda batch: xid_range_query(selection, batch),
            start,
            as_of,
            step,
            "xid-detail",
            items=candidates,
            series_per_item=2,
        )


def _estimate_interval(identity: pd.DataFrame, window_s: float) -> float | None:
    """The scrape interval, from the most samples any GPU has in the window."""
    if identity.empty or identity["count"].isna().all():
        return None
    most = float(identity["count"].max())
    return max(1.0, window_s / max(1.0, most - 1.0))


def _cpu(vector: Vector) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in zip(vector.column("nodename"), vector.values, strict=True):
        if name and not math.isnan(value):
            out[name] = float(min(1.0, max(0.0, value)))
    return out


def _round(metric: str, value: float) -> float | int:
    if metric in ("pcie_rx_Bps", "pcie_tx_Bps", "nvlink_Bps"):
        return round(value)
    if metric in ("power_w", "temp_c"):
        return round(value, 3)
    return round(min(1.0, max(0.0, value)), 6)


def _assemble(
    nodes: Sequence[NodeInventory],
    identity: pd.DataFrame,
    physical: pd.DataFrame,
    xids: list[XidEvent],
    cpu: dict[str, float],
    *,
    uuids: Mapping[str, tuple[str, int]],
    as_of: float,
    interval: float | None,
    stale_limit: float | None,
    report: dict[str, Any],
) -> GpuMetrics:
    gpu_counts = {n.name: n.gpus for n in nodes}
    hosts = dcgm.host_index(list(gpu_counts))
    whole = identity.sort_values("last", na_position="first").groupby(level="uuid").last()
    last = identity.groupby(level="uuid")["last"].max()
    # A MIG GPU's instances may each serve a workload: name them all.
    named = identity.groupby(level="uuid")[["workload", "hpc_job"]].agg(
        lambda values: ", ".join(sorted({v for v in values if v}))
    )
    by_uuid_xids: dict[str, list[dict[str, Any]]] = {}
    for event in xids:
        by_uuid_xids.setdefault(event.uuid, []).append(
            {"code": event.code, "time": _iso(event.time)}
        )
    metric_columns = [c for c in physical.columns if c != "util_src"]
    placed: dict[tuple[str, int], dict[str, Any]] = {}
    last_seen: dict[tuple[str, int], float] = {}
    unmatched = 0
    sources: dict[str, int] = {}
    newest: float | None = None
    all_uuids = sorted(set(whole.index) | set(physical.index))
    for uuid in all_uuids:
        where = uuids.get(uuid)
        info = whole.loc[uuid] if uuid in whole.index else None
        if where is None and info is not None:
            node = dcgm.node_for_host(info["host"], hosts)
            gpu = info["gpu"]
            if node is not None and gpu is not None and not pd.isna(gpu):
                where = (node, int(gpu))
        if where is None or where[1] >= gpu_counts.get(where[0], 0) or where in placed:
            unmatched += 1
            continue
        entry: dict[str, Any] = {"node": where[0], "index": where[1], "uuid": uuid}
        if uuid in physical.index:
            row = physical.loc[uuid]
            for column in metric_columns:
                value = row[column]
                if value is None or pd.isna(value):
                    continue
                metric, stat = column.rsplit("_", 1)
                entry.setdefault(metric, {})[stat] = _round(metric, float(value))
            source = row.get("util_src") or ""
            if source:
                sources[source] = sources.get(source, 0) + 1
        if uuid in by_uuid_xids:
            entry["xid"] = by_uuid_xids[uuid]
        if uuid in named.index:
            for key in ("workload", "hpc_job"):
                if named.at[uuid, key]:
                    entry[key] = named.at[uuid, key]
        seen = last.get(uuid)
        if seen is not None and not pd.isna(seen):
            last_seen[where] = float(seen)
            newest = float(seen) if newest is None else max(newest, float(seen))
        placed[where] = entry
    expected = sum(n.gpus for n in nodes if n.state != "down")
    down = {n.name for n in nodes if n.state == "down"}
    answered = sum(
        1
        for (node, _), seen in last_seen.items()
        if node not in down and (stale_limit is None or as_of - seen <= stale_limit)
    )
    return GpuMetrics(
        gpus=[placed[key] for key in sorted(placed)],
        cpu_util={
            n: v for n, v in ((dcgm.node_for_host(h, hosts), v) for h, v in cpu.items()) if n
        },
        expected=expected,
        answered=answered,
        newest_sample=newest,
        scrape_interval_s=interval,
        max_data_age_s=stale_limit,
        unmatched_gpus=unmatched,
        util_sources=sources,
        report=report,
    )


def _iso(seconds: float) -> str:
    moment = datetime.fromtimestamp(round(seconds, 3), UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond // 1000:03d}".rstrip("0")
    return text + "Z"


# -- shards --------------------------------------------------------------------------------------

ShardRunner = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


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
            elif key == "families":
                for family, figures in value.items():
                    into = report["families"].setdefault(family, {})
                    for name, number in figures.items():
                        into[name] = into.get(name, 0) + number
            else:
                report[key] = report.get(key, 0) + value
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
    )


# -- the snapshot --------------------------------------------------------------------------------

SNAPSHOT_FORMAT = "gpuobs.snapshot/v1"
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
        (g["node"], g["index"]): g
        for g in scheduler.get("gpus") or []
        if isinstance(g, Mapping) and "node" in g and "index" in g
    }
    uuids = {g["uuid"]: key for key, g in known.items() if g.get("uuid")}
    at = as_of.timestamp()
    payloads = shard_payloads(config, nodes, uuids, at, window_s)
    runner = shard_runner if shard_runner is not None and len(payloads) > 1 else run_shards_here
    metrics = merge_shards(runner(payloads))

    gpus = []
    reported = {(g["node"], g["index"]): g for g in metrics.gpus}
    for key in sorted(set(reported) | set(known)):
        entry = dict(reported.get(key) or {"node": key[0], "index": key[1]})
        given = known.get(key) or {}
        if given.get("uuid") and "uuid" not in entry:
            entry["uuid"] = given["uuid"]
        entry["health"] = given.get("health", "ok")
        gpus.append(entry)
    node_list = []
    for node in nodes:
        node = dict(node)
        if node["name"] in metrics.cpu_util:
            node["cpu_util"] = round(metrics.cpu_util[node["name"]], 6)
        node_list.append(node)

    document: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        "cluster": scheduler.get("cluster") or "cluster",
        "as_of": _iso(at),
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
    if metrics.expected and age is None:
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
    collect at, and what to remember (the event cursor)."""
    if cluster.scheduler_kind == "sim":
        return _sim_scheduler_part(cluster, previous_as_of=previous_as_of, now=now)
    from diagnosis.schedulers.base import SchedulerError, adapter_for

    at = (now or datetime.now(UTC)).replace(microsecond=0)
    cursor = getattr(cluster, "event_cursor", "") or None
    try:
        adapter = adapter_for(cluster.scheduler_kind, cluster.scheduler_config or {})
        state = adapter.read_state()
        batch = adapter.read_events(cursor)
    except SchedulerError as exc:
        raise CollectError(f"scheduler: {exc}", permanent=exc.permanent) from exc
    part = {
        "cluster": cluster.name,
        "scheduler": dict(state.scheduler),
        "nodes": list(state.nodes),
        "queues": list(state.queues),
        "jobs": list(state.jobs),
        "events": list(batch.events),
    }
    return part, at, {"event_cursor": batch.cursor}


def _sim_scheduler_part(cluster, *, previous_as_of, now):
    """The simulator's own snapshot minus its GPU metrics (the demo with serve_exporter and a
    real Prometheus). Its clock must be real time (or explicit steps), or its times would not be
    Prometheus's."""
    from diagnosis.sources import sim

    config = cluster.scheduler_config or {}
    clock = config.get("clock", "wall")
    if clock != "step" and float(config.get("speed", sim.DEFAULT_SPEED)) != 1.0:
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
    as_of = datetime.fromisoformat(document["as_of"].replace("Z", "+00:00"))
    return document, as_of, {}


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
        raise ConfigError(str(exc)) from exc
    document["cluster"] = cluster.name
    document["collection"].update(remember)
    return document


collect.shards = True  # type: ignore[attr-defined]  # run_cluster_cycle passes a shard runner
