"""Issue #13: the fairness report of a Kueue cluster shows its cohort tree (with the cohort's
``fairSharing.weight``) and the tenants' fair shares computed through it; a manager of one tenant
sees the groups and their own queues, never another tenant's queue."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Tenant
from diagnosis.reports.fairness_report import build_fairness_report
from diagnosis.reports.period import ReportPeriod
from tests.core.test_fairness_tree_rollup import org
from tests.support.builders import AS_OF

pytestmark = pytest.mark.django_db
PERIOD = ReportPeriod(AS_OF - timedelta(hours=1), AS_OF + timedelta(minutes=1))


@pytest.fixture
def kueue(make_cluster):
    cluster = make_cluster("test", scheduler_kind="kueue", metrics_kind="none")
    record_cycle(cluster, org(cohort_weight=3).build())
    return cluster


def test_the_report_divides_the_gpus_down_the_cohort_tree(kueue, alice):
    data = build_fairness_report(alice, kueue, PERIOD)
    assert data.report.tenant("research").fair_share == pytest.approx(12 / 16)  # flat: 2/3
    assert [(n.name, n.fair_gpus) for n in data.tree] == [
        ("prod", pytest.approx(4.0)),
        ("research-org", pytest.approx(12.0)),
        ("r1", pytest.approx(6.0)),
        ("r2", pytest.approx(6.0)),
    ]
    assert data.as_dict()["tree"]["nodes"][1]["weight"] == 3


def test_the_page_shows_the_tree(kueue, alice_client):
    query = f"from={PERIOD.start:%Y-%m-%dT%H:%M:%SZ}&to={PERIOD.end:%Y-%m-%dT%H:%M:%SZ}"
    html = alice_client.get(f"/clusters/test/fairness/?{query}").content.decode()
    assert 'id="queue-tree-table"' in html
    assert '<tr data-node="research-org" data-depth="0">' in html


def test_a_manager_sees_the_groups_and_only_their_tenants_queues(kueue, mallory):
    Tenant.objects.get(cluster=kueue, name="prod").managers.add(mallory)
    names = [n.name for n in build_fairness_report(mallory, kueue, PERIOD).tree]
    assert names == ["prod", "research-org"]
