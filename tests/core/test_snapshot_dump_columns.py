"""The dump's column-at-a-time conversions (issue #35): times, metrics and text as the
per-value helpers write each value."""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.snapshot.frame import format_time
from tests.support.builders import SnapshotBuilder

dump_module = importlib.import_module("diagnosis.core.snapshot.dump")  # not the function


def test_a_time_column_is_written_as_format_time_writes_each_time() -> None:
    moments = np.array(
        [
            "2026-11-29T08:00:00",
            "2026-11-29T08:00:00.250000",
            "NaT",
            "1969-12-31T23:59:59.999999",
            "0999-01-02T03:04:05.5",
            "2026-11-29T08:00:00.000001",
        ],
        dtype="datetime64[us]",
    )
    column = pd.Series(moments).dt.tz_localize("UTC").dt.tz_convert("Asia/Kolkata")

    assert dump_module._times(column) == [format_time(value) for value in column.tolist()]


def gpu_entries(builder: SnapshotBuilder) -> list[dict]:
    return snapshot_format.dump(builder.build())["gpus"]


def test_a_whole_metric_is_an_integer_a_fractional_one_a_float() -> None:
    builder = SnapshotBuilder().node("n1", gpus=2)
    builder.gpu("n1", 0, power_w=250.0, temp_c=71.5).gpu("n1", 1, power_w=212.25)

    first, second = gpu_entries(builder)

    assert type(first["power_w"]["mean"]) is int
    assert first["power_w"] == {"mean": 250}
    assert first["temp_c"] == {"max": 71.5}
    assert second["power_w"] == {"mean": 212.25}


def test_a_metric_only_some_gpus_report_is_on_those_only_and_one_none_report_on_none() -> None:
    builder = SnapshotBuilder().node("n1", gpus=2)
    builder.gpu("n1", 0, util=0.5).gpu("n1", 1, health="ok")

    first, second = gpu_entries(builder)

    assert first["util"] == {"mean": 0.5, "p10": 0.5, "p90": 0.5}
    assert "util" not in second
    assert not any("power_w" in entry or "dram_active" in entry for entry in (first, second))
