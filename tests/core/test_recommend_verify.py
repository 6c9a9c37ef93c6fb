"""Verification of applied changes (diagnosis/core/recommend/verify.py, pure core): what each kind
measures, when the setting shows as in effect, and the verdict over the observed cycles."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnosis.core.recommend import verify
from tests.support.builders import SnapshotBuilder

SETTINGS = verify.VerifySettings(cycles=3, max_cycles=6, tolerance=0.10, floor=1.0)


def seen(metric: float | None, *, open_findings: int = 1, in_effect: bool | None = True):
    return verify.Observation(
        as_of="2026-11-29T08:00:00Z",
        metric=metric,
        in_effect=in_effect,
        motivating_open=open_findings,
    )


def pools(free_fragmented: int) -> dict:
    return {"pools": [{"pool": "a100", "buckets": {"free-fragmented": {"gpus": free_fragmented}}}]}


# -- measuring -----------------------------------------------------------------------------------


def test_placement_is_measured_by_the_pools_fragmented_free_gpus() -> None:
    snap = SnapshotBuilder().pool("a100", nodes=2).build()

    assert verify.measure("placement-policy", "pool:a100", snap, pools(12)) == (12.0, "")


def test_a_queue_without_pending_demand_is_not_judged() -> None:
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .queue("team-a", weight=1)
        .job("j1", node="a100-000")
        .build()
    )

    metric, note = verify.measure("queue-weight", "queue:team-a", snap, None)

    assert metric is None
    assert "no pending demand" in note


def test_a_queue_with_pending_demand_is_measured_by_the_gpus_it_holds() -> None:
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .queue("team-a", weight=1)
        .job("j1", node="a100-000")
        .job("j2", state="pending", gpus_per_pod=8)
        .build()
    )

    assert verify.measure("queue-weight", "queue:team-a", snap, None) == (8.0, "")


def gang_cluster():
    """A partial gang (one of two pods bound) and a running job in pool a100."""
    return (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .job("partial", state="pending", pods=2, gpus_per_pod=8, bound=1, nodes=["a100-000"])
        .job("whole", node="a100-001")
        .build()
    )


def test_a_gang_release_is_measured_by_its_pools_gpus_held_by_partial_gangs() -> None:
    accounting = {"pools": [{"pool": "a100", "buckets": {"held-by-partial-gang": {"gpus": 8}}}]}

    assert verify.measure("gang-release", "job:partial", gang_cluster(), accounting) == (8.0, "")


@pytest.mark.parametrize(
    ("job", "expected"), [("partial", False), ("whole", True), ("gone-since", True)]
)
def test_a_gang_release_is_in_effect_once_the_job_holds_no_gpu_while_pending(
    job: str, expected: bool
) -> None:
    assert verify.in_effect("gang-release", f"job:{job}", "requeued", gang_cluster()) is expected


@pytest.mark.parametrize(
    ("kind", "target", "to", "expected"),
    [
        ("placement-policy", "pool:a100", "binpack", True),
        ("placement-policy", "pool:a100", "spread", False),
        ("placement-policy", "pool:h100", "binpack", None),  # not reported
        ("queue-weight", "queue:team-a", 3, True),
        ("queue-weight", "queue:team-a", 4, False),
        ("drain-node", "node:a100-001", "drained", True),  # cordoned counts: jobs still end
        ("drain-node", "node:a100-000", "drained", False),
        ("drain-node", "node:a100-000", "ready", True),  # a rolled-back drain
    ],
)
def test_in_effect_reads_the_snapshot(kind: str, target: str, to, expected) -> None:
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1)
        .node("a100-001", state="cordoned")
        .placement("a100", "binpack")
        .queue("team-a", weight=3)
        .build()
    )

    assert verify.in_effect(kind, target, to, snap) is expected


# -- judging -------------------------------------------------------------------------------------


def good(metric: float | None = 0) -> verify.Observation:
    """A good cycle: the setting in effect, no motivating finding open."""
    return seen(metric, open_findings=0)


def test_good_cycles_in_a_row_verify_it() -> None:
    judgement = verify.judge("placement-policy", 40.0, [seen(30), *[good()] * 3], SETTINGS)

    assert judgement.status == verify.VERIFIED
    assert "was 40" in judgement.reason
    assert judgement.good_cycles == 3


def test_the_first_good_cycle_does_not_verify_it() -> None:
    judgement = verify.judge("placement-policy", 40.0, [seen(30), good()], SETTINGS)

    assert judgement.status == verify.WATCHING
    assert "good cycles in a row: 1 of 3" in judgement.reason


def test_never_verified_while_a_motivating_finding_is_open() -> None:
    observations = [*[good()] * 4, seen(0, open_findings=1)]

    judgement = verify.judge("placement-policy", 40.0, observations, SETTINGS)

    assert judgement.status == verify.WATCHING
    assert not judgement.why[0].ok


def test_an_open_finding_between_good_cycles_starts_the_count_again() -> None:
    observations = [good(), good(), seen(0, open_findings=1), good(), good()]

    assert verify.judge("placement-policy", 40.0, observations, SETTINGS).good_cycles == 2


def test_a_metric_no_better_than_before_is_not_a_good_cycle() -> None:
    judgement = verify.judge("placement-policy", 10.0, [good(10)] * 3, SETTINGS)

    assert judgement.status == verify.WATCHING
    assert judgement.good_cycles == 0


def test_an_unjudged_metric_neither_counts_nor_breaks_the_run() -> None:
    observations = [good(20), good(None), good(20), good(20)]

    judgement = verify.judge("queue-weight", 16.0, observations, SETTINGS)

    assert judgement.status == verify.VERIFIED
    assert judgement.good_cycles == 3


def test_a_verified_change_whose_finding_returns_stays_verified_with_the_signal() -> None:
    observations = [*[good()] * 3, seen(0, open_findings=1)]

    judgement = verify.judge("placement-policy", 40.0, observations, SETTINGS, verified=True)

    assert judgement.status == verify.VERIFIED
    assert judgement.signals == ("finding returned (1 open)",)
    assert "finding returned" in judgement.reason


def test_a_verified_change_whose_metric_got_worse_cycles_in_a_row_regressed() -> None:
    observations = [*[good(2)] * 3, *[good(30)] * 3]

    judgement = verify.judge("placement-policy", 10.0, observations, SETTINGS, verified=True)

    assert judgement.status == verify.REGRESSED
    assert judgement.rollback
    assert "10 before, 30, 30, 30" in judgement.reason


def test_a_verified_change_worse_but_not_cycles_in_a_row_stays_verified() -> None:
    observations = [*[good(2)] * 3, good(30), good(30), good(8), good(30)]

    judgement = verify.judge("placement-policy", 10.0, observations, SETTINGS, verified=True)

    assert judgement.status == verify.VERIFIED


def test_a_verified_change_that_holds_stays_verified() -> None:
    observations = [*[good(2)] * 3, good(5)]

    judgement = verify.judge("placement-policy", 10.0, observations, SETTINGS, verified=True)

    assert judgement.status == verify.VERIFIED
    assert all(c.ok for c in judgement.why)


observation_lists = st.lists(
    st.builds(
        verify.Observation,
        as_of=st.just("2026-11-29T08:00:00Z"),
        metric=st.one_of(st.none(), st.integers(0, 60).map(float)),
        in_effect=st.sampled_from([True, False, None]),
        motivating_open=st.integers(0, 2),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["placement-policy", "queue-weight"]),
    baseline=st.one_of(st.none(), st.integers(0, 60).map(float)),
    observations=observation_lists,
    verified=st.booleans(),
)
def test_the_verdict_and_its_why_never_contradict(kind, baseline, observations, verified) -> None:
    judgement = verify.judge(kind, baseline, observations, SETTINGS, verified=verified)

    assert (judgement.status == verify.VERIFIED) == all(c.ok for c in judgement.why)
    if judgement.status == verify.VERIFIED and not verified:
        assert observations[-1].motivating_open == 0
    if judgement.status == verify.REGRESSED:  # never while a check says it is better
        assert not any(c.ok for c in judgement.why if "metric" in c.label)


def test_findings_still_reported_keep_watching() -> None:
    judgement = verify.judge("placement-policy", 40.0, [seen(30), seen(20)], SETTINGS)

    assert judgement.status == verify.WATCHING


def test_cycles_in_a_row_worse_than_the_baseline_beyond_the_tolerance_are_worse() -> None:
    # baseline 10, tolerance max(1, 10%) = 1: 12, 14, 16 are each worse (lower is better)
    judgement = verify.judge("placement-policy", 10.0, [seen(12), seen(14), seen(16)], SETTINGS)

    assert judgement.status == verify.WORSE
    assert "10 before, 12, 14, 16" in judgement.reason


def test_one_cycle_not_worse_breaks_the_run_of_worse_cycles() -> None:
    judgement = verify.judge("placement-policy", 10.0, [seen(30), seen(9), seen(30)], SETTINGS)

    assert judgement.status == verify.WATCHING


def test_worse_within_the_tolerance_is_not_worse() -> None:
    judgement = verify.judge("placement-policy", 10.0, [seen(11), seen(10), seen(11)], SETTINGS)

    assert judgement.status == verify.WATCHING


def test_fewer_observations_than_cycles_are_never_judged_worse() -> None:
    judgement = verify.judge("placement-policy", 0.0, [seen(50), seen(50)], SETTINGS)

    assert judgement.status == verify.WATCHING


def test_a_queue_holding_fewer_gpus_is_worse() -> None:
    judgement = verify.judge("queue-weight", 16.0, [seen(8), seen(8), seen(8)], SETTINGS)

    assert judgement.status == verify.WORSE


def test_unjudged_cycles_do_not_count_toward_worse() -> None:
    observations = [seen(8), seen(None), seen(None), seen(8)]

    assert verify.judge("queue-weight", 16.0, observations, SETTINGS).status == verify.WATCHING


def test_a_setting_that_does_not_show_is_not_verified() -> None:
    judgement = verify.judge(
        "placement-policy", 40.0, [seen(0, open_findings=0, in_effect=False)], SETTINGS
    )

    assert judgement.status == verify.WATCHING


def test_after_max_cycles_without_a_verdict_it_is_inconclusive() -> None:
    judgement = verify.judge("placement-policy", 40.0, [seen(30)] * 6, SETTINGS)

    assert judgement.status == verify.INCONCLUSIVE


def test_a_drain_is_verified_once_the_node_shows_drained() -> None:
    assert verify.judge("drain-node", None, [seen(None, in_effect=False)], SETTINGS).status == (
        verify.WATCHING
    )
    assert verify.judge("drain-node", None, [seen(None, in_effect=True)], SETTINGS).status == (
        verify.VERIFIED
    )


def test_a_rollback_is_verified_by_its_effect_alone() -> None:
    judgement = verify.judge(
        "placement-policy", None, [seen(99, in_effect=True)], SETTINGS, rollback=True
    )

    assert judgement.status == verify.VERIFIED


def test_settings_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="cycles"):
        verify.VerifySettings(cycles=5, max_cycles=2)


def test_the_cycles_observed_in_all_count_toward_inconclusive() -> None:
    """Only the latest observations are kept; the count of every cycle watched decides."""
    kept = [seen(30)] * 2

    judgement = verify.judge("placement-policy", 40.0, kept, SETTINGS, observed=6)

    assert judgement.status == verify.INCONCLUSIVE
    assert "after 6 cycles" in judgement.reason
