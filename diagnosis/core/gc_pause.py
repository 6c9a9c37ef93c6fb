"""Pausing Python's cyclic garbage collector around work that builds many objects in no cycle.

Decoding a Prometheus answer (10^5 small dicts) or replaying a 16,384-GPU cluster (tens of
thousands of long-lived jobs, specs, allocations) makes the collector run full passes over the
whole heap that free next to nothing: 2.5x the decoding's own cost, 2-3 passes of ~65 ms per
replay (issue #17). Reference counting still frees everything not in a cycle. One counter for
the whole process: pauses nest and may overlap across threads, and the collector runs again when
the last ends, if it ran before the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()
