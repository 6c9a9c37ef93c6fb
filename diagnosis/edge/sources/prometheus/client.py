"""Talking to one Prometheus: the HTTP session (TLS, auth, gzip), retries of transient failures
with backoff under the collection's deadline, the guards that split a range read so no query
asks too much, and the record of what each query cost.
"""

from __future__ import annotations

import math
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from urllib3 import exceptions as urllib3_exceptions
from urllib3.util.retry import Retry

from diagnosis.edge.request_id import outbound_headers
from diagnosis.edge.sources.prometheus.config import PrometheusConfig
from diagnosis.edge.sources.prometheus.wire import (
    Matrix,
    PrometheusError,
    Vector,
    envelope_error,
    join_matrices,
    parse_matrix,
    parse_vector,
)

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses query_range beyond this many points
MAX_SAMPLES = 25_000_000  # never ask one query for more (estimated) samples than this
USER_AGENT = "gpuobs-prometheus-source"
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# One answer may be at most this large on the wire; the decoded answers of one collection held
# at once (whatever the number of parallel queries) at most MAX_BODY_BYTES together: a gzip bomb,
# or four of them in parallel, stops there.
MAX_WIRE_BYTES = 64 * 1024 * 1024
MAX_BODY_BYTES = 256 * 1024 * 1024
READ_CHUNK = 1024 * 1024


class DecodeBudget:
    """The decoded bytes the answers of one collection may hold at once, shared by its parallel
    queries: an answer takes its size when decoded and gives it back once parsed."""

    def __init__(self, limit: int = MAX_BODY_BYTES) -> None:
        self.limit = limit
        self.held = 0
        self.lock = threading.Lock()

    def room(self) -> int:
        with self.lock:
            return max(0, self.limit - self.held)

    def take(self, size: int) -> None:
        with self.lock:
            if self.held + size > self.limit:
                raise _too_large(self.limit, "decoded, with the collection's other answers")
            self.held += size

    def give(self, size: int) -> None:
        with self.lock:
            self.held = max(0, self.held - size)


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
        custom = config.custom_headers()
        self.session = requests.Session()
        self.session.verify = config.ca_bundle()
        self.session.cert = config.client_cert()
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
        self.headers = {
            **custom,
            **headers,
            **outbound_headers(),
            "Accept-Encoding": "gzip",
            "User-Agent": USER_AGENT,
        }
        self.auth = auth
        self.deadline = time.monotonic() + config.deadline_s
        self.aborted = threading.Event()
        self.budget = DecodeBudget()

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
        try:
            vector, warnings = parse_vector(body)
        finally:
            self.budget.give(len(body))
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
        return join_matrices(parts, offsets, start, step, total_points)

    def _range_once(self, text: str, start: float, step: float, points: int, family: str):
        started = time.perf_counter()
        end = start + (points - 1) * step
        params = {"query": text, "start": _ts(start), "end": _ts(end), "step": _ts(step)}
        body, wire, attempts = self._post("/api/v1/query_range", params, family)
        try:
            matrix, warnings = parse_matrix(body, start, step, points)
        finally:
            self.budget.give(len(body))
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
                    # given per request: requests lets REQUESTS_CA_BUNDLE override the session's
                    verify=self.session.verify,
                )
                try:
                    wire = _read_capped(response.raw, MAX_WIRE_BYTES)
                finally:
                    response.close()
            except (requests.Timeout, urllib3_exceptions.TimeoutError):
                problem = f"Prometheus at {self.config.url} did not answer within {timeout:g} s"
            except (requests.ConnectionError, urllib3_exceptions.HTTPError) as exc:
                problem = f"Prometheus at {self.config.url} is unreachable: {_reason(exc)}"
            else:
                encoding = response.headers.get("Content-Encoding", "")
                body = _decode(wire, encoding, budget=self.budget)
                if response.status_code == 200:
                    return body, len(wire), attempt  # the caller gives its size back
                self.budget.give(len(body))
                error_type, error = envelope_error(body)
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


def _too_large(limit: int, what: str) -> PrometheusError:
    return PrometheusError(
        f"Prometheus's answer is larger than {limit // (1024 * 1024)} MiB {what}; "
        "narrow the matchers or shard the cluster",
        permanent=True,
    )


def _read_capped(raw: Any, limit: int) -> bytes:
    """The answer's bytes as sent (still compressed), refusing more than ``limit``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = raw.read(READ_CHUNK, decode_content=False)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise _too_large(limit, "on the wire")
        chunks.append(chunk)


def _decode(
    wire: bytes, encoding: str, limit: int = MAX_BODY_BYTES, *, budget: DecodeBudget | None = None
) -> bytes:
    """The decoded body, refusing one that inflates beyond ``limit`` or beyond what is left of
    the collection's ``budget`` (without inflating it); with a budget, the body's size is taken
    from it (the caller gives it back)."""
    shared = budget is not None and budget.room() < limit
    if budget is not None:
        limit = min(limit, budget.room())
    body = _inflate(wire, encoding, limit)
    if len(body) > limit:
        if shared:
            raise _too_large(budget.limit, "decoded, with the collection's other answers")
        raise _too_large(limit, "decoded")
    if budget is not None:
        budget.take(len(body))
    return body


def _inflate(wire: bytes, encoding: str, limit: int) -> bytes:
    """The body as sent, or inflated to at most ``limit + 1`` bytes (more: too large)."""
    if "gzip" in encoding:
        wbits = 16 + zlib.MAX_WBITS
    elif "deflate" in encoding:
        wbits = zlib.MAX_WBITS
    else:
        return wire
    inflater = zlib.decompressobj(wbits)
    try:
        body = inflater.decompress(wire, limit + 1)
    except zlib.error as exc:
        raise PrometheusError(f"Prometheus's answer is not valid {encoding}: {exc}") from None
    return body  # limit + 1 bytes when more was left (decompress stops there)
