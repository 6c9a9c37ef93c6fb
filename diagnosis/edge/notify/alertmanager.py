"""Alertmanager's v2 API, outbound: ``POST /api/v2/alerts`` (the v1 API is gone since 0.27).

The shape is Alertmanager's ``postableAlerts`` (``api/v2/openapi.yaml`` of
prometheus/alertmanager): a JSON array of ``{labels, annotations, startsAt, endsAt,
generatorURL}``, labels required, every label and annotation value a string. Alertmanager answers
200 with an empty body, 400 with a message for a malformed alert.

Retries with backoff happen here and nowhere else: a refused connection, a timeout, 429 or 5xx
is retried ``retries`` times waiting ``backoff_s × 2^n`` (at most 30 s); a 4xx is permanent. No
Django: the caller passes the URL, the credentials it read from the environment and the alerts.

An Alertmanager cluster in high availability wants every alert from every client (its members
gossip silences and the notification log, not alerts): :func:`post_to_each` posts the same alerts
to each URL in a thread of its own, so a dead member's retries hold up no live one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests

from diagnosis.edge.errors import IntegrationError

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MAX_PAUSE_S = 30.0


class NotifyError(IntegrationError):
    """Alertmanager could not be reached, or refused the alerts (``attempts``: requests made)."""

    attempts: int = 1


def rfc3339(moment: datetime) -> str:
    """A UTC time as Alertmanager's ``date-time`` (RFC 3339, ``Z``)."""
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class PostableAlert:
    """One alert as Alertmanager's v2 API takes it."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    generator_url: str = ""

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "labels": {k: str(v) for k, v in self.labels.items() if v not in (None, "")},
            "annotations": {k: str(v) for k, v in self.annotations.items() if v not in (None, "")},
        }
        if self.starts_at is not None:
            body["startsAt"] = rfc3339(self.starts_at)
        if self.ends_at is not None:
            body["endsAt"] = rfc3339(self.ends_at)
        if self.generator_url:
            body["generatorURL"] = self.generator_url
        return body


@dataclass(frozen=True)
class AlertmanagerTarget:
    """Where and how to post: base URL (``http://alertmanager:9093``) and optional credentials."""

    url: str
    bearer_token: str | None = None
    basic_auth: tuple[str, str] | None = None
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.5
    verify_tls: bool = True
    request_id: str = ""  # of the request or task that sends, as X-Request-ID (its logs' id)


@dataclass(frozen=True)
class Delivery:
    """What a post did: alerts sent, attempts made (1 + retries used)."""

    alerts: int
    attempts: int


def post_alerts(
    target: AlertmanagerTarget,
    alerts: Sequence[PostableAlert],
    *,
    session: requests.Session | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Delivery:
    """Post ``alerts`` in one request; :class:`NotifyError` (``permanent`` for a 4xx) if they
    could not be delivered after the retries."""
    if not alerts:
        return Delivery(alerts=0, attempts=0)
    http = session or requests.Session()
    headers = {"Content-Type": "application/json"}
    if target.bearer_token:
        headers["Authorization"] = f"Bearer {target.bearer_token}"
    if target.request_id:
        headers["X-Request-ID"] = target.request_id
    url = target.url.rstrip("/") + "/api/v2/alerts"
    body = [alert.as_json() for alert in alerts]
    attempt = 0
    while True:
        attempt += 1
        try:
            response = http.post(
                url,
                json=body,
                headers=headers,
                auth=target.basic_auth,
                timeout=target.timeout_s,
                verify=target.verify_tls,
            )
        except requests.RequestException as exc:
            problem, permanent = f"Alertmanager at {target.url} is unreachable: {exc}", False
        else:
            if response.status_code == 200:
                return Delivery(alerts=len(body), attempts=attempt)
            text = response.text.strip()[:300]
            problem = f"Alertmanager at {target.url} answered {response.status_code}: {text}"
            permanent = response.status_code not in RETRYABLE_STATUS
        if permanent or attempt > target.retries:
            error = NotifyError(f"{problem} (after {attempt} attempts)", permanent=permanent)
            error.attempts = attempt
            raise error
        sleep(min(MAX_PAUSE_S, target.backoff_s * 2 ** (attempt - 1)))


@dataclass(frozen=True)
class Outcome:
    """What posting to one of several Alertmanagers did: its delivery, or the error it ended in."""

    url: str
    delivery: Delivery | None = None
    error: NotifyError | None = None

    @property
    def attempts(self) -> int:
        if self.delivery is not None:
            return self.delivery.attempts
        return self.error.attempts if self.error is not None else 0


def post_to_each(
    targets: Sequence[AlertmanagerTarget],
    alerts: Sequence[PostableAlert],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Outcome]:
    """Post ``alerts`` to every target at once (a thread each, its own retries); one
    :class:`Outcome` per target, in their order. Never raises :class:`NotifyError`."""

    def one(target: AlertmanagerTarget) -> Outcome:
        try:
            return Outcome(target.url, delivery=post_alerts(target, alerts, sleep=sleep))
        except NotifyError as exc:
            return Outcome(target.url, error=exc)

    if len(targets) <= 1:
        return [one(target) for target in targets]
    with ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="alertmanager") as pool:
        return list(pool.map(one, targets))
