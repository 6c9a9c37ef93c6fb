"""The overview at scale (issue #17): a day of minute cycles draws a downsampled trend (about 360
points, each the mean of its slice of time), and gaps in the cycles stay gaps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from diagnosis.models import ClusterCycle
from diagnosis.pages.clusters import MAX_TREND_POINTS, downsampled_trend
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db]

START = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def minute_trend(minutes: int, *, skip: range = range(0)) -> pd.DataFrame:
    rows = [
        (START + timedelta(minutes=m), (m % 10) / 10, 0.5)
        for m in range(1, minutes + 1)
        if m not in skip
    ]
    return pd.DataFrame(rows, columns=["as_of", "allocation_utilization", "activity_utilization"])


def test_a_day_of_minute_cycles_is_averaged_per_slice_of_time() -> None:
    trend = minute_trend(1440)

    drawn = downsampled_trend(trend, DAY)

    assert MAX_TREND_POINTS - 1 <= len(drawn) <= MAX_TREND_POINTS + 1
    first = trend[trend["as_of"] < START + timedelta(minutes=4)]
    assert drawn["allocation_utilization"].iloc[0] == pytest.approx(
        first["allocation_utilization"].mean()
    )
    assert drawn["activity_utilization"].eq(0.5).all()


def test_a_gap_in_the_cycles_stays_a_gap() -> None:
    drawn = downsampled_trend(minute_trend(1440, skip=range(600, 720)), DAY)

    steps = pd.to_datetime(drawn["as_of"]).diff().dropna()
    assert steps.max() >= timedelta(hours=2) - timedelta(minutes=4)


def test_a_short_trend_is_drawn_as_it_is() -> None:
    trend = minute_trend(60)

    assert downsampled_trend(trend, DAY).equals(trend)


def test_the_overview_draws_a_day_of_minute_cycles_downsampled(lab, bob) -> None:
    end = START + DAY
    ClusterCycle.objects.bulk_create(
        ClusterCycle(
            cluster=lab,
            as_of=end - timedelta(minutes=m),
            ran_at=end - timedelta(minutes=m),
            gpus=64,
            allocation_utilization=0.5,
            activity_utilization=0.4,
        )
        for m in range(1440)
    )

    response = logged_in_client(bob).get(f"/clusters/{lab.name}/")

    assert response.status_code == 200
    assert MAX_TREND_POINTS - 1 <= response.context["trend_points"] <= MAX_TREND_POINTS + 1
