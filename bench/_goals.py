"""One line per goal of a bench, in one shape, so a reader (and ``grep '^goal:'``) finds every
figure measured against its target: ``goal: <what>: <value> against <= <limit>: met|MISSED``.
Not a bench."""

from __future__ import annotations


def goal(what: str, value: float, limit: float, unit: str = "s", *, detail: str = "") -> bool:
    """Print ``what`` measured at ``value`` against at most ``limit`` (both in ``unit``) and
    return whether it was met; ``detail`` (the floor it was measured beside, the sizes) follows
    in brackets."""
    met = value <= limit
    verdict = "met" if met else "MISSED"
    extra = f" ({detail})" if detail else ""
    figure = f"{value:.3f} {unit} against <= {limit:.3f} {unit}"
    print(f"goal: {what}: {figure}: {verdict}{extra}", flush=True)
    return met
