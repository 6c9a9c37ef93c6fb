"""A partly silent exporter (issue #18, defect 2): one node of 64 sends no GPU metrics for a
while (coverage 98.4%, above the 95% guard, so the rules run). The data-starvation finding of the
job on that node was firing: it must stay firing while the job cannot be judged -- however long
past keep_firing_for -- and go on firing, not restart as pending, when the data come back."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.core.rules.registry import get_rule
from diagnosis.models import Finding
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db

NODES = 64


def cluster_at(minutes: float, *, silent: bool = False):
    """64 nodes; job ``starved`` (data-starved: bursty util) on a100-000, busy jobs on the others.
    ``silent``: a100-000's exporter answers nothing (its GPUs have no metrics)."""
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="demo")
    builder.pool("a100", nodes=NODES)
    starved = {} if silent else {"util": 0.3, "util_p10": 0.0, "util_p90": 0.8}
    builder.job("starved", node="a100-000", waited="3h", fb_used_frac=0.5, **starved)
    if silent:  # the builder put fb_used_frac on its GPUs: the silent node sends nothing at all
        builder.doc["gpus"] = [g for g in builder.doc["gpus"] if g["node"] != "a100-000"]
    for i in range(1, NODES):
        builder.job(f"busy-{i}", node=f"a100-{i:03d}", waited="3h", util=0.9, fb_used_frac=0.5)
    answered = (NODES - 1) / NODES if silent else 1.0
    return builder.build(), {"coverage": answered, "judgeable": True}


def cycle(cluster, minutes: float, *, silent: bool = False) -> Finding:
    snap, collection = cluster_at(minutes, silent=silent)
    record_cycle(cluster, snap, collection=collection)
    return Finding.objects.get(cluster=cluster, rule_id="data-starvation", subject="job:starved")


def test_a_silent_jobs_firing_finding_stays_firing_and_goes_on_when_data_return(make_cluster):
    rule = get_rule("data-starvation")
    cluster = make_cluster("demo")
    cycle(cluster, 0)
    fired_at = rule.for_s / 60
    assert cycle(cluster, fired_at).state == "firing"
    silent_until = fired_at + 3 * rule.keep_firing_for_s / 60  # well past keep_firing_for
    assert cycle(cluster, fired_at + 1, silent=True).state == "firing"
    assert cycle(cluster, silent_until, silent=True).state == "firing"
    back = cycle(cluster, silent_until + 1)
    assert back.state == "firing"
    assert [e.to_state for e in back.events.all()] == ["pending", "firing"]
