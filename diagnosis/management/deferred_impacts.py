"""What a one-shot command says about the impact estimates its cycles left pending."""

from __future__ import annotations

from typing import TextIO

from diagnosis.actions.enqueue import deferred_impacts


def write_deferred_note(out: TextIO) -> None:
    """One line when this process deferred impact estimates (embedded mode) and exits without
    running them: they stay pending, and a later cycle sends them again."""
    left = deferred_impacts()
    if left:
        out.write(
            f"{left} impact estimate(s) left pending: in the embedded mode they never run inside "
            "a cycle; `manage.py demo` runs them between its cycles, workers (REDIS_URL) as soon "
            'as they are sent (docs/operations.md, "Impact estimates")'
        )
