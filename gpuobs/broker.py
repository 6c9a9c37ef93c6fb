"""The Redis broker transport gpuobs uses: kombu's, made to survive a broker restart.

kombu's Redis channel builds its connection pool lazily from its transport's ``client`` (the
``kombu.Connection``). When the worker loses the broker, kombu detaches the transport from the
closed connection (``transport.client = None``) and then closes the channels, restoring their
unacknowledged messages; a channel whose pool had been dropped (its first ``PING`` failed while
Redis was down, or it was forked) rebuilds it in ``_connparams`` from that ``None`` and raises
``AttributeError("'NoneType' object has no attribute 'hostname'")`` -- an "Unrecoverable error"
that ends the worker (issue #18, kombu 5.7.0; the same trace upstream: celery/kombu#582 "Error
on restarting Gossip", and celery/kombu#970 for unacked messages restored at close).

:class:`RedisTransport` keeps each channel's connection settings from when it was opened and
builds the pool from them when the transport has been detached, so the messages are restored
and the consumer reconnects; :class:`SentinelTransport` does the same behind Redis Sentinel.
Selected by ``CELERY_BROKER_TRANSPORT`` (gpuobs/settings.py).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class _KeepsItsConnection:
    """Mixed into a kombu Redis channel: remembers the ``kombu.Connection`` it was opened with."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._opened_with = args[0].client if args else None  # the kombu.Connection
        super().__init__(*args, **kwargs)

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None and self._opened_with is not None:
            # Detached by a lost connection: restore unacked messages with the settings this
            # channel was opened with (the transport object is the closed connection's own).
            self.connection.client = self._opened_with
        return super()._connparams(asynchronous=asynchronous)


class RedisChannel(_KeepsItsConnection, kombu_redis.Channel):
    pass


class RedisTransport(kombu_redis.Transport):
    Channel = RedisChannel


class SentinelChannel(_KeepsItsConnection, kombu_redis.SentinelChannel):
    pass


class SentinelTransport(kombu_redis.SentinelTransport):
    """The same, for a broker behind Redis Sentinel (``REDIS_URL=sentinel://...``,
    gpuobs/redis_sentinel.py)."""

    Channel = SentinelChannel
