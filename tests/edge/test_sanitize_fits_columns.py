"""``fits_columns`` (issue #35: pandas' C loop measures the strings): a snapshot fits when every
string of each column is at most the column's length; other values (None, NaN, numbers, bytes)
are not text and never count, whatever the column's dtype."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from diagnosis.edge.sanitize import fits_columns
from tests.support.builders import SnapshotBuilder

REASON = 255  # events.reason's column
LONG = "é" * (REASON + 1)  # 256 characters, 512 bytes
FITS = "é" * REASON

ODD_VALUES = [
    [None, np.nan, 7, 2.5, FITS],
    [None, np.nan, 7, LONG],
    [b"x" * 300, "short"],
    [LONG, None],
    [np.nan, np.nan],
    [1, 2, 3],
    ["a", ("t" * 300,)],
    [],
]
DTYPES = [object, "str", "category"]


def fits_by_hand(values: list) -> bool:
    return all(len(v) <= REASON for v in values if isinstance(v, str))


def snapshot_with(frame_name: str, frame: pd.DataFrame):
    snap = SnapshotBuilder().node("n1", gpus=1).build()
    return dataclasses.replace(snap, **{frame_name: frame})


def usable(values: list, dtype) -> bool:
    """pandas' ``str`` dtype holds strings only, a category no unhashable value."""
    if dtype == "str":
        return all(isinstance(v, str) or v is None or v is np.nan for v in values)
    return dtype != "category" or not any(isinstance(v, tuple) for v in values)


CASES = [(v, d) for v in ODD_VALUES for d in DTYPES if usable(v, d)]


@pytest.mark.parametrize(("values", "dtype"), CASES)
def test_a_column_fits_when_each_of_its_strings_does(values, dtype) -> None:
    column = pd.Series(values, dtype=dtype)
    snap = snapshot_with("events", pd.DataFrame({"reason": column}))
    assert fits_columns(snap) == fits_by_hand(values)


@pytest.mark.parametrize(("values", "dtype"), CASES)
def test_an_index_fits_when_each_of_its_strings_does(values, dtype) -> None:
    snap = snapshot_with("queues", pd.DataFrame(index=pd.Index(values, dtype=dtype)))
    limit = 128  # queues.name's column
    assert fits_columns(snap) == all(len(v) <= limit for v in values if isinstance(v, str))


def test_a_category_too_long_but_unused_does_not_count() -> None:
    column = pd.Categorical(["short"], categories=["short", LONG])
    assert fits_columns(snapshot_with("events", pd.DataFrame({"reason": column})))


def test_a_too_long_unicode_name_in_a_categorical_column_does_not_fit() -> None:
    column = pd.Categorical([FITS, LONG, FITS])
    assert not fits_columns(snapshot_with("events", pd.DataFrame({"reason": column})))


def test_a_snapshot_of_empty_frames_fits() -> None:
    snap = SnapshotBuilder().build()
    assert (len(snap.nodes), len(snap.gpus), len(snap.jobs)) == (0, 0, 0)
    assert fits_columns(snap)
