"""Redis behind Sentinel for the broker, the result backend, the shared caches and the locks
(docs/operations.md, "Redis").

``REDIS_URL`` names the Sentinels in kombu's form, ``sentinel://[:PASSWORD@]HOST:PORT[/DB]``,
several joined by ``;`` (``sentinel://s1:26379;sentinel://s2:26379;sentinel://s3:26379/0``); the
monitored master is ``GPUOBS_REDIS_SENTINEL_MASTER`` (``mymaster``). The password, when given,
is the master's (``requirepass``), as kombu reads it. Every Redis client of gpuobs asks the
Sentinels for the current master and follows a failover:

- the Celery broker through kombu's Sentinel transport (``gpuobs.broker.SentinelTransport``)
  and the result backend through Celery's ``SentinelBackend``;
- Django's Redis caches (``throttle``, ``pages``) through :class:`SentinelPool`, their
  ``pool_class``;
- the locks, heartbeats and interval keys through :func:`master_client`.

No Django here: gpuobs/settings.py and diagnosis/actions/upkeep/health.py call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

SCHEME = "sentinel"
DEFAULT_PORT = 26379


def is_sentinel(url: str | None) -> bool:
    return bool(url) and url.split("://", 1)[0].lower() == SCHEME


@dataclass(frozen=True)
class SentinelAddress:
    sentinels: tuple[tuple[str, int], ...]
    db: int
    password: str | None


def parse(url: str) -> SentinelAddress:
    """The Sentinels, database and master password of a ``sentinel://`` URL (ValueError naming
    what is wrong, never the password)."""
    sentinels: list[tuple[str, int]] = []
    db, password = 0, None
    for part in url.split(";"):
        address = urlsplit(part.strip())
        if address.scheme.lower() != SCHEME or not address.hostname:
            raise ValueError("REDIS_URL: each ;-separated part must be sentinel://HOST[:PORT]")
        sentinels.append((address.hostname, address.port or DEFAULT_PORT))
        if address.password:
            password = unquote(address.password)
        path = address.path.strip("/")
        if path:
            if not path.isdigit():
                raise ValueError("REDIS_URL: the database after the last sentinel is a number")
            db = int(path)
    return SentinelAddress(tuple(sentinels), db, password)


def _sentinel(address: SentinelAddress, options: dict[str, Any]) -> Any:
    from redis.sentinel import Sentinel  # noqa: PLC0415 -- redis loads redis.asyncio (#35)

    timeouts = {k: options[k] for k in ("socket_timeout", "socket_connect_timeout") if k in options}
    return Sentinel(list(address.sentinels), sentinel_kwargs=timeouts)


def master_client(url: str, master: str, **options: Any) -> Any:
    """A ``redis.Redis`` talking to the current master of ``master`` (it asks the Sentinels
    again after a failover)."""
    address = parse(url)
    return _sentinel(address, options).master_for(
        master, db=address.db, password=address.password, **options
    )


class SentinelPool:
    """A connection-pool factory for Django's ``RedisCache`` (``OPTIONS["pool_class"]``): the
    cache calls ``from_url(LOCATION, **OPTIONS)``; ``master_name`` comes with the options."""

    @classmethod
    def from_url(cls, url: str, *, master_name: str, **options: Any) -> Any:
        from redis.sentinel import SentinelConnectionPool  # noqa: PLC0415 -- as above

        address = parse(url)
        return SentinelConnectionPool(
            master_name,
            _sentinel(address, options),
            db=address.db,
            password=address.password,
            **options,
        )
