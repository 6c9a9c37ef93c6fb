"""The ``starvation`` rule (docs/rules.md)."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis.core.rules.builtin.starvation import _hours, _hours_of, _suffix_counts
from diagnosis.core.rules.engine import run_rules
from tests.support.builders import SnapshotBuilder


def waiting(waited="5h", overtakers=3, **job) -> SnapshotBuilder:
    """A full pool (its job submitted before), a pending 8-GPU job ``big`` and ``overtakers``
    8-GPU jobs submitted two hours ago that ran and completed since."""
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("filler", node="a100-000", waited="6h")
    builder.job("big", state="pending", waited=waited, **job)
    for i in range(overtakers):
        builder.job(f"later{i}", state="completed", waited="2h", started="2h")
    return builder


def findings(snapshot, **overrides):
    diagnosis = run_rules(
        snapshot, {"starvation": overrides} if overrides else None, only=["starvation"]
    )
    assert not diagnosis.errors
    return diagnosis.findings


def test_fires_for_a_job_overtaken_by_later_jobs():
    [finding] = findings(waiting().build())

    assert finding.subject == "job:big"
    assert finding.severity == "warning"
    assert finding.evidence["wait_s"] == 5 * 3600
    assert finding.evidence["overtaken_by"] == 3
    assert finding.evidence["overtakers"] == ["later0", "later1", "later2"]
    assert finding.evidence["cause"] == "order"


@pytest.mark.parametrize(("waited", "fires"), [(4 * 3600 - 1, False), (4 * 3600, True)])
def test_min_wait_boundary(waited, fires):
    assert bool(findings(waiting(waited=waited).build())) is fires


@pytest.mark.parametrize(("overtakers", "fires"), [(2, False), (3, True)])
def test_min_overtaken_boundary(overtakers, fires):
    assert bool(findings(waiting(overtakers=overtakers).build())) is fires


def test_thresholds_can_be_overridden():
    snap = waiting(waited="3h", overtakers=2).build()

    assert not findings(snap)
    assert findings(snap, min_wait=3 * 3600, min_overtaken=2)


@pytest.mark.parametrize(
    ("submitted", "started"),
    [
        # submitted before ``big`` (6 h ago) but started after it was submitted
        ("6h", "1h"),
        # submitted at the same moment as ``big``
        ("5h", "1h"),
        # malformed times: submitted after ``big`` but started before ``big`` was submitted
        ("2h", "6h"),
    ],
    ids=["submitted-before-it", "submitted-at-the-same-moment", "started-before-it-was-submitted"],
)
def test_jobs_that_did_not_overtake_it_do_not_count(submitted, started):
    builder = waiting(overtakers=2)
    builder.job("other", state="completed", gpus_per_pod=1, waited=submitted, started=started)

    assert not findings(builder.build())


def test_overtakers_in_any_state_count():
    builder = waiting(overtakers=1)
    builder.job("failed", state="failed", gpus_per_pod=1, waited="2h", started="2h")
    builder.job("preempted", state="preempted", gpus_per_pod=1, waited="2h", started="2h")

    [finding] = findings(builder.build())

    assert finding.evidence["overtaken_by"] == 3


def test_jobs_that_never_started_are_not_overtakers():
    builder = waiting(overtakers=2).job("queued", state="pending", gpus_per_pod=1, waited="1h")

    assert not findings(builder.build())


def test_jobs_of_another_pool_are_not_overtakers():
    builder = waiting(overtakers=2).pool("h100", nodes=1)
    builder.job("other", state="completed", pool="h100", gpus_per_pod=1, waited="1h", started="1h")

    assert not findings(builder.build())


def test_job_holding_pods_is_not_judged():
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job(
        "gang", state="pending", pods=2, gpus_per_pod=4, bound=1, node="a100-000", waited="5h"
    )
    for i in range(3):
        builder.job(f"later{i}", state="completed", gpus_per_pod=1, waited="2h", started="2h")

    assert not findings(builder.build())


def test_long_overtaker_lists_are_capped_but_counted():
    [finding] = findings(waiting(overtakers=25).build())

    assert finding.evidence["overtaken_by"] == 25
    assert len(finding.evidence["overtakers"]) == 20


def test_overtakers_are_listed_in_submission_order():
    builder = waiting(overtakers=0)
    for name, ago in [("c", "1h"), ("a", "3h"), ("b", "2h")]:
        builder.job(name, state="completed", gpus_per_pod=1, waited=ago, started=ago)

    [finding] = findings(builder.build())

    assert finding.evidence["overtakers"] == ["a", "b", "c"]


# -- cause ---------------------------------------------------------------------------------------


def overtaken_by(*jobs: tuple[int, int], **big) -> SnapshotBuilder:
    """``big`` (pending 5 h) overtaken by completed jobs given as (priority, GPUs)."""
    builder = waiting(overtakers=0, **big)
    for i, (priority, gpus) in enumerate(jobs):
        builder.job(
            f"o{i}", state="completed", priority=priority, gpus_per_pod=gpus, waited="1h",
            started="1h",
        )  # fmt: skip
    return builder


def cause(builder: SnapshotBuilder) -> str:
    [finding] = findings(builder.build())
    return finding.evidence["cause"]


@pytest.mark.parametrize(
    ("priorities", "expected"),
    [
        ([10, 10, 0, 0], "priority"),  # exactly half higher
        ([10, 0, 0, 0], "order"),  # a quarter
        ([0, 0, 0], "order"),  # equal is not higher
    ],
)
def test_cause_priority_when_at_least_half_had_higher_priority(priorities, expected):
    builder = overtaken_by(*[(p, 8) for p in priorities])

    assert cause(builder) == expected


@pytest.mark.parametrize(("request_gpus", "expected"), [(20, "size"), (19, "order")])
def test_cause_size_from_four_times_the_median_request(request_gpus, expected):
    """Overtakers ask 1, 2, 8 and 8 GPUs: the median is 5, so 20 GPUs is 4× and 19 is not."""
    builder = overtaken_by((0, 1), (0, 2), (0, 8), (0, 8), gpus_per_pod=request_gpus)

    assert cause(builder) == expected


def test_priority_comes_before_size():
    builder = overtaken_by((5, 1), (5, 1), (5, 1), gpus_per_pod=8)

    assert cause(builder) == "priority"


@pytest.mark.parametrize(("deserved", "expected"), [(9, "share"), (8, "order")])
def test_cause_share_when_the_tenant_holds_less_than_it_deserves(deserved, expected):
    """team-a holds 8 GPUs (the filler job); it deserves 9 (share) or 8 (not short)."""
    builder = overtaken_by((0, 8), (0, 8), (0, 8)).queue("team-a", deserved_gpus=deserved)

    [finding] = findings(builder.build())

    assert finding.evidence["cause"] == expected
    assert finding.evidence["tenant_held_gpus"] == 8
    assert finding.evidence["tenant_deserved_gpus"] == deserved


def test_share_sums_the_deserved_gpus_of_all_the_tenants_queues():
    builder = overtaken_by((0, 8), (0, 8), (0, 8))
    builder.queue("team-a", deserved_gpus=4).queue("team-a-2", tenant="team-a", deserved_gpus=5)

    assert cause(builder) == "share"


def test_no_share_cause_without_deserved_gpus():
    builder = overtaken_by((0, 8), (0, 8), (0, 8)).queue("team-a", weight=2)

    assert cause(builder) == "order"


def test_size_comes_before_share():
    builder = overtaken_by((0, 1), (0, 1), (0, 1), gpus_per_pod=8)
    builder.queue("team-a", deserved_gpus=100)

    assert cause(builder) == "size"


# -- the vectorised count against a direct one ----------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_overtaker_counts_match_a_direct_count(seed):
    rng = np.random.default_rng(seed)
    builder = SnapshotBuilder().pool("a100", nodes=1).pool("h100", nodes=1)
    jobs = []
    for i in range(60):
        pool = ["a100", "h100", None][rng.integers(3)]
        submitted = int(rng.integers(0, 10)) * 1800
        if rng.random() < 0.4:
            builder.job(f"p{i}", state="pending", pool=pool, gpus_per_pod=16, waited=submitted)
            jobs.append((f"p{i}", pool, submitted, None))
        else:
            started = max(0, submitted - int(rng.integers(0, 4)) * 1800)
            if rng.random() < 0.1:
                started = submitted + 1800  # malformed: started before submitted
            builder.job(
                f"r{i}", state="completed", pool=pool, gpus_per_pod=1, waited=submitted,
                started=started,
            )  # fmt: skip
            jobs.append((f"r{i}", pool, submitted, started))
    snap = builder.build()

    counted = {f.subject[4:]: f.evidence["overtaken_by"] for f in findings(snap, min_overtaken=1)}

    expected = {}
    for job_id, pool, ago, started in jobs:
        if started is not None or ago < 4 * 3600:
            continue
        n = sum(
            1
            for _, other_pool, other_ago, other_started in jobs
            if other_pool == pool
            and other_started is not None
            and other_ago < ago  # submitted after it
            and other_started <= ago  # started since it was submitted
        )
        if n:
            expected[job_id] = n
    assert counted == expected


WAITS = [
    *range(0, 9000, 7),
    *(360 * k + 180 for k in range(10, 300)),  # ties of the hours' tenth
    *(60 * k + 30 for k in range(0, 60)),  # ties of the minutes
    0.5,
    59.999,
    3599.9,
    3600.0,
    14400.25,
    86400.05,
    1e17,
]


def test_each_waits_phrase_is_the_one_formatting_shows():
    waits = np.array(WAITS, dtype=float)

    assert _hours_of(waits) == [_hours(w) for w in waits.tolist()]


def test_suffix_counts_count_each_value_from_each_start():
    values = np.random.default_rng(3).choice([0, 50, 100, 7], size=300)
    starts = np.array([0, 1, 150, 299, 300])

    distinct, counts = _suffix_counts(values, starts)

    expected = [[int((values[s:] == d).sum()) for d in distinct] for s in starts]
    assert counts.tolist() == expected
