"""``manage.py forecast backtest``: the start-time forecasts' error against the real starts of
the demo's simulated run, printed and as JSON; bad input is exit code 2 (docs/forecasts.md)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command


def test_the_demo_backtest_prints_its_error_as_json() -> None:
    out = StringIO()
    call_command(
        "forecast",
        "backtest",
        "--scenario",
        "demo",
        "--seeds",
        "1",
        "--horizon-hours",
        "4",
        "--json",
        stdout=out,
    )
    (result,) = json.loads(out.getvalue())["results"]
    assert result["scenario"] == "demo"
    assert result["gpus"] == 1024
    assert result["scored"] > 0
    assert result["pending"] == result["scored"] + result["censored"]
    assert 0 <= result["median_rel_error"] <= result["p90_rel_error"]
    assert isinstance(result["meets_target"], bool)


def test_the_table_names_the_error_and_the_target() -> None:
    out = StringIO()
    call_command(
        "forecast",
        "backtest",
        "--scenario",
        "demo",
        "--seeds",
        "1",
        "--horizon-hours",
        "2",
        stdout=out,
    )
    text = out.getvalue()
    assert text.startswith("demo: 1024 GPUs, 12 forecast times")
    assert "error / real wait: median" in text
    assert "35 % target" in text


@pytest.mark.parametrize(
    "args",
    [("--seeds", "0"), ("--horizon-hours", "-1"), ("--scenario", "openb", "--pods", "/nope.csv")],
)
def test_bad_input_is_exit_code_2(args) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("forecast", "backtest", *args, stdout=StringIO())
    assert caught.value.returncode == 2
