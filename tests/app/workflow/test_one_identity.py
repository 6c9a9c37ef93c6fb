"""One identity per change across re-proposals (issue #26.7: the demo's gang release was
re-issued #8 → #9 → #12 → #39): a release proposed for a partial hold one cycle and for the
deadlock the next is the same write, so it keeps its id; its reason follows the latest cause."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from diagnosis.models import Cluster, Recommendation
from tests.support.records import run_cycles, seed_demo_cluster

pytestmark = pytest.mark.django_db

STEP_S = 1200
CYCLES = 12  # the gangs arrive at 0:50, hold partially from ~1:50, deadlock ~2:40


@pytest.fixture
def demo(db) -> Iterator[Cluster]:
    with seed_demo_cluster("demo-identity", STEP_S) as cluster:
        yield cluster


def test_the_demos_gang_release_keeps_one_id_per_target(demo) -> None:
    run_cycles(demo, CYCLES)

    releases = Recommendation.objects.filter(cluster=demo, kind="gang-release")
    per_target = {}
    for rec in releases.order_by("id"):
        per_target.setdefault(rec.target, []).append((rec.pk, rec.state))

    assert per_target, "no gang release was proposed"
    assert all(len(ids) == 1 for ids in per_target.values()), per_target
