"""Secret references: how a cluster's settings name a secret without holding it
(docs/architecture.md#roles-and-security).

A setting never holds a credential, and never names an arbitrary environment variable, file or
program of the server. It may only *refer* to

- an environment variable whose name starts with :data:`ENV_PREFIX` (``GPUOBS_SECRET_PROM_TOKEN``),
  so ``DJANGO_SECRET_KEY``, ``DATABASE_URL`` and the rest of the worker's environment are out of
  reach; or
- a file under the one secrets directory the deployment configures (:data:`DIR_ENV`, e.g.
  ``/run/secrets``), named relative to it; ``..``, absolute paths and symbolic links leading out
  of it are refused, so ``/proc/self/environ`` is out of reach.

Both are read when a cycle needs them (:func:`read_env`, :func:`read_file`), never stored, and
their errors name the reference, never the value. The deployment, not a database row, decides
the directory (an environment variable read here, at the edge, without Django).

A secret sent to a URL is bound to its use: the deployment declares, in :data:`BINDINGS_ENV`,
which integration (and host) may receive each reference, e.g.
``GPUOBS_SECRET_BINDINGS="GPUOBS_SECRET_PROM_TOKEN=prometheus@prom.example:9090,
file:slurm-jwt=slurm@slurmrestd.example"``. A reference read for a :class:`Use` it is not bound
to (another integration, another host, or no binding at all) is refused, so an admin cannot point
a cluster's settings at a URL of their own and have a secret sent there.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ENV_PREFIX = "GPUOBS_SECRET_"
DIR_ENV = "GPUOBS_SECRETS_DIR"
ENV_NAME = re.compile(rf"{ENV_PREFIX}[A-Z0-9_]+")
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
MAX_SECRET_BYTES = 64 * 1024
BINDINGS_ENV = "GPUOBS_SECRET_BINDINGS"
_BINDING = re.compile(
    r"(?P<ref>GPUOBS_SECRET_[A-Z0-9_]+|file:[A-Za-z0-9][A-Za-z0-9._/-]*)="
    r"(?P<integration>[a-z0-9_-]+)(?:@(?P<host>[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?)?\Z"
)


class SecretError(ValueError):
    """A reference that is not allowed, or a secret that cannot be read (names the reference)."""


@dataclass(frozen=True)
class Use:
    """Where a secret is about to go: the integration's id (``prometheus``, ``slurm``) and the
    URL it is sent to."""

    integration: str
    url: str


def bindings() -> dict[str, tuple[str, str | None, int | None]]:
    """The deployment's bindings (:data:`BINDINGS_ENV`): reference -> (integration, host, port);
    an entry that does not parse is :class:`SecretError` naming it."""
    found: dict[str, tuple[str, str | None, int | None]] = {}
    for entry in re.split(r"[,\s]+", os.environ.get(BINDINGS_ENV, "").strip()):
        if not entry:
            continue
        match = _BINDING.match(entry)
        if match is None:
            raise SecretError(
                f"{BINDINGS_ENV}: {entry[:80]!r} is not REFERENCE=integration[@host[:port]]"
            )
        port = match.group("port")
        host = match.group("host")
        found[match.group("ref")] = (
            match.group("integration"),
            host.lower() if host else None,
            int(port) if port else None,
        )
    return found


def check_use(reference: str, use: Use) -> None:
    """Refuse (:class:`SecretError`) to send ``reference`` for ``use`` unless the deployment
    bound it to that integration (and host)."""
    bound = bindings().get(reference)
    target = urlsplit(use.url)
    host = (target.hostname or "").lower()
    if bound is None:
        raise SecretError(
            f"{reference} is bound to no integration: the deployment declares it in "
            f"{BINDINGS_ENV} (e.g. {reference}={use.integration}@{host or 'HOST'})"
        )
    integration, bound_host, bound_port = bound
    if integration != use.integration:
        raise SecretError(f"{reference} is bound to {integration}, not {use.integration}")
    port = target.port or {"http": 80, "https": 443}.get(target.scheme)
    if bound_host is not None and (
        host != bound_host or (bound_port is not None and port != bound_port)
    ):
        where = bound_host + (f":{bound_port}" if bound_port else "")
        raise SecretError(f"{reference} may be sent to {where} only, not to this URL's host")


def check_env_reference(name: str) -> str:
    """``name`` when it is an allowed environment variable reference, else :class:`SecretError`."""
    if not ENV_NAME.fullmatch(name):
        raise SecretError(
            f"must name an environment variable starting with {ENV_PREFIX} "
            f"(upper case, digits, _), got {name!r}"
        )
    return name


def secrets_dir() -> Path | None:
    """The deployment's secrets directory (``GPUOBS_SECRETS_DIR``), or None when unset."""
    value = os.environ.get(DIR_ENV, "").strip()
    return Path(value) if value else None


def check_file_reference(name: str) -> str:
    """``name`` when it is a relative path inside the secrets directory, else SecretError."""
    if not FILE_NAME.fullmatch(name) or any(part in (".", "..") for part in name.split("/")):
        raise SecretError(
            f"must name a file relative to the secrets directory ({DIR_ENV}), "
            f"without '..' or a leading '/', got {name!r}"
        )
    return name


def resolve_file(name: str) -> Path:
    """The real path of secret file ``name``; refuses anything outside the secrets directory."""
    check_file_reference(name)
    base = secrets_dir()
    if base is None:
        raise SecretError(f"{name!r}: no secrets directory is configured ({DIR_ENV})")
    root = base.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        raise SecretError(f"{name!r} leads outside the secrets directory")
    return path


def read_env(name: str, use: Use | None = None) -> str:
    """The value of secret environment variable ``name`` (refused unless prefixed; must be set),
    for ``use`` when it is sent to a URL a cluster's settings name (refused unless bound to it,
    :func:`check_use`). A deployment's ``*_ENV`` setting (``GPUOBS_ALERTMANAGER_TOKEN_ENV``,
    whose URL is a deployment setting too) is read without one: it names a ``GPUOBS_SECRET_*``
    variable, never ``DJANGO_SECRET_KEY``."""
    check_env_reference(name)
    if use is not None:
        check_use(name, use)
    value = os.environ.get(name, "")
    if not value:
        raise SecretError(f"environment variable {name} is not set")
    return value


def read_file(name: str, use: Use | None = None) -> str:
    """The stripped text of secret file ``name`` under the secrets directory (for ``use``: only
    when ``file:<name>`` is bound to it)."""
    path = resolve_file(name)
    if use is not None:
        check_use(f"file:{name}", use)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise SecretError(f"cannot read secret file {name!r}: {exc.strerror}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise SecretError(f"secret file {name!r} is larger than {MAX_SECRET_BYTES} bytes")
    return data.decode("utf-8", errors="replace").strip()
