"""Write many rows from plain column values, without a model instance per row (issue #35).

A first cycle creates every finding, its history row and every job at once (13,000 findings and
20,000 jobs at 16,384 GPUs): through ``bulk_create`` most of its time went to building model
instances, Django's per-value preparation and psycopg's dumping of the statement's parameters.
Here the caller gives the columns and one tuple of database values per row (a JSON column's
value as the Python object); columns it leaves out get their field's default, as a model
instance would. On PostgreSQL the rows go through ``COPY`` (psycopg's C writer); an upsert
copies them into a temporary table first and runs one ``INSERT ... SELECT ... ON CONFLICT``
from it; rows the caller knows are new (:func:`insert_new_rows`) are copied straight into the
table with ids drawn from its sequence, no staging table nor conflict check. Elsewhere
(SQLite) the rows become model instances for ``bulk_create``, as before.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Field, Model

STAGING_TABLE = "gpuobs_bulk_rows"


def insert_rows(model: type[Model], columns: Sequence[str], rows: Sequence[tuple]) -> None:
    """Insert ``rows`` (values of ``columns``, attribute names such as ``cluster_id``)."""
    if not rows:
        return
    connection = connections[router.db_for_write(model)]
    if not _copies(connection):
        model.objects.bulk_create(_instances(model, columns, rows))
        return
    names, values = _full_rows(model, columns, rows)
    quoted = [_quoted(connection, _column(model, name)) for name in names]
    with connection.cursor() as cursor:
        _copy(cursor, _quoted(connection, model._meta.db_table), quoted, values)


def insert_new_rows(model: type[Model], columns: Sequence[str], rows: Sequence[tuple]) -> list[int]:
    """Insert ``rows``, none of them stored yet, and return their new ids in order: ascending
    with the rows, as :func:`upsert_rows` would give them. The caller knows that they are new
    (it read the stored ones, under a lock or ready to upsert them instead): on PostgreSQL the
    ids are drawn from the table's sequence in one statement and the rows COPYed with them
    straight into the table; a row stored after all fails on its unique constraint
    (``IntegrityError``), never updates it."""
    if not rows:
        return []
    connection = connections[router.db_for_write(model)]
    if not _copies(connection):
        objects = _instances(model, columns, rows)
        model.objects.bulk_create(objects)
        return [obj.pk for obj in objects]
    table = _quoted(connection, model._meta.db_table)
    pk = model._meta.pk.column
    with connection.cursor() as cursor:
        ids = _new_ids(cursor, table, pk, len(rows))
        names, values = _full_rows(model, columns, rows, lead=ids)
        quoted = [_quoted(connection, _column(model, name)) for name in names[1:]]
        _copy(cursor, table, [_quoted(connection, pk), *quoted], values)
    return ids


def _new_ids(cursor: Any, table: str, pk: str, count: int) -> list[int]:
    """``count`` ids drawn from the sequence of ``table``'s ``pk``, ascending, in one statement.
    The sequence is looked up once (a materialized CTE): ``pg_get_serial_sequence`` called in
    the drawing expression itself runs once per id (0.43 s for 160,000 jobs, against 0.10 s)."""
    cursor.execute(
        "WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence(%s, %s)::regclass AS seq) "
        "SELECT array_agg(nextval(s.seq)) FROM s, generate_series(1, %s)",
        [table, pk, count],
    )
    (ids,) = cursor.fetchone()
    return sorted(ids)


def upsert_rows(
    model: type[Model],
    columns: Sequence[str],
    rows: Sequence[tuple],
    *,
    unique: Sequence[str],
    update: Sequence[str],
    returning: Sequence[str] = (),
) -> list[tuple[Any, ...]]:
    """Insert ``rows``; a row that conflicts on the ``unique`` columns updates the stored one's
    ``update`` columns instead. Returns the ``returning`` columns of every row written (in no
    particular order on PostgreSQL: return a key with them). Rows are inserted in the order
    given (their new ids ascend with it)."""
    if not rows:
        return []
    connection = connections[router.db_for_write(model)]
    if not _copies(connection):
        objects = _instances(model, columns, rows)
        model.objects.bulk_create(
            objects,
            update_conflicts=True,
            unique_fields=[model._meta.get_field(name).name for name in unique],
            update_fields=[model._meta.get_field(name).name for name in update],
        )
        return [tuple(getattr(obj, name) for name in returning) for obj in objects]
    table = _quoted(connection, model._meta.db_table)
    names, values = _full_rows(model, columns, rows, lead=range(len(rows)))
    quoted = [_quoted(connection, _column(model, name)) for name in names[1:]]
    listed = ", ".join(quoted)
    conflict = ", ".join(_quoted(connection, _column(model, name)) for name in unique)
    changes = ", ".join(
        f"{column} = EXCLUDED.{column}"
        for column in (_quoted(connection, _column(model, name)) for name in update)
    )
    back = ", ".join(_quoted(connection, _column(model, name)) for name in returning)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMPORARY TABLE {STAGING_TABLE} ON COMMIT DROP AS "  # noqa: S608 - quoted names
            f"SELECT 0::bigint AS ordinal, {listed} FROM {table} WITH NO DATA"
        )
        _copy(cursor, STAGING_TABLE, ["ordinal", *quoted], values)
        cursor.execute(
            f"INSERT INTO {table} ({listed}) SELECT {listed} FROM {STAGING_TABLE} "  # noqa: S608 - quoted names
            f"ORDER BY ordinal ON CONFLICT ({conflict}) DO UPDATE SET {changes}"
            + (f" RETURNING {back}" if back else "")
        )
        written = [tuple(row) for row in cursor.fetchall()] if back else []
        cursor.execute(f"DROP TABLE {STAGING_TABLE}")
    return written


def _instances(model: type[Model], columns: Sequence[str], rows: Sequence[tuple]) -> list[Model]:
    return [model(**dict(zip(columns, row, strict=True))) for row in rows]


def _column(model: type[Model], name: str) -> str:
    return model._meta.get_field(name).column


def _quoted(connection: Any, name: str) -> str:
    return connection.ops.quote_name(name)


def _full_rows(
    model: type[Model],
    columns: Sequence[str],
    rows: Sequence[tuple],
    *,
    lead: Sequence[int] | None = None,
) -> tuple[list[str], Iterator[tuple]]:
    """Every concrete column but an automatic primary key (the left-out ones at their field's
    default, computed once for all rows), and the rows' values with JSON as text; with ``lead``
    each row led by its value there (its position in the staging table, or its id), named
    ``lead``. The values are made as the COPY sends them: PostgreSQL stores the rows sent
    while the JSON of the next ones is encoded (1.7 s of ``json.dumps`` for the 103,000 new
    findings of a first cycle at 131,072 GPUs, which the server's 3.3 s now hide)."""
    given = {model._meta.get_field(name).attname for name in columns}
    if len(given) != len(columns):
        raise ValueError(f"a column named twice in {list(columns)}")
    left_out = [
        field
        for field in model._meta.concrete_fields
        if field.attname not in given and not (field.primary_key and _automatic(field))
    ]
    defaults = tuple(_default(field) for field in left_out)
    names = [*columns, *(field.attname for field in left_out)]
    json_fields = [
        (i, field)
        for i, field in enumerate(model._meta.get_field(name) for name in columns)
        if _is_json(field)
    ]

    def values() -> Iterator[tuple]:
        for position, row in enumerate(rows):
            if json_fields:
                row = list(row)
                for i, json_field in json_fields:
                    row[i] = _json_text(json_field, row[i])
                row = tuple(row)
            yield (lead[position], *row, *defaults) if lead is not None else (*row, *defaults)

    return (["lead", *names] if lead is not None else names), values()


def _copy(cursor: Any, table: str, columns: Sequence[str], values: Iterable[tuple]) -> None:
    """COPY ``values`` into ``table``; logged as a query where Django logs them (DEBUG, a test's
    CaptureQueriesContext) and its errors raised as Django's (``IntegrityError``), which a COPY
    on the raw cursor would bypass."""
    sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
    started = time.monotonic()
    count = 0
    with cursor.db.wrap_database_errors, cursor.cursor.copy(sql) as copy:
        for row in values:
            copy.write_row(row)
            count += 1
    if cursor.db.queries_logged:
        cursor.db.queries_log.append(
            {"sql": f"{sql} -- {count} rows", "time": f"{time.monotonic() - started:.3f}"}
        )


def _automatic(field: Field) -> bool:
    return field.get_internal_type() in {"AutoField", "BigAutoField", "SmallAutoField"}


def _is_json(field: Field) -> bool:
    return field.get_internal_type() == "JSONField"


def _default(field: Field) -> Any:
    value = field.get_default()
    return _json_text(field, value) if _is_json(field) else value


def _json_text(field: Any, value: Any) -> str | None:
    """The text Django's JSONField sends for ``value`` (``json.dumps`` with its encoder)."""
    if value is None and field.null:
        return None
    return json.dumps(value, cls=field.encoder)


def _copies(connection: Any) -> bool:
    """Whether rows go through ``COPY`` (PostgreSQL), else through ``bulk_create``."""
    return connection.vendor == "postgresql"
