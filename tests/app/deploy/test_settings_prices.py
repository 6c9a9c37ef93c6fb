"""The price settings (docs/accounting.md "Cost") are checked at start-up: a bad price or
currency stops ``manage.py`` with the entry named, as every other setting does."""

from __future__ import annotations

from tests.app.deploy.test_settings import clean_env
from tests.support.commands import manage


def test_a_bad_price_is_named_at_start_up() -> None:
    env = clean_env(GPUOBS_GPU_HOUR_PRICES="A100-SXM4-80GB=2.10,H100=cheap")

    result = manage("check", text=True, env=env)

    assert result.returncode != 0
    assert "GPUOBS_GPU_HOUR_PRICES.H100: 'cheap' is not a number" in result.stderr


def test_a_bad_currency_is_named_at_start_up() -> None:
    result = manage("check", text=True, env=clean_env(GPUOBS_CURRENCY="US$"))

    assert result.returncode != 0
    assert "GPUOBS_CURRENCY" in result.stderr


def test_good_prices_start() -> None:
    env = clean_env(GPUOBS_GPU_HOUR_PRICES="A100-SXM4-80GB=2.10, *=1", GPUOBS_CURRENCY="EUR")

    assert manage("check", text=True, env=env).returncode == 0
