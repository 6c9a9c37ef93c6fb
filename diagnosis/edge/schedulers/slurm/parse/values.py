"""Slurm's small values: a command's JSON with its errors, numbers and strings as the data
parsers write them, host lists, epochs as RFC 3339, GRES strings, and the settings every parser
takes (:class:`ParseSettings`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from diagnosis.core.vocabulary import format_time
from diagnosis.edge.schedulers.base import SchedulerError

# -- small readers -------------------------------------------------------------------------------


def parse_json(text: str, command: str) -> dict[str, Any]:
    """A command's JSON document; a permanent SchedulerError naming the command otherwise."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise SchedulerError(f"{command}: output is not JSON ({exc})", permanent=True) from None
    if not isinstance(document, dict):
        raise SchedulerError(f"{command}: expected a JSON object", permanent=True)
    return check_errors(document, command)


def check_errors(document: dict[str, Any], command: str) -> dict[str, Any]:
    """``document`` unless it carries Slurm's ``errors`` entries (a transient SchedulerError)."""
    errors = [_error_text(e) for e in document.get("errors") or [] if e]
    if errors:
        # Slurm 22.05 exits 0 with an "Unspecified error" here when slurmctld cannot be
        # reached (after its own retries): worth trying again later.
        raise SchedulerError(f"{command} reported: {'; '.join(errors)}", permanent=False)
    return document


def _error_text(error: Any) -> str:
    if not isinstance(error, Mapping):
        return str(error)
    parts = [str(error[k]) for k in ("source", "description", "error") if error.get(k)]
    number = error.get("error_number", error.get("errno"))
    return ": ".join(parts) + (f" (errno {number})" if number is not None else "")


def int_value(value: Any) -> int | None:
    """Slurm's numbers: plain ints, or (newer parsers) ``{"set": true, "number": 5}``."""
    if isinstance(value, Mapping):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def text_value(value: Any) -> str:
    """A string field as text: "" when absent, a list's items joined with commas. An object is
    never text (since v0.0.41 ``job_resources.nodes`` is one; its ``repr`` read as a host list
    multiplied names by the million): it gives ""."""
    if value is None or isinstance(value, Mapping):
        return ""
    if isinstance(value, list):  # newer parsers give some strings as lists (job_state)
        return ",".join(str(v) for v in value if not isinstance(v, Mapping | list))
    return str(value)


def flag_set(value: Any) -> set[str]:
    """Flags (a list, or ``A+B`` / ``A,B`` text) as an upper-case set."""
    if isinstance(value, list):
        return {str(v).upper() for v in value}
    if isinstance(value, str) and value:
        return {v.upper() for v in re.split(r"[+,]", value) if v}
    return set()


def epoch_time(value: Any) -> str | None:
    """A Slurm epoch (seconds) as RFC 3339 UTC; None for 0, absent or nonsense."""
    seconds = int_value(value)
    if not seconds or seconds <= 0 or seconds >= 253402300800:  # year 10000
        return None
    return format_time(datetime.fromtimestamp(seconds, UTC))


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """Split on ``separator`` outside brackets and parentheses (``gpu:2(IDX:0,3),nic:1``)."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth = max(0, depth - 1)
        if char == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


# Bounds on what one field may expand to: a record can name at most this many hosts (Slurm's
# own largest clusters have ~10^4 nodes) or GPU indexes per node, and a host list is at most
# this long. Beyond them the field is refused (:class:`ExpansionError`), never expanded.
HOSTLIST_LIMIT = 65_536
HOSTLIST_TEXT_LIMIT = 1 << 20
INDEX_LIMIT = 1024


class ExpansionError(ValueError):
    """A host list or index list that is malformed or would expand past its bound."""


_HOST_RANGE = re.compile(r"\[([^\[\]]*)\]")


def expand_hostlist(text: str, limit: int = HOSTLIST_LIMIT) -> list[str]:
    """Slurm's host list (``n[1-2],gpu-[001-003,007]``, ``rack[1-2]-n[1-2]``) as names, in
    order; at most ``limit`` names (:class:`ExpansionError` past it, or for text that is not a
    host list: nested or unbalanced brackets, braces, quotes)."""
    text = text or ""
    if len(text) > HOSTLIST_TEXT_LIMIT:
        raise ExpansionError(f"host list of {len(text)} characters (at most {HOSTLIST_TEXT_LIMIT})")
    if any(c in text for c in "{}'\"") or ": " in text:
        raise ExpansionError(f"not a host list: {text[:80]!r}")
    names: list[str] = []
    for item in split_top_level(text):
        names.extend(_expand_one(item, limit - len(names)))
    return names


def _expand_one(item: str, budget: int) -> list[str]:
    """One host-list item, its bracket groups expanded left to right, within ``budget``."""
    pieces: list[list[str]] = []  # literal text and range alternatives, in order
    position = 0
    for match in _HOST_RANGE.finditer(item):
        pieces.append([item[position : match.start()]])
        pieces.append(_range_values(match.group(1), budget))
        position = match.end()
    pieces.append([item[position:]])
    if any(c in "".join(p[0] for p in pieces[::2]) for c in "[]"):
        raise ExpansionError(f"not a host list (brackets): {item[:80]!r}")
    count = 1
    for choices in pieces:
        count *= len(choices)
        if count > budget:
            raise ExpansionError(f"host list names more than {HOSTLIST_LIMIT} hosts: {item[:80]!r}")
    names = [""]
    for choices in pieces:
        names = [f"{name}{choice}" for name in names for choice in choices]
    return names


def _range_values(body: str, budget: int) -> list[str]:
    values: list[str] = []
    for piece in body.split(","):
        low, _, high = piece.partition("-")
        if high and low.isdigit() and high.isdigit():
            start, stop = int(low), int(high)
            if stop < start or stop - start + 1 > budget - len(values):
                raise ExpansionError(f"host range [{piece}] is reversed or too long")
            width = len(low) if low.startswith("0") else 0
            values.extend(str(n).zfill(width) for n in range(start, stop + 1))
        elif piece:
            values.append(piece)
        if len(values) > budget:
            raise ExpansionError(f"host list names more than {HOSTLIST_LIMIT} hosts")
    return values


def expand_indexes(text: str, limit: int = INDEX_LIMIT) -> list[int]:
    """``0-2,5`` → [0, 1, 2, 5]; ``N/A`` or empty → []. Indexes at or past ``limit`` (no node
    has 1024 GPUs) are refused with :class:`ExpansionError`."""
    indexes: list[int] = []
    for piece in (text or "").split(","):
        low, _, high = piece.strip().partition("-")
        if not low.isdigit():
            continue
        stop = int(high) if high.isdigit() else int(low)
        if stop >= limit or int(low) >= limit:
            raise ExpansionError(f"GPU index range {piece.strip()!r} is past {limit - 1}")
        indexes.extend(range(int(low), stop + 1))
    return indexes


# -- GRES ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gres:
    """One GRES item such as ``gpu:h100:3(IDX:2-4)``: name, type, count and indexes."""

    name: str
    type: str | None
    count: int
    indexes: tuple[int, ...] = ()


_GRES = re.compile(r"^(?P<body>[^()]*)(?:\((?P<extra>.*)\))?\Z")


def parse_gres(text: Any) -> list[Gres]:
    """Every item of a GRES string (``gpu:h100:8(S:0-1),nic:1``; ``gres:gpu:2``, ``gres/gpu=2``
    in TRES strings). ``(null)``, ``N/A`` and empty give []."""
    items: list[Gres] = []
    for raw in split_top_level(text_value(text)):
        match = _GRES.match(raw)
        if match is None or raw in {"(null)", "N/A"}:
            continue
        body = match.group("body").replace("=", ":")
        if body.startswith(("gres:", "gres/")):
            body = body[5:]
        fields = [f for f in body.split(":") if f != ""]
        if not fields:
            continue
        name, rest = fields[0], fields[1:]
        count = 1
        if rest and rest[-1].isdigit():
            count = int(rest.pop())
        gres_type = rest[0] if rest else None
        indexes: tuple[int, ...] = ()
        extra = match.group("extra") or ""
        if extra.startswith("IDX:"):
            indexes = tuple(expand_indexes(extra[4:]))
        items.append(Gres(name, gres_type, count, indexes))
    return items


def gpu_count(text: Any, gres_name: str = "gpu") -> int:
    return sum(g.count for g in parse_gres(text) if g.name == gres_name)


def gpu_indexes(text: Any, gres_name: str = "gpu") -> list[int]:
    found: list[int] = []
    for item in parse_gres(text):
        if item.name == gres_name:
            found.extend(i for i in item.indexes if i not in found)
    return sorted(found)


def gpu_types_listed(text: Any, gres_name: str = "gpu") -> list[str | None]:
    """One type per GPU of a node's GRES, in the order its GRES string lists them
    (``gpu:h100:2,gpu:h200:4`` → h100, h100, h200 × 4): Slurm's index order when the node's
    device files follow that order (gres.conf says for sure: :mod:`..topology`)."""
    types: list[str | None] = []
    for item in parse_gres(text):
        if item.name == gres_name:
            types.extend([item.type] * min(item.count, INDEX_LIMIT - len(types)))
    return types


def gpu_type(text: Any, gres_name: str = "gpu") -> str | None:
    """The GPU type of a node's GRES (the one with most GPUs when it has several)."""
    counts: dict[str, int] = {}
    for item in parse_gres(text):
        if item.name == gres_name and item.type:
            counts[item.type] = counts.get(item.type, 0) + item.count
    return max(counts, key=lambda t: counts[t]) if counts else None


# -- settings the parsers need -------------------------------------------------------------------


@dataclass(frozen=True)
class ParseSettings:
    """What the parsers need of the adapter's settings."""

    gres_name: str = "gpu"
    gpu_models: Mapping[str, str] = field(default_factory=dict)  # GRES type -> model name
    partitions: frozenset[str] = frozenset()  # empty: every partition
    array_expand_limit: int = 1000
