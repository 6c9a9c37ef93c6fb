"""One recommendation per target and per change (issues #17 and #20.3): the recommend step
merges the drafts for one target before writing, and a proposal whose cause flaps keeps its id
for the hold-off window -- a requested change included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.workflow.proposals import record_recommendations
from diagnosis.actions.workflow.review import request_recommendation
from diagnosis.core.recommend.base import RecommendSettings
from diagnosis.core.rules.engine import run_rules
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import Cluster, Finding, Recommendation
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.records import make_recommendation, stepped_seed_config

pytestmark = pytest.mark.django_db

NO_REPLAYS = RecommendSettings(simulate=False)
CYCLE = timedelta(minutes=10)


def recommend_step(cluster, snap) -> dict:
    return record_recommendations(cluster, snap, run_rules(snap), {}, NO_REPLAYS)


def misplaced_and_starved(as_of=AS_OF):
    """Job j1 in two 4-GPU pods on two nodes (one would hold it: topology-misplacement) and
    bursty with memory loaded (data-starvation): two advisory drafts for ``job:j1``."""
    builder = SnapshotBuilder(as_of=as_of)
    for name in ("n1", "n2"):
        builder.node(name, nvlink_domains=[list(range(8))])
    return builder.job(
        "j1",
        pods=2,
        gpus_per_pod=4,
        nodes=["n1", "n2"],
        ran="1h",
        util=0.3,
        util_p10=0.0,
        util_p90=0.9,
        fb_used_frac=0.5,
    ).build()


def fragmented(as_of=AS_OF, *, blocked: bool = True):
    """Four 8-GPU nodes half full under spread; with ``blocked`` an 8-GPU job waits 20 minutes
    (fragmentation on ``pool:a100``: a binpack proposal), without it nothing is wrong."""
    builder = SnapshotBuilder(as_of=as_of).pool("a100", nodes=4).placement("a100", "spread")
    for i in range(4):
        builder.job(f"small{i}", gpus_per_pod=4, node=f"a100-{i:03d}", util=0.9)
    if blocked:
        builder.job("big", state="pending", gpus_per_pod=8, waited="20m")
    return builder.build()


def test_a_job_with_two_advisory_findings_gets_one_recommendation(make_cluster) -> None:
    cluster = make_cluster("two-findings")
    snap = misplaced_and_starved()
    assert {f.rule for f in run_rules(snap).findings if f.subject == "job:j1"} >= {
        "topology-misplacement",
        "data-starvation",
    }

    stats = recommend_step(cluster, snap)

    rec = Recommendation.objects.get(cluster=cluster, kind="advisory", target="job:j1")
    assert stats["merged"] == 1
    assert {f["rule"] for f in rec.impact["findings"]} == {
        "topology-misplacement",
        "data-starvation",
    }
    assert "NVLink" in rec.impact["advisory"]
    assert "data-loader" in rec.impact["advisory"]


def test_the_merged_advisory_is_kept_by_the_next_cycle(make_cluster) -> None:
    cluster = make_cluster("two-findings-again")
    recommend_step(cluster, misplaced_and_starved())

    stats = recommend_step(cluster, misplaced_and_starved(AS_OF + CYCLE))

    assert Recommendation.objects.filter(cluster=cluster, target="job:j1").count() == 1
    assert stats["kept"] >= 1
    assert stats["proposed"] == 0


def test_a_flapping_finding_keeps_one_recommendation(make_cluster) -> None:
    cluster = make_cluster("flapping")
    recommend_step(cluster, fragmented())
    first = Recommendation.objects.get(cluster=cluster, kind="placement-policy")

    gone = recommend_step(cluster, fragmented(AS_OF + CYCLE, blocked=False))
    back = recommend_step(cluster, fragmented(AS_OF + 2 * CYCLE))

    assert gone["expired"] == 0
    assert back["proposed"] == 0
    (only,) = Recommendation.objects.filter(cluster=cluster, kind="placement-policy")
    assert only.pk == first.pk
    assert only.state == "proposed"
    assert only.last_proposed_as_of == AS_OF + 2 * CYCLE


def test_a_requested_change_survives_its_finding_flapping(make_cluster, carol) -> None:
    cluster = make_cluster("flapping-requested")
    recommend_step(cluster, fragmented())
    rec = Recommendation.objects.get(cluster=cluster, kind="placement-policy")
    request_recommendation(rec, carol)

    recommend_step(cluster, fragmented(AS_OF + CYCLE, blocked=False))

    rec.refresh_from_db()
    assert rec.state == "proposed"
    assert rec.requested_by == carol


def test_a_proposal_expires_once_its_cause_stayed_away_past_the_hold_off(
    make_cluster, settings
) -> None:
    settings.GPUOBS_RECOMMENDATION_HOLD_OFF_SECONDS = 1800
    cluster = make_cluster("gone-for-good")
    recommend_step(cluster, fragmented())

    within = recommend_step(cluster, fragmented(AS_OF + timedelta(minutes=29), blocked=False))
    after = recommend_step(cluster, fragmented(AS_OF + timedelta(minutes=31), blocked=False))

    assert (within["expired"], after["expired"]) == (0, 1)
    assert Recommendation.objects.get(cluster=cluster, kind="placement-policy").state == "expired"


def test_a_superseded_change_proposed_again_takes_its_id_back(make_cluster) -> None:
    cluster = make_cluster("back-again")
    binpack = make_recommendation(
        cluster,
        "placement-policy",
        "pool:a100",
        {"from": "spread", "to": "binpack"},
        state="superseded",
        last_proposed_as_of=AS_OF,
    )
    best_fit = make_recommendation(
        cluster, "placement-policy", "pool:a100", {"from": "spread", "to": "best-fit"}
    )

    stats = recommend_step(cluster, fragmented(AS_OF + CYCLE))

    binpack.refresh_from_db()
    best_fit.refresh_from_db()
    assert (stats["revived"], stats["proposed"]) == (1, 0)
    assert binpack.state == "proposed"
    assert best_fit.state == "superseded"
    assert best_fit.status_message.startswith(f"superseded by #{binpack.pk}")


def test_the_demos_binpack_proposal_keeps_its_id_while_fragmentation_flaps(make_cluster) -> None:
    """The seed scenario left under spread: fragmentation is reported from 0:30, resolves around
    1:50 and comes back at 2:30 (docs/recommendations.md, "The demo, before and after"); the
    binpack proposal is one recommendation all along, not a new one each time it comes back."""
    start = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    cluster = make_cluster(
        "demo-flapping",
        scheduler_kind="sim",
        metrics_kind="sim",
        scheduler_config=stepped_seed_config(start, 600),
    )
    finding_states = []
    try:
        for _ in range(16):
            cycle = run_cluster_cycle(Cluster.objects.get(pk=cluster.pk))
            assert cycle.ok, cycle.error
            finding = Finding.objects.filter(
                cluster=cluster, rule_id="fragmentation", subject="pool:a100"
            ).first()
            finding_states.append(finding.state if finding else None)
    finally:
        sim_runtime.forget(cluster.name)

    assert "resolved" in finding_states[3:]  # it flapped
    assert finding_states[-1] != "resolved"  # and came back
    (binpack,) = Recommendation.objects.filter(
        cluster=cluster, kind="placement-policy", target="pool:a100"
    )
    assert binpack.state == "proposed"
