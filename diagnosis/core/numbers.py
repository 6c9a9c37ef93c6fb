"""The number helpers every layer shares, each defined once (pure: no Django, no I/O).

- :func:`finite_number`: a number read from untrusted text or JSON, or None;
- :func:`json_number`: a float as a JSON document carries it (rounded, never NaN or infinity);
- :func:`whole_or_float`: an int when the value is whole, else a float (``1`` rather than
  ``1.0`` in a written document).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float: a number, numeric text (``"1.5"``, ``" 2 "``) or anything
    else ``float()`` takes (a Decimal). None for None, a bool, NaN, an infinity or what
    ``float()`` refuses."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def json_number(value: float | None, digits: int = 6) -> float | None:
    """``value`` as a float rounded to ``digits`` decimals; None for None, NaN or an infinity
    (JSON has neither)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else round(value, digits)


def whole_or_float(value: float | Decimal) -> int | float:
    """``value`` as an int when it is whole (``4.0`` -> ``4``), else as a float. A Decimal is
    whole when it equals its integral value (exactly, not after rounding to a float)."""
    if isinstance(value, Decimal):
        whole = value == value.to_integral_value()
    else:
        whole = float(value).is_integer()
    return int(value) if whole else float(value)
