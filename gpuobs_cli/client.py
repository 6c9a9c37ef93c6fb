"""The REST API as the command line reads it: where it is, the token, and each answer turned
into data or an :class:`ApiError` carrying the exit code it means (docs/cli.md "Exit codes")."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import requests

OK, FAILED, REFUSED = 0, 1, 2  # the exit codes: done; the server or the network failed; refused
TIMEOUT_S = 30.0
PAGE_SIZE_LIMIT = 10_000  # a list stops after this many rows, however many pages the API has


class ApiError(Exception):
    """What went wrong, in one sentence, and the exit code it means."""

    def __init__(
        self, message: str, exit_code: int, *, status: int | None = None, body: Any = None
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.status = status
        self.body = body


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def config_path(environ: Mapping[str, str]) -> Path:
    """``$GPUOBS_CONFIG``, else ``$XDG_CONFIG_HOME/gpuobs/cli.toml`` (``~/.config`` by default)."""
    if environ.get("GPUOBS_CONFIG"):
        return Path(environ["GPUOBS_CONFIG"])
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuobs" / "cli.toml"


def load_settings(
    environ: Mapping[str, str], *, url: str | None = None, config: Path | None = None
) -> Settings:
    """The server and the token: ``--url``, then ``GPUOBS_URL`` / ``GPUOBS_TOKEN``, then the
    config file's ``url`` and ``token`` (or ``token_file``, a file holding only the token)."""
    path = config or config_path(environ)
    table: dict[str, Any] = {}
    if path.is_file():
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ApiError(f"cannot read the config file {path}: {exc}", REFUSED) from None
    elif config is not None:
        raise ApiError(f"no config file at {path}", REFUSED)
    token = environ.get("GPUOBS_TOKEN") or table.get("token") or ""
    if not token and table.get("token_file"):
        try:
            token = Path(str(table["token_file"])).expanduser().read_text().strip()
        except OSError as exc:
            raise ApiError(f"cannot read token_file: {exc}", REFUSED) from None
    base = url or environ.get("GPUOBS_URL") or table.get("url") or ""
    if not isinstance(base, str) or not base.startswith(("http://", "https://")):
        raise ApiError("say where gpuobs is: --url, GPUOBS_URL or `url` in " + str(path), REFUSED)
    if not isinstance(token, str) or not token:
        raise ApiError(
            f"no API token: set GPUOBS_TOKEN, or `token` / `token_file` in {path} "
            "(an admin makes one with `manage.py api_token`)",
            REFUSED,
        )
    return Settings(url=base.rstrip("/"), token=token.strip())


def segment(value: str | int) -> str:
    """A path segment from what a person typed: quoted whole (a ``/`` or ``..`` stays inside)."""
    return quote(str(value), safe="")


class Api:
    """``/api/v1/`` of one server, with one token (``Authorization: Token <key>``)."""

    def __init__(self, settings: Settings, session: requests.Session | None = None) -> None:
        self.base = f"{settings.url}/api/v1/"
        self.session = session or requests.Session()
        self.session.headers["Authorization"] = f"Token {settings.token}"
        self.session.headers["Accept"] = "application/json"

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.session.close()

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self._send("GET", self.base + path, params=params)

    def post(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        return self._send("POST", self.base + path, json=dict(body or {}))

    def rows(self, path: str, params: Mapping[str, Any] | None = None, limit: int = 0) -> list:
        """Every row of a list, page after page (``next``), at most ``limit`` (0: no limit)."""
        found: list[Any] = []
        for row in self._pages(path, params):
            found.append(row)
            if len(found) >= (limit or PAGE_SIZE_LIMIT):
                break
        return found

    def _pages(self, path: str, params: Mapping[str, Any] | None) -> Iterator[Any]:
        answer = self.get(path, params)
        while True:
            if isinstance(answer, list):
                yield from answer
                return
            if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
                raise ApiError("the server's answer is no list", FAILED, body=answer)
            yield from answer["results"]
            following = answer.get("next")
            if not following:
                return
            answer = self._send("GET", self._here(str(following)))

    def _here(self, url: str) -> str:
        """A link of the API's (``next``) on this server: its path and query, on the scheme and
        host the token was given for (a proxy may have named another; the token goes nowhere
        else)."""
        link, ours = urlsplit(url), urlsplit(self.base)
        return urlunsplit((ours.scheme, ours.netloc, link.path, link.query, ""))

    def _send(self, method: str, url: str, **kwargs: Any) -> Any:
        try:
            response = self.session.request(
                method, url, timeout=TIMEOUT_S, allow_redirects=False, **kwargs
            )
        except requests.RequestException as exc:
            raise ApiError(f"cannot reach {url}: {exc}", FAILED) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code < 300 and body is not None:
            return body
        raise _refusal(response.status_code, body)


def _refusal(status: int, body: Any) -> ApiError:
    """The API's error body (``{"detail", "errors"}``) as a message and its exit code: a 4xx
    other than 429 is the request's fault (2); a 429, a 5xx or an answer that is no JSON the
    server's or the network's (1, a retry may help)."""
    detail = body.get("detail") if isinstance(body, dict) else None
    if status < 300:
        return ApiError("the server's answer is no JSON", FAILED, status=status)
    if not detail:
        detail = f"the server answered HTTP {status} without an error body"
    code = REFUSED if 400 <= status < 500 and status != 429 else FAILED
    return ApiError(str(detail), code, status=status, body=body)
