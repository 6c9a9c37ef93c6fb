"""GET one JSON document from a scheduler's REST API, bounded: a timeout per request, a cap on
the bytes read (a hostile or broken server cannot fill the worker's memory), and errors in the
:class:`SchedulerError` words the cycle understands (transient for timeouts, refused
connections and 5xx; permanent for 4xx and answers that are not JSON objects).

Used by the YARN adapter and Slurm's slurmrestd transport.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import requests

from diagnosis.edge.errors import SchedulerError
from diagnosis.edge.request_id import outbound_headers

MAX_BYTES = 64 * 2**20
CHUNK = 1 << 16


def get_json(
    session: requests.Session,
    url: str,
    *,
    what: str,
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
    max_bytes: int = MAX_BYTES,
) -> dict[str, Any]:
    """The JSON object at ``url``; ``what`` names the service in errors (never the headers).
    A request carrying ``headers`` (credentials: slurmrestd's ``X-SLURM-USER-TOKEN``) follows no
    redirect: requests would forward such a header to wherever the redirect points (another
    port, another host), so a 3xx is an error naming where it pointed, and nothing is sent
    there. Without headers (YARN's standby ResourceManager) redirects are followed. The request
    id of the request or task being served goes too (``X-Request-ID``, docs/operations.md
    "Logs"): no credential, so it changes nothing about redirects."""
    try:
        response = session.get(
            url,
            headers={**outbound_headers(), **(headers or {})},
            params=params,
            timeout=timeout_s,
            stream=True,
            allow_redirects=not headers,
        )
    except requests.Timeout:
        raise SchedulerError(
            f"{what} did not answer within {timeout_s:g} s", permanent=False
        ) from None
    except requests.ConnectionError as exc:
        reason = type(exc).__name__
        raise SchedulerError(f"{what} is unreachable ({reason})", permanent=False) from None
    try:
        body = bytearray()
        try:
            for chunk in response.iter_content(CHUNK):
                body.extend(chunk)
                if len(body) > max_bytes:
                    raise SchedulerError(
                        f"{what} answered more than {max_bytes // 2**20} MiB", permanent=True
                    )
        except requests.RequestException:
            raise SchedulerError(f"{what} broke off its answer", permanent=False) from None
    finally:
        response.close()
    if response.is_redirect:
        raise SchedulerError(
            f"{what} answered a redirect (HTTP {response.status_code}), not followed: "
            "credentials are never sent on across a redirect",
            permanent=True,
        )
    if response.status_code != 200:
        snippet = bytes(body[:300]).decode("utf-8", errors="replace").strip()
        raise SchedulerError(
            f"{what} answered HTTP {response.status_code}" + (f": {snippet}" if snippet else ""),
            permanent=response.status_code < 500 and response.status_code != 429,
        )
    try:
        document = json.loads(bytes(body))
    except ValueError:
        raise SchedulerError(
            f"{what} answered something that is not JSON", permanent=True
        ) from None
    if not isinstance(document, dict):
        raise SchedulerError(f"{what} answered JSON that is not an object", permanent=True)
    return document
