"""The snapshot's words and RFC 3339 times (diagnosis/core/vocabulary.py), and the snapshot
package taking its words from there."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pandas as pd
import pytest

from diagnosis.core import snapshot, vocabulary


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-29T08:00:00Z", datetime(2026, 11, 29, 8, tzinfo=UTC)),
        ("2026-11-29t08:00:00z", datetime(2026, 11, 29, 8, tzinfo=UTC)),
        ("2026-11-29T09:30:00+01:30", datetime(2026, 11, 29, 8, tzinfo=UTC)),
        (" 2026-11-29T08:00:00.25Z ", datetime(2026, 11, 29, 8, 0, 0, 250000, tzinfo=UTC)),
        ("2026-11-29T08:00:00.123456789Z", datetime(2026, 11, 29, 8, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_parse_time_reads_rfc_3339_as_aware_utc(text, expected) -> None:
    moment = vocabulary.parse_time(text)
    assert moment == expected
    assert moment.utcoffset() == timedelta(0)
    assert vocabulary.time_problem(text) is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("2026-11-29T08:00:00", "has no time zone"),
        ("yesterday", "is not an RFC 3339 time"),
        ("2026-11-29", "is not an RFC 3339 time"),
        ("2026-11-29T25:00:00Z", "is not an RFC 3339 time"),
        (1764403200, "is not an RFC 3339 time"),
        (None, "is not an RFC 3339 time"),
    ],
)
def test_parse_time_refuses_what_is_not_a_zoned_time_and_says_why(value, problem) -> None:
    assert vocabulary.parse_time(value) is None
    assert vocabulary.time_problem(value) == problem


def test_format_time_writes_utc_with_z_and_only_the_fraction_it_has() -> None:
    plus_one = timezone(timedelta(hours=1))
    assert vocabulary.format_time(datetime(2026, 11, 29, 9, tzinfo=plus_one)) == (
        "2026-11-29T08:00:00Z"
    )
    assert vocabulary.format_time(datetime(2026, 11, 29, 8, 0, 0, 250000, tzinfo=UTC)) == (
        "2026-11-29T08:00:00.25Z"
    )
    with pytest.raises(ValueError, match="no time zone"):
        vocabulary.format_time(datetime(2026, 11, 29, 8))  # a naive one


def test_the_snapshot_package_speaks_the_vocabulary() -> None:
    assert snapshot.FORMAT == vocabulary.SNAPSHOT_FORMAT
    assert snapshot.parse_time("2026-11-29T08:00:00Z") == pd.Timestamp("2026-11-29T08:00:00Z")
    assert snapshot.parse_time("2026-11-29T08:00:00") is None
    assert snapshot.format_time(pd.Timestamp("2026-11-29T09:00:00+01:00")) == (
        "2026-11-29T08:00:00Z"
    )
    assert snapshot.format_time(pd.NaT) is None
    assert snapshot.format_time(None) is None


def test_unavailable_and_live_states_are_node_and_job_states() -> None:
    assert set(vocabulary.UNAVAILABLE_NODE_STATES) == set(vocabulary.NODE_STATES) - {"ready"}
    assert set(vocabulary.LIVE_JOB_STATES) <= set(vocabulary.JOB_STATES)
