"""The ``gang-release`` generator (diagnosis/core/recommend/builtin/gang_release.py): which member
of a deadlock is released and why, a partial gang's own release, and the admission setting
advised per scheduler: the one its adapter declares (``Capabilities.gang_advice``), which the
collection writes into the snapshot's ``scheduler.gang_advice``; a generic one without it."""

from __future__ import annotations

import pytest

from diagnosis.core.recommend.base import RecommendSettings
from diagnosis.core.recommend.builtin.gang_release import GENERIC_POLICY, choose
from diagnosis.core.recommend.engine import recommend
from diagnosis.edge.schedulers.registry import capabilities_of
from tests.support.builders import SnapshotBuilder

NO_REPLAYS = RecommendSettings(simulate=False)


def member(job: str, *, bound: int, min_member: int = 4, gpus: int = 8, hold_s: float = 3600):
    return {
        "id": job,
        "bound_pods": bound,
        "min_member": min_member,
        "missing_pods": min_member - bound,
        "gpus_per_pod": gpus,
        "gpus_held": bound * gpus,
        "hold_s": hold_s,
    }


def test_the_member_whose_gpus_let_the_most_others_run_is_released() -> None:
    # small holds 8 (needs 8 more); big-1 and big-2 hold 24 each (need 8 more). Releasing small
    # lets one big gang complete (32 GPUs); releasing big-1 lets small and big-2 (16 + 32).
    members = [
        member("small", bound=1, min_member=2),
        member("big-1", bound=3),
        member("big-2", bound=3),
    ]

    chosen, scored = choose(members, free_gpus=0, priority={})

    assert chosen["id"] == "big-1"
    assert scored[0]["completes"] == ["small", "big-2"]
    assert [(s["id"], s["gpus_unblocked"]) for s in scored] == [
        ("big-1", 48),
        ("big-2", 48),
        ("small", 32),
    ]


def test_a_tie_goes_to_the_least_progress_then_the_lowest_priority() -> None:
    members = [member("old", bound=2, hold_s=7200), member("young", bound=2, hold_s=600)]

    by_hold, _ = choose(members, free_gpus=0, priority={})
    level = [member("x", bound=2), member("y", bound=2)]
    by_priority, _ = choose(level, free_gpus=0, priority={"x": 10, "y": 1})

    assert by_hold["id"] == "young"
    assert by_priority["id"] == "y"


def declared_advice(scheduler: str) -> str:
    """The admission setting the scheduler's adapter declares."""
    advice = capabilities_of(scheduler).gang_advice
    assert advice is not None, f"{scheduler} declares no gang advice"
    return advice.setting


def deadlocked(scheduler: str = "sim", *, advice: bool = True) -> SnapshotBuilder:
    """Two 2 x 8-GPU gangs, each with one pod bound on one of two full-but-for-them nodes; the
    scheduler block carries the advice the scheduler's adapter declares (as the snapshot's
    collection writes it), unless ``advice`` is False (an older snapshot)."""
    builder = SnapshotBuilder().pool("a100", nodes=2)
    builder.doc["scheduler"]["kind"] = scheduler
    if advice:
        builder.doc["scheduler"]["gang_advice"] = {"setting": declared_advice(scheduler)}
    for i, name in enumerate(("gang-a", "gang-b")):
        builder.job(
            name,
            state="pending",
            pods=2,
            gpus_per_pod=8,
            bound=1,
            nodes=[f"a100-{i:03d}"],
            waited="1h",
            partial_since="40m",
        )
    return builder


def test_a_deadlock_gets_one_release_and_the_admission_advice() -> None:
    run = recommend(deadlocked().build(), settings=NO_REPLAYS)
    if not run.diagnosis.by_rule("gang-deadlock"):
        pytest.fail(f"no deadlock: {[(f.rule, f.subject) for f in run.diagnosis.findings]}")

    releases = [r for r in run.recommendations if r.kind == "gang-release"]
    policy = [r for r in run.recommendations if r.kind == "advisory" and r.target == "pool:a100"]

    assert len(releases) == 1
    (release,) = releases
    assert release.change["from"] == "partial"
    assert release.scheduler_change()["to"] == "requeued"
    assert release.impact["gpus_unblocked"] == 16
    assert not release.preselect
    assert [p.advisory for p in policy] == [
        f"For the admin, to prevent it: {declared_advice('sim')}"
    ]


@pytest.mark.parametrize(
    ("scheduler", "words"),
    [("kueue", "waitForPodsReady"), ("volcano", "minMember"), ("slurm", "one job")],
)
def test_the_advice_names_the_schedulers_own_setting(scheduler: str, words: str) -> None:
    run = recommend(deadlocked(scheduler).build(), settings=NO_REPLAYS)

    (policy,) = [r for r in run.recommendations if r.kind == "advisory"]

    assert words in policy.advisory


def test_a_snapshot_without_the_schedulers_advice_gets_the_generic_one() -> None:
    run = recommend(deadlocked("kueue", advice=False).build(), settings=NO_REPLAYS)

    (policy,) = [r for r in run.recommendations if r.kind == "advisory"]

    assert policy.advisory == f"For the admin, to prevent it: {GENERIC_POLICY}"
    assert policy.basis["scheduler"] == "kueue"
