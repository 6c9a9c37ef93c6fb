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
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ENV_PREFIX = "GPUOBS_SECRET_"
DIR_ENV = "GPUOBS_SECRETS_DIR"
ENV_NAME = re.compile(rf"{ENV_PREFIX}[A-Z0-9_]+")
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
MAX_SECRET_BYTES = 64 * 1024


class SecretError(ValueError):
    """A reference that is not allowed, or a secret that cannot be read (names the reference)."""


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


def read_env(name: str) -> str:
    """The value of secret environment variable ``name`` (refused unless prefixed; must be set).
    A deployment's ``*_ENV`` setting (``GPUOBS_ALERTMANAGER_TOKEN_ENV``) is read through this
    too: it names a ``GPUOBS_SECRET_*`` variable, never ``DJANGO_SECRET_KEY``."""
    check_env_reference(name)
    value = os.environ.get(name, "")
    if not value:
        raise SecretError(f"environment variable {name} is not set")
    return value


def read_file(name: str) -> str:
    """The stripped text of secret file ``name`` under the secrets directory."""
    path = resolve_file(name)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise SecretError(f"cannot read secret file {name!r}: {exc.strerror}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise SecretError(f"secret file {name!r} is larger than {MAX_SECRET_BYTES} bytes")
    return data.decode("utf-8", errors="replace").strip()
