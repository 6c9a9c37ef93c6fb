"""Scheduler-supplied strings made storable before a snapshot document enters the core.

A scheduler may report what gpuobs cannot keep: a Kubernetes ``namespace/name`` job id over
255 characters, a NUL or a lone surrogate in a name (PostgreSQL stores neither). Rather than let
one such job fail every cycle, :func:`clean_document` repairs the document at the boundary and
says what it changed (recorded on the cycle, shown as a degraded status):

- NUL and lone surrogates in any string are replaced by U+FFFD;
- an identifier longer than its column (job, node, tenant, queue, pool, GPU UUID) is clipped
  and given a hash of the whole value, so two long ids stay two ids, and every reference to it
  (allocations, events) is clipped the same way;
- display text longer than its column (a job's name, an event's reason) is clipped.

A snapshot that reached the recording without passing a collection (a test, a caller of
``record_cycle``) goes through the same repair there (:func:`storable_snapshot`): nothing is
dropped for being too long, and what was clipped is said.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import pandas as pd
from pandas._libs.writers import max_len_string_array
from pandas.api.types import infer_dtype

from diagnosis.core import snapshot as snapshot_format

REPLACEMENT = "\ufffd"
SHOWN_PROBLEMS = 20  # the cycle keeps at most this many examples, plus the count

# (section, key, limit, identifier?) -- the columns the values land in
FIELDS: tuple[tuple[str, str, int, bool], ...] = (
    ("jobs", "id", 255, True),
    ("jobs", "name", 255, False),
    ("jobs", "tenant", 128, True),
    ("jobs", "queue", 128, True),
    ("jobs", "pool", 128, True),
    ("jobs", "kind", 32, False),
    ("queues", "name", 128, True),
    ("queues", "tenant", 128, True),
    ("nodes", "name", 253, True),
    ("nodes", "pool", 128, True),
    ("nodes", "gpu_model", 64, False),
    ("gpus", "node", 253, True),
    ("gpus", "uuid", 64, True),
    ("gpus", "gpu_model", 64, False),
    ("events", "job", 255, True),
    ("events", "node", 253, True),
    ("events", "reason", 255, False),
)


def _bad(ch: str) -> bool:
    return ch == "\x00" or "\ud800" <= ch <= "\udfff"


def clean_text(value: str) -> str:
    """``value`` with NUL and lone surrogates replaced."""
    if value.isascii():
        return value.replace("\x00", REPLACEMENT) if "\x00" in value else value
    return "".join(REPLACEMENT if _bad(ch) else ch for ch in value)


def clip_identifier(value: str, limit: int) -> str:
    """``value`` if it fits, else its start and a hash of all of it (still ``limit`` long)."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{value[: limit - 17]}~{digest}"


class _Cleaner:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.count = 0

    def note(self, path: str, what: str) -> None:
        self.count += 1
        if len(self.problems) < SHOWN_PROBLEMS:
            self.problems.append(f"{path}: {what}")

    def walk(self, value: Any, path: str) -> Any:
        if isinstance(value, str):
            cleaned = clean_text(value)
            if cleaned is not value and cleaned != value:
                self.note(path, "NUL or an invalid character replaced")
            return cleaned
        if isinstance(value, Mapping):
            return {self.walk(k, path): self.walk(v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.walk(item, f"{path}[{i}]") for i, item in enumerate(value)]
        return value

    def fit(self, entry: dict[str, Any], key: str, limit: int, ident: bool, path: str) -> None:
        value = entry.get(key)
        if not isinstance(value, str) or len(value) <= limit:
            return
        entry[key] = clip_identifier(value, limit) if ident else value[:limit]
        self.note(f"{path}.{key}", f"{len(value)} characters clipped to {limit}")


# what, in JSON text, can decode to a NUL or a lone surrogate: a \u0000 or \uD800-\uDFFF escape,
# a raw NUL, or a surrogate encoded as UTF-8 (json.loads decodes bytes with "surrogatepass")
_BAD_TEXT_IN_JSON = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])|\x00|\xed[\xa0-\xbf]")


def json_text_clean(raw: bytes) -> bool:
    """Whether the UTF-8 JSON text ``raw`` cannot decode to a string holding a NUL or a lone
    surrogate (one scan of the bytes; a surrogate pair's escapes, a valid non-BMP character,
    also answer False). UTF-16 or UTF-32 text (a NUL among its first bytes) answers False."""
    return _BAD_TEXT_IN_JSON.search(raw) is None


def clean_document(
    document: Mapping[str, Any], *, text_clean: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """The document with every string storable, and what was changed (empty: nothing). Only
    the first few changes are listed, then how many there were in all.

    ``text_clean``: the caller decoded ``document`` itself from JSON text that
    :func:`json_text_clean` found clean. Its strings are then not walked (about 1 s of CPU at
    16,384 GPUs), and the values too long for their column are clipped in ``document`` itself."""
    cleaner = _Cleaner()
    cleaned: dict[str, Any] = dict(document) if text_clean else cleaner.walk(document, "$")
    for section, key, limit, ident in FIELDS:
        for i, entry in enumerate(cleaned.get(section) or ()):
            if isinstance(entry, dict):
                cleaner.fit(entry, key, limit, ident, f"{section}[{i}]")
    for i, job in enumerate(cleaned.get("jobs") or ()):
        for j, pod in enumerate((job.get("allocation") if isinstance(job, dict) else None) or ()):
            if isinstance(pod, dict):
                cleaner.fit(pod, "node", 253, True, f"jobs[{i}].allocation[{j}]")
    problems = list(cleaner.problems)
    if cleaner.count > len(problems):
        problems.append(f"... {cleaner.count} values changed in all")
    return cleaned, problems


# (section, key) of FIELDS -> (frame of the snapshot, column; None: the frame's index)
FRAME_COLUMNS: dict[tuple[str, str], tuple[str, str | None]] = {
    ("jobs", "id"): ("jobs", None),
    ("jobs", "name"): ("jobs", "name"),
    ("jobs", "tenant"): ("jobs", "tenant"),
    ("jobs", "queue"): ("jobs", "queue"),
    ("jobs", "pool"): ("jobs", "pool"),
    ("jobs", "kind"): ("jobs", "kind"),
    ("queues", "name"): ("queues", None),
    ("queues", "tenant"): ("queues", "tenant"),
    ("nodes", "name"): ("nodes", None),
    ("nodes", "pool"): ("nodes", "pool"),
    ("nodes", "gpu_model"): ("nodes", "gpu_model"),
    ("gpus", "node"): ("gpus", "node"),
    ("gpus", "uuid"): ("gpus", "uuid"),
    ("events", "job"): ("events", "job"),
    ("events", "node"): ("events", "node"),
    ("events", "reason"): ("events", "reason"),
}


def _longest(values: pd.Index | pd.Series) -> int:
    """The length of the longest string among ``values`` (0 when none is a string)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return _longest(values.array.remove_unused_categories().categories)
    array = values.to_numpy(dtype=object, copy=True)  # the C loop takes no read-only array
    # pandas' C loop (0.3 ms for 160,000 values, ~40 x the Python one, ~30 x .str.len()) counts
    # bytes too: only where every value is a string or missing
    if isinstance(values.dtype, pd.StringDtype) or infer_dtype(array) in ("string", "empty"):
        return max_len_string_array(array)
    return max((len(v) for v in array if isinstance(v, str)), default=0)


def fits_columns(snap: snapshot_format.ClusterSnapshot) -> bool:
    """Whether every name and text of the snapshot fits the column it is stored in (the
    lengths of :data:`FIELDS`; one pass per column)."""
    for section, key, limit, _ in FIELDS:
        where = FRAME_COLUMNS.get((section, key))
        if where is None:
            continue
        frame = getattr(snap, where[0])
        if where[1] is not None and where[1] not in frame.columns:
            continue
        values = frame.index if where[1] is None else frame[where[1]]
        if len(values) and _longest(values) > limit:
            return False
    return True


def storable_snapshot(
    snap: snapshot_format.ClusterSnapshot,
) -> tuple[snapshot_format.ClusterSnapshot, list[str]]:
    """``snap`` itself when everything fits its column, else the snapshot with every value
    repaired as :func:`clean_document` repairs a collected one (a 200-character tenant clipped
    with a hash of its whole name: one tenant, the same every cycle), and what was changed."""
    if fits_columns(snap):
        return snap, []
    document, repaired = clean_document(snapshot_format.dump(snap))
    return snapshot_format.load(document), repaired
