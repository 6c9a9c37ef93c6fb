"""Timestamps read with psycopg's own loader come back equal and UTC-aware, as Django's do."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from diagnosis.db_timestamps import fast_rows
from diagnosis.models import ClusterCycle

pytestmark = pytest.mark.django_db


def test_fast_rows_reads_times_back_equal_and_utc_aware(make_cluster) -> None:
    moment = datetime(2026, 12, 1, 9, 30, 15, 123456, tzinfo=UTC)
    cycle = ClusterCycle.objects.create(cluster=make_cluster(), as_of=moment, ran_at=moment)

    rows = fast_rows(ClusterCycle.objects.filter(pk=cycle.pk).values_list("pk", "as_of", "ok"))

    assert rows == [(cycle.pk, moment, True)]
    assert rows[0][1].tzinfo is UTC


def test_fast_rows_leaves_the_connections_own_loader_to_django(make_cluster) -> None:
    moment = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    ClusterCycle.objects.create(cluster=make_cluster(), as_of=moment)

    fast_rows(ClusterCycle.objects.values_list("as_of"))

    assert ClusterCycle.objects.values_list("as_of", flat=True).get() == moment
