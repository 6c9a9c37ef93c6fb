"""The Prometheus metrics source (DESIGN.md sections 3 and 9): dcgm-exporter metrics read from
Prometheus or a compatible server (Thanos, Mimir, VictoriaMetrics).

One collection sends a fixed set of server-side aggregated instant queries over the window, one
per metric family (:func:`family_queries`; at most three fallbacks when the answers leave GPUs
out), plus at most one range query for the few GPUs whose Xid gauge was non-zero; the number of
queries does not grow with the cluster. Responses are requested gzip-compressed and parsed
column-wise into numpy arrays. Every label value in a query goes through
:func:`diagnosis.edge.sources.prometheus.promql.quote`; label names come from an allowlist. Settings, queries,
mapping and behaviour on failure: docs/integrations.md, section "Prometheus".

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

import gc
import gzip
import io
import json
import math
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

import numpy as np
import orjson
import pandas as pd
import requests
from prometheus_api_client import PrometheusConnect
from urllib3 import exceptions as urllib3_exceptions
from urllib3.util.retry import Retry

from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.edge.sim import source as sim
from diagnosis.edge.sources import ClusterLike, CollectError, scheduler_only
from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.edge.sources.dcgm import stats as dcgm_stats
from diagnosis.edge.sources.prometheus.promql import (
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
    deadline_s: float = 120.0
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
            deadline_s=float(_number(raw, "deadline_s", prefix, 120.0, minimum=1, maximum=3600)),
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

_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off while answers are decoded: decoding makes 10^5
    small dicts, none of them in a cycle, and the collector's passes over them would otherwise
    cost more than the decoding (measured: 2.5x). Nested and concurrent uses are counted; the
    last one out turns it back on if it was on."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


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
        self.deadline = time.monotonic() + config.deadline_s
        self.aborted = threading.Event()

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

    def abort(self) -> None:
        """Make every request not yet answered fail at once (another query already failed)."""
        self.aborted.set()

    def _post(self, path: str, data: dict[str, str], family: str) -> tuple[bytes, int, int]:
        """The decoded body of a successful answer, its size on the wire and the attempts it
        took; or :class:`PrometheusError` once retries or the collection's deadline are spent
        (at once for a 4xx)."""
        url = self.config.url + path
        data = {**data, "timeout": f"{self.config.timeout_s:g}s"}
        attempts = self.config.retries + 1
        problem = ""
        for attempt in range(1, attempts + 1):
            remaining = self.deadline - time.monotonic()
            if self.aborted.is_set() or remaining <= 0:
                reason = "another query failed" if self.aborted.is_set() else "deadline passed"
                raise PrometheusError(
                    problem or f"the {family} query was not sent: {reason}",
                    permanent=False,
                )
            timeout = min(self.config.timeout_s, remaining)
            try:
                response = self.session.post(
                    url,
                    data=data,
                    headers=self.headers,
                    auth=self.auth,
                    timeout=timeout,
                    stream=True,
                )
                try:
                    wire = response.raw.read(decode_content=False)
                finally:
                    response.close()
            except (requests.Timeout, urllib3_exceptions.TimeoutError):
                problem = f"Prometheus at {self.config.url} did not answer within {timeout:g} s"
            except (requests.ConnectionError, urllib3_exceptions.HTTPError) as exc:
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
                pause = min(30.0, self.config.backoff_s * 2 ** (attempt - 1))
                self.sleep(max(0.0, min(pause, self.deadline - time.monotonic())))
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

K = dcgm.KEY_LABELS  # a GPU or one of its MIG instances
U = dcgm.UUID_LABELS  # a physical GPU
# The time of a series' latest sample: the instant selector finds it within the lookback
# (5 min); when none is that recent, the subquery finds older ones in the window (it costs as
# much as all the other families together at 16,384 GPUs, so it is the fallback;
# ``timestamp(last_over_time(...))`` would give the evaluation time instead).
LAST_SAMPLE = "timestamp({s})"
LAST_SAMPLE_IN_WINDOW = "timestamp({s}) or max_over_time(timestamp({s})[{w}:])"


def family_queries(
    selection: Selection, node_selection: Selection, window_s: float, *, fallback: bool = False
) -> dict[str, str]:
    """The instant queries of one collection, one per metric family (DESIGN.md section 3).

    Aggregation happens in Prometheus: a GPU's series split by changing pod labels are summed
    back together (means as sum over count, so they stay exact), and each answer carries one
    value per GPU (or MIG instance) and statistic, told apart by the ``stat`` and ``src`` labels.

    With ``fallback``, the ``inventory``, ``util`` and ``nvlink`` queries that are sent again
    when the first answers leave GPUs out: latest samples older than the lookback, and the
    fields of GPUs without profiling (``DCGM_FI_DEV_GPU_UTIL``,
    ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL``) beside the profiling ones.
    """
    w = duration(window_s)
    last = LAST_SAMPLE_IN_WINDOW if fallback else LAST_SAMPLE

    def over(template: str, metric: str) -> str:
        return selection.over(template.replace("{w}", w), metric)

    def total(metric: str, group: Sequence[str]) -> str:
        return f"sum {by(group)} ({over('sum_over_time({s}[{w}])', metric)})"

    def samples(metric: str, group: Sequence[str]) -> str:
        return f"sum {by(group)} ({over('count_over_time({s}[{w}])', metric)})"

    def mean(metric: str, group: Sequence[str]) -> str:
        return f"{total(metric, group)} / {samples(metric, group)}"

    def either(first: str, second: str, group: Sequence[str]) -> str:
        return f"({first}) or on ({', '.join(group)}) ({second})"

    def util(metric: str, src: str) -> str:
        return union(
            [
                tagged(mean(metric, K), stat="mean", src=src),
                tagged(
                    f"min {by(K)} ({over('quantile_over_time(0.1, {s}[{w}])', metric)})",
                    stat="p10",
                    src=src,
                ),
                tagged(
                    f"max {by(K)} ({over('quantile_over_time(0.9, {s}[{w}])', metric)})",
                    stat="p90",
                    src=src,
                ),
            ]
        )

    used, free = total(dcgm.FB_USED, U), total(dcgm.FB_FREE, U)
    reserved = f"({total(dcgm.FB_RESERVED, U)} or {free} * 0)"
    nvlink_rx = total(dcgm.NVLINK_RX_BYTES, U)
    nvlink_bytes = f"({nvlink_rx} + ({total(dcgm.NVLINK_TX_BYTES, U)} or {nvlink_rx} * 0))"
    nvlink = tagged(f"{nvlink_bytes} / {samples(dcgm.NVLINK_RX_BYTES, U)}", stat="mean", src="prof")
    return {
        "inventory": union(
            [
                tagged(
                    f"max {by(dcgm.INVENTORY_LABELS)} ({over(last, dcgm.GR_ENGINE_ACTIVE)}"
                    f" or {over(last, dcgm.GPU_UTIL)})",
                    stat="last",
                ),
                tagged(
                    f"max ({over('count_over_time({s}[{w}])', dcgm.GR_ENGINE_ACTIVE)} or "
                    f"{over('count_over_time({s}[{w}])', dcgm.GPU_UTIL)})",
                    stat="samples",
                ),
            ]
        ),
        "util": (
            either(util(dcgm.GR_ENGINE_ACTIVE, "prof"), util(dcgm.GPU_UTIL, "dev"), K)
            if fallback
            else util(dcgm.GR_ENGINE_ACTIVE, "prof")
        ),
        "tensor": tagged(mean(dcgm.TENSOR_ACTIVE, K), stat="mean"),
        "memory": tagged(f"{used} / ({used} + {free} + {reserved})", stat="frac"),
        "power": tagged(mean(dcgm.POWER_USAGE, U), stat="mean"),
        "temperature": tagged(
            f"max {by(U)} ({over('max_over_time({s}[{w}])', dcgm.GPU_TEMP)})", stat="max"
        ),
        "pcie": union(
            [
                tagged(mean(dcgm.PCIE_RX_BYTES, U), stat="mean", src="rx"),
                tagged(mean(dcgm.PCIE_TX_BYTES, U), stat="mean", src="tx"),
            ]
        ),
        "nvlink": (
            either(
                nvlink, tagged(mean(dcgm.NVLINK_BANDWIDTH_TOTAL, U), stat="mean", src="total"), U
            )
            if fallback
            else nvlink
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
        with paused_gc():
            return self._gpu_metrics(nodes, as_of, window_s, uuids=uuids, hosts=hosts)

    def _gpu_metrics(self, nodes, as_of, window_s, *, uuids, hosts) -> GpuMetrics:
        config = self.config
        window_s = float(window_s or config.window_s)
        report = SourceReport()
        selection = config.selection(hosts)
        node_selection = config.node_selection(hosts)
        queries = family_queries(selection, node_selection, window_s)
        with PrometheusClient(config, report, sleep=self.sleep) as client:
            with ThreadPoolExecutor(max_workers=config.parallel_queries) as pool:
                futures = {
                    pool.submit(client.instant, text, as_of, name): name
                    for name, text in queries.items()
                }
                vectors = {}
                try:
                    for future in as_completed(futures):
                        vectors[futures[future]] = future.result()
                except BaseException:
                    client.abort()  # the first failure fails the collection: stop the rest
                    raise
            answers = {name: (vector.labels, vector.values) for name, vector in vectors.items()}
            inventory = self._complete(client, answers, selection, node_selection, window_s, as_of)
            interval = config.scrape_interval_s or _estimate_interval(inventory.samples, window_s)
            matrix = self._xid_matrix(client, selection, vectors["xid"], as_of, window_s, interval)
        events = (
            dcgm_stats.xid_events(matrix.labels, matrix.timestamps, matrix.values, as_of - window_s)
            if matrix is not None
            else []
        )
        frame = dcgm_stats.statistics(answers, inventory, config.nvlink_total_unit_Bps)
        node_gpus = {n.name: n.gpus for n in nodes}
        placement = dcgm_stats.place(frame, inventory, events, node_gpus, uuids or {})
        stale_limit = config.max_data_age_s or (2 * interval if interval else None)
        down = {n.name for n in nodes if n.state == "down"}
        answered = sum(
            1
            for (node, _), seen in placement.last_seen.items()
            if node not in down and stale_limit is not None and as_of - seen <= stale_limit
        )
        hosts_of = dcgm.host_index(list(node_gpus))
        cpu = {
            node: value
            for host, value in _cpu(vectors["cpu"]).items()
            if (node := dcgm.node_for_host(host, hosts_of))
        }
        return GpuMetrics(
            gpus=[placement.gpus[key] for key in sorted(placement.gpus)],
            cpu_util=cpu,
            expected=sum(n.gpus for n in nodes if n.state != "down"),
            answered=answered,
            newest_sample=placement.newest,
            scrape_interval_s=interval,
            max_data_age_s=stale_limit,
            unmatched_gpus=placement.unmatched,
            util_sources=placement.util_sources,
            report=report.as_dict(),
        )

    def _complete(self, client, answers, selection, node_selection, window_s, as_of):
        """Send the fallback queries the first answers call for (see :func:`family_queries`),
        replace those answers, and return the inventory."""
        fallbacks = family_queries(selection, node_selection, window_s, fallback=True)
        inventory = dcgm_stats.inventory(answers["inventory"])
        if not inventory.last and inventory.samples:
            vector = client.instant(fallbacks["inventory"], as_of, "inventory-window")
            answers["inventory"] = (vector.labels, vector.values)
            inventory = dcgm_stats.inventory(answers["inventory"])
        keys = set(inventory.last)
        redo = []
        if keys - set(zip(*dcgm.keys_of(answers["util"][0]), strict=True)):
            redo.append("util")
        if {u for u, _ in keys} - set(dcgm.keys_of(answers["nvlink"][0])[0]):
            redo.append("nvlink")
        for name in redo:
            vector = client.instant(fallbacks[name], as_of, f"{name}-fallback")
            answers[name] = (vector.labels, vector.values)
        return inventory

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


def _estimate_interval(samples: float | None, window_s: float) -> float | None:
    """The scrape interval, from the most samples any GPU has in the window."""
    if not samples:
        return None
    return max(1.0, window_s / max(1.0, samples - 1.0))


def _cpu(vector: Vector) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in zip(vector.column("nodename"), vector.values, strict=True):
        if name and not math.isnan(value):
            out[name] = float(min(1.0, max(0.0, value)))
    return out


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
        "as_of": dcgm_stats.iso(at),
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
    if metrics.expected and (age is None or metrics.max_data_age_s is None):
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
    collect at, and what the adapter reported (its event cursor, the commands it ran)."""
    if cluster.scheduler_kind == "sim":
        return _sim_scheduler_part(cluster, previous_as_of=previous_as_of, now=now)

    document = scheduler_only.collect(cluster, previous_as_of=previous_as_of, now=now)
    reported = document.pop("collection", {})
    as_of = datetime.fromisoformat(document["as_of"].replace("Z", "+00:00"))
    return document, as_of, {k: v for k, v in reported.items() if k != "source"}


def _sim_scheduler_part(cluster, *, previous_as_of, now):
    """The simulator's own snapshot minus its GPU metrics (the demo with serve_exporter and a
    real Prometheus). Its clock must be real time (or explicit steps), or its times would not be
    Prometheus's."""

    config = cluster.scheduler_config or {}
    clock = config.get("clock", "wall")
    if clock != "step" and float(config.get("speed", sim_runtime.DEFAULT_SPEED)) != 1.0:
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
