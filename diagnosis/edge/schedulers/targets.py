"""Where a change goes, parsed in one place: ``pool:a100``, ``queue:research``,
``node:gpu-017``.

A recommendation's change names its target as ``KIND:NAME``; the change's kind says which
target kind it takes (:data:`TARGET_KINDS`). Every adapter reads the name through
:func:`target_name`, so they word a malformed target the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from diagnosis.edge.schedulers.base import ChangeError

# change kind -> the kind of target it takes
TARGET_KINDS: dict[str, str] = {
    "placement-policy": "pool",
    "queue-weight": "queue",
    "drain-node": "node",
    "resume-node": "node",
    "gang-release": "job",
}


def target_name(
    change: Mapping[str, Any], *, pattern: re.Pattern[str] | None = None, words: str = ""
) -> str:
    """The ``NAME`` of the change's ``target``, which must be ``KIND:NAME`` for the target kind
    of the change's kind (and, with ``pattern``, a name it matches; ``words`` describe it), or
    :class:`ChangeError` naming the change kind and what it got."""
    kind = change.get("kind")
    target_kind = TARGET_KINDS.get(str(kind))
    if target_kind is None:
        raise ChangeError(f"unknown change kind {kind!r}")
    prefix = f"{target_kind}:"
    target = str(change.get("target") or "")
    name = target[len(prefix) :] if target.startswith(prefix) else ""
    if not name or (pattern is not None and not pattern.match(name)):
        shape = f"{prefix}NAME" + (f" ({words})" if words else "")
        raise ChangeError(f"{kind}: target must look like {shape}, got {target!r}")
    return name
