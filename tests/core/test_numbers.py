"""The shared number helpers of :mod:`diagnosis.core.numbers`, with their edge cases."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from diagnosis.core.numbers import finite_number, json_number, whole_or_float


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, 3.0),
        (2.5, 2.5),
        (-1, -1.0),
        ("1.5", 1.5),
        (" 2 ", 2.0),
        ("1e3", 1000.0),
        (Decimal("0.25"), 0.25),
        (None, None),
        (True, None),
        (False, None),
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
        ("nan", None),
        ("inf", None),
        ("", None),
        ("N/A", None),
        ([1], None),
        ({"a": 1}, None),
        (object(), None),
    ],
)
def test_finite_number(value, expected):
    result = finite_number(value)

    assert result == expected
    assert result is None or type(result) is float


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
        (1, 1.0),
        (0.1234567891, 0.123457),
        (Decimal("2.5"), 2.5),
    ],
)
def test_json_number(value, expected):
    assert json_number(value) == expected


def test_json_number_rounds_to_the_digits_asked_for():
    assert json_number(2 / 3, digits=2) == 0.67


@pytest.mark.parametrize(
    ("value", "expected", "kind"),
    [
        (4.0, 4, int),
        (4, 4, int),
        (-2.0, -2, int),
        (0.5, 0.5, float),
        (math.inf, math.inf, float),
        (Decimal("3"), 3, int),
        (Decimal("3.000"), 3, int),
        (Decimal("0.5"), 0.5, float),
        # whole after rounding to a float, but not exactly: a Decimal stays a float
        (Decimal("1.0000000000000000001"), 1.0, float),
    ],
)
def test_whole_or_float(value, expected, kind):
    result = whole_or_float(value)

    assert result == expected
    assert type(result) is kind


def test_whole_or_float_keeps_nan_a_float():
    assert math.isnan(whole_or_float(math.nan))
    assert math.isnan(whole_or_float(Decimal("NaN")))
