"""The API's throttle rates for one test (diagnosis/throttling.py reads them when a throttle is
made, so pytest-django's ``settings`` fixture puts them back afterwards)."""

from __future__ import annotations

from typing import Any


def api_rates(settings: Any, **rates: str) -> None:
    """Set the DRF rates named in ``rates`` (``user="3/min"``, ``sender="2/min"`` ...)."""
    framework = settings.REST_FRAMEWORK
    settings.REST_FRAMEWORK = {
        **framework,
        "DEFAULT_THROTTLE_RATES": {**framework["DEFAULT_THROTTLE_RATES"], **rates},
    }
