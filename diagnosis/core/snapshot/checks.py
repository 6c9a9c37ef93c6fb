"""Validating a snapshot document: every check appends an error naming the JSON path and carries
on, so that one run reports every problem of a document (:class:`SnapshotError` lists them)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pandas as pd

from diagnosis.core.snapshot.frame import parse_time

INTEGER_LIMIT = 2**53
"""The largest magnitude an integer of a document may have: every integer the loader reads
fits a frame's int64 column and a JSON reader's double exactly (``priority 1e20`` is refused with
its path, never an ``OverflowError`` later)."""


class SnapshotError(ValueError):
    """A snapshot document that cannot be loaded. ``errors`` holds one line per problem."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        shown = "; ".join(errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        super().__init__(f"invalid snapshot: {shown}{more}")


class Checker:
    """Collects the problems of one document: each check returns the value it read (or a
    default) and records an error, naming the JSON path, when the value is wrong."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def mapping(self, value: Any, path: str) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.error(path, f"expected an object, got {type_name(value)}")
            return None
        return value

    def objects(self, items: Iterable[Any], section: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each object of the array ``section`` with its path (``section[i]``); an item that is
        not an object is an error and skipped."""
        for i, item in enumerate(items):
            path = f"{section}[{i}]"
            obj = self.mapping(item, path)
            if obj is not None:
                yield path, obj

    def array(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, f"expected an array, got {type_name(value)}")
            return []
        return value

    def required(self, obj: Mapping[str, Any], key: str, path: str) -> Any:
        if key not in obj or obj[key] is None:
            self.error(f"{path}.{key}" if path else key, "required field is missing")
            return None
        return obj[key]

    def string(self, obj: Mapping[str, Any], key: str, path: str, *, required: bool = False):
        value = obj.get(key)
        if type(value) is str and value:  # fast path for the common case, same result
            return value
        value = self.required(obj, key, path) if required else value
        if value is None:
            return None
        if not isinstance(value, str) or (required and not value):
            self.error(join(path, key), f"expected a non-empty string, got {value!r}")
            return None
        return value

    def integer(
        self,
        obj: Mapping[str, Any],
        key: str,
        path: str,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int = INTEGER_LIMIT,
        default: int | None = None,
    ) -> int | None:
        value = obj.get(key)
        if (  # fast path for the common case (an int in range), same result
            type(value) is int
            and (minimum is None or minimum <= value)
            and -maximum <= value <= maximum
        ):
            return value
        value = self.required(obj, key, path) if required else value
        if value is None:
            return default
        return self.whole(value, join(path, key), minimum=minimum, maximum=maximum, default=default)

    def whole(
        self,
        value: Any,
        path: str,
        *,
        minimum: int | None = None,
        maximum: int = INTEGER_LIMIT,
        default: int | None = None,
    ) -> int | None:
        """``value`` (at ``path``) as an int within ±``maximum`` (at most :data:`INTEGER_LIMIT`)
        and at least ``minimum``; else an error and ``default``."""
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (isinstance(value, float) and not math.isfinite(value))
        ):
            self.error(path, f"expected an integer, got {short(value)}")
            return default
        if not in_range(value, maximum):
            self.error(path, f"must lie within ±{maximum}, got {short(value)}")
            return default
        if value != int(value):
            self.error(path, f"expected an integer, got {value!r}")
            return default
        if minimum is not None and value < minimum:
            self.error(path, f"must be >= {minimum}, got {value!r}")
            return default
        return int(value)

    def number(
        self,
        obj: Mapping[str, Any],
        key: str,
        path: str,
        *,
        fraction: bool = False,
        minimum: float | None = None,
    ) -> float:
        value = obj.get(key)
        if (  # fast path for the common case (a float in range), same result
            type(value) is float
            and (0.0 <= value <= 1.0 if fraction else math.isfinite(value))
            and (minimum is None or value >= minimum)
        ):
            return value
        if value is None:
            return math.nan
        if isinstance(value, bool) or not isinstance(value, int | float) or not finite(value):
            self.error(join(path, key), f"expected a number, got {short(value)}")
            return math.nan
        if fraction and not 0.0 <= value <= 1.0:
            self.error(join(path, key), f"a fraction must lie in 0..1, got {value!r}")
            return math.nan
        if minimum is not None and value < minimum:
            self.error(join(path, key), f"must be >= {minimum}, got {value!r}")
            return math.nan
        return float(value)

    def boolean(self, obj: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
        value = obj.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(join(path, key), f"expected true or false, got {value!r}")
            return default
        return value

    def choice(
        self,
        obj: Mapping[str, Any],
        key: str,
        path: str,
        choices: Iterable[str],
        *,
        default: str | None = None,
    ) -> str | None:
        value = obj.get(key)
        if value is None:
            if default is None:
                self.error(join(path, key), "required field is missing")
            return default
        if value not in choices:
            allowed = ", ".join(choices)
            self.error(join(path, key), f"{value!r} is not one of: {allowed}")
            return default
        return value

    def time(
        self, obj: Mapping[str, Any], key: str, path: str, *, required: bool = False
    ) -> pd.Timestamp:
        value = self.required(obj, key, path) if required else obj.get(key)
        if value is None:
            return pd.NaT
        parsed = parse_time(value)
        if parsed is None:
            self.error(
                join(path, key),
                f"{value!r} is not an RFC 3339 time with a zone (e.g. 2026-11-29T08:00:00Z)",
            )
            return pd.NaT
        return parsed


def in_range(value: int | float, limit: int = INTEGER_LIMIT) -> bool:
    """Whether a number is finite and within ±``limit`` (an int of any size is compared as an
    int, never converted to a float that overflows)."""
    limit = min(limit, INTEGER_LIMIT)
    if isinstance(value, int):
        return -limit <= value <= limit
    return math.isfinite(value) and -limit <= value <= limit


def finite(value: int | float) -> bool:
    """Whether a number is finite as a float (an int too large for one is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def short(value: Any) -> str:
    """``repr(value)`` cut to 40 characters (a 4,000-digit number is named, not echoed)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "a huge integer"
    return text if len(text) <= 40 else text[:37] + "..."


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string"}.get(
        type(value), type(value).__name__
    )
