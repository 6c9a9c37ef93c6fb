"""Read many PostgreSQL timestamps with psycopg's C loader (issue #17).

Django registers a Python ``timestamptz`` loader on every psycopg connection (so that the
datetimes carry the timezone it wants) and checks it on every cursor; it costs ~4 us a value,
and a 16,384-GPU cycle reads ~80,000 of them. Where the session's timezone is UTC and Django
wants UTC-aware datetimes (``USE_TZ``, no per-database ``TIME_ZONE``), psycopg's own loader
returns exactly those (``datetime.timezone.utc``), ~13x faster. :func:`fast_rows` runs one query
on a cursor of its own with that loader; everything else keeps Django's.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import QuerySet


def fast_rows(rows: QuerySet) -> list[tuple[Any, ...]]:
    """The tuples of a ``values_list()`` queryset whose columns need no Django converter (ints,
    text, timestamps): on PostgreSQL read with psycopg's own timestamp loader, else as Django
    reads them."""
    connection = connections[rows.db]
    if connection.vendor != "postgresql" or not settings.USE_TZ:
        return list(rows)
    if connection.timezone_name != "UTC":
        return list(rows)
    from psycopg.types.datetime import TimestamptzLoader  # noqa: PLC0415 -- PostgreSQL only

    sql, params = rows.query.sql_with_params()
    with connection.cursor() as cursor:
        raw = cursor.cursor
        raw.adapters.register_loader("timestamptz", TimestamptzLoader)  # this cursor only
        cursor.execute(sql, params)
        return [tuple(row) for row in cursor.fetchall()]
