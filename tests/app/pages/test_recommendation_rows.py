"""A recommendations list people can use (issue #26.7): one-pod advice of one rule in one pool is
one row with its count, and open recommendations are ranked by the GPU-hours at stake."""

from __future__ import annotations

import re

import pytest

from tests.support.records import make_recommendation
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db


def advice(cluster, job: str, pool: str, pods: int = 1):
    impact = {"verdict": "not simulated", "gpus_involved": 1, "pods": pods, "pool": pool}
    return make_recommendation(
        cluster, "advisory", f"job:{job}", {}, impact={**impact, "rule": "topology-misplacement"}
    )


def open_list(cluster, user) -> str:
    return logged_in_client(user).get(f"/clusters/{cluster.name}/recommendations/").content.decode()


def test_one_pod_advice_of_a_rule_in_a_pool_is_one_row_with_its_count(make_cluster, carol):
    cluster = make_cluster("east")
    for job in ("j1", "j2", "j3"):
        advice(cluster, job, "a100")
    advice(cluster, "alone", "h100")
    advice(cluster, "gang", "a100", pods=4)

    html = open_list(cluster, carol)

    group = re.search(
        r'<tr class="advice-group" id="advice-group-topology-misplacement-a100">.*?</tr>',
        html,
        re.S,
    )
    assert group is not None
    assert "3 one-pod jobs in pool a100 (topology-misplacement)" in group.group()
    assert all(f"job:{job}" in group.group() for job in ("j1", "j2", "j3"))
    assert html.count('class="advice-group"') == 1  # h100's one and the 4-pod job: own rows
    assert "job:alone" in html
    assert "job:gang" in html


def test_open_recommendations_are_ranked_by_the_gpu_hours_at_stake(make_cluster, carol):
    cluster = make_cluster("east")
    make_recommendation(cluster, target="queue:big", impact={"stake_gpu_h": 317.1})
    make_recommendation(cluster, target="queue:small", impact={"stake_gpu_h": 3.0})  # newer

    html = open_list(cluster, carol)

    assert html.index("queue:big") < html.index("queue:small")
