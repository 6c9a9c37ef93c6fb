"""The ``gang-deadlock`` and ``gang-partial-hold`` rules (docs/rules.md)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from diagnosis.core.rules.engine import run_rules
from diagnosis.core.rules.facts import SnapshotFacts
from tests.support.builders import SnapshotBuilder

GANG_RULES = ["gang-deadlock", "gang-partial-hold"]


def partial(builder, job_id, node, *, pods=2, gpus=4, bound=1, held="1h", **fields):
    """A pending gang of ``pods`` × ``gpus`` with ``bound`` pods bound on ``node``."""
    return builder.job(
        job_id,
        state="pending",
        pods=pods,
        gpus_per_pod=gpus,
        bound=bound,
        node=node,
        partial_since=held,
        **fields,
    )


def two_gangs_sharing_a_node(held_a="1h", held_b="1h", pool="a100") -> SnapshotBuilder:
    """``a`` and ``b`` (2 pods × 4 GPUs, both needed) each hold 4 GPUs of node 000; node 001
    is busy. Neither's missing pod fits on free GPUs; each fits on the other's 4 GPUs."""
    builder = SnapshotBuilder().pool(pool, nodes=2)
    builder.job(f"{pool}-busy", pool=pool, node=f"{pool}-001")
    partial(builder, "a", f"{pool}-000", held=held_a, pool=pool)
    partial(builder, "b", f"{pool}-000", held=held_b, pool=pool)
    return builder


def judge(snapshot, **overrides):
    diagnosis = run_rules(snapshot, overrides or None, only=GANG_RULES)
    assert not diagnosis.errors
    return diagnosis.findings


def subjects(findings):
    return {(f.rule, f.subject) for f in findings}


# -- gang-deadlock -------------------------------------------------------------------------------


def test_two_gangs_waiting_for_each_others_gpus_are_a_deadlock():
    [finding] = judge(two_gangs_sharing_a_node().build())

    assert finding.rule == "gang-deadlock"
    assert finding.subject == "jobs:a+b"
    assert finding.severity == "critical"
    assert finding.evidence["pool_free_gpus"] == 0
    assert finding.evidence["gpus_held"] == 8
    assert finding.evidence["members"][0] == {
        "id": "a",
        "bound": "1/2",
        "bound_pods": 1,
        "min_member": 2,
        "missing_pods": 1,
        "gpus_per_pod": 4,
        "gpus_held": 4,
        "hold_s": 3600.0,
        "held_since": "2026-11-29T07:00:00+00:00",
    }


def test_member_ids_are_sorted_in_the_subject():
    builder = SnapshotBuilder().pool("a100", nodes=2).job("busy", node="a100-001")
    partial(builder, "zeta", "a100-000")
    partial(builder, "alpha", "a100-000")

    [finding] = judge(builder.build())

    assert finding.subject == "jobs:alpha+zeta"


@pytest.mark.parametrize(("held", "deadlock"), [(599, False), (600, True)])
def test_every_member_must_have_held_for_min_hold(held, deadlock):
    findings = judge(two_gangs_sharing_a_node(held_b=held).build())

    assert (("gang-deadlock", "jobs:a+b") in subjects(findings)) is deadlock


def test_without_partial_since_the_hold_counts_from_submission():
    builder = SnapshotBuilder().pool("a100", nodes=2).job("busy", node="a100-001")
    for job_id in ("a", "b"):
        builder.job(
            job_id, state="pending", pods=2, gpus_per_pod=4, bound=1, node="a100-000", waited=700
        )

    [finding] = judge(builder.build())

    assert finding.subject == "jobs:a+b"
    assert finding.evidence["members"][0]["hold_s"] == 700.0


def test_no_deadlock_when_the_missing_pods_fit_on_free_gpus():
    builder = two_gangs_sharing_a_node().node("a100-spare", pool="a100")

    assert judge(builder.build()) == ()


def test_no_deadlock_when_the_others_gpus_are_not_enough():
    """a (2 × 4) holds 4 GPUs of node 000 beside a running job; b (2 × 8) holds node 001.
    a would fit on b's node, but b's missing 8-GPU pod does not fit on a's 4 GPUs."""
    builder = SnapshotBuilder().pool("a100", nodes=3).job("busy", node="a100-002")
    builder.job("half", gpus_per_pod=4, node="a100-000")
    partial(builder, "a", "a100-000", gpus=4)
    partial(builder, "b", "a100-001", gpus=8)

    findings = judge(builder.build())

    assert subjects(findings) == {("gang-partial-hold", "job:a"), ("gang-partial-hold", "job:b")}


def test_missing_pods_fit_only_with_the_others_gpus_counted_per_node():
    """a (2 × 8) holds node 000; b (2 × 8) holds node 001; c (3 × 4) holds 4 GPUs on node 002
    next to 4 free ones. a and b each need a whole node: only the other's node will do. The
    free 4 GPUs plus c's 4 would also give a whole node, so c's GPUs help a and b, and c's
    missing 4-GPU pods fit on the others' nodes: all three are deadlocked."""
    builder = SnapshotBuilder().pool("a100", nodes=3)
    partial(builder, "a", "a100-000", gpus=8)
    partial(builder, "b", "a100-001", gpus=8)
    partial(builder, "c", "a100-002", gpus=4, pods=3, bound=1)

    findings = judge(builder.build())

    assert subjects(findings) == {("gang-deadlock", "jobs:a+b+c")}


def test_a_gang_that_fits_nowhere_even_with_the_others_is_left_out():
    """d needs 16-GPU pods that no 8-GPU node can host: partial hold, not deadlock."""
    builder = two_gangs_sharing_a_node().node("big-node", pool="a100", gpus=16)
    builder.job("d", state="pending", pods=3, gpus_per_pod=16, min_member=3, bound=1,
                node="big-node", partial_since="1h")  # fmt: skip

    findings = judge(builder.build())

    assert subjects(findings) == {
        ("gang-deadlock", "jobs:a+b"),
        ("gang-partial-hold", "job:d"),
    }


def test_disjoint_deadlocks_in_one_pool_are_reported_separately():
    builder = SnapshotBuilder().pool("a100", nodes=2)
    partial(builder, "a", "a100-000")
    partial(builder, "b", "a100-000")
    partial(builder, "c", "a100-001")
    partial(builder, "d", "a100-001")

    findings = judge(builder.build())

    assert subjects(findings) == {("gang-deadlock", "jobs:a+b"), ("gang-deadlock", "jobs:c+d")}


def test_gangs_of_different_pools_do_not_deadlock_each_other():
    """Each pool has one partial gang; the other pool's GPUs are of no use to it."""
    builder = SnapshotBuilder().pool("a100", nodes=2).pool("h100", nodes=2)
    builder.job("busy-a", node="a100-001").job("busy-h", pool="h100", node="h100-001")
    partial(builder, "a", "a100-000", gpus=8)
    partial(builder, "h", "h100-000", gpus=8, pool="h100")

    findings = judge(builder.build())

    assert subjects(findings) == {("gang-partial-hold", "job:a"), ("gang-partial-hold", "job:h")}


def test_deadlock_sets_are_computed_per_min_hold():
    facts = SnapshotFacts(two_gangs_sharing_a_node(held_a="1h", held_b="15m").build())

    assert facts.deadlock_sets(600) == (("a", "b"),)
    assert facts.deadlock_sets(1200) == ()


def test_min_hold_override_of_one_rule_leaves_the_other_alone():
    """Held 15 min: with gang-deadlock's min_hold raised to 20 min, no deadlock is reported,
    and gang-partial-hold (600 s) still sees a and b as a deadlock set and leaves them out."""
    snap = two_gangs_sharing_a_node(held_a="15m", held_b="15m").build()

    assert judge(snap, **{"gang-deadlock": {"min_hold": 1200}}) == ()
    assert subjects(judge(snap, **{"gang-partial-hold": {"min_hold": 1200}})) == {
        ("gang-deadlock", "jobs:a+b")
    }


def test_gangs_on_an_unavailable_node_do_not_count_its_gpus_as_free():
    """The drained node's 8 GPUs are not free, so the gangs stay deadlocked."""
    builder = two_gangs_sharing_a_node().node("a100-drained", pool="a100", state="drained")

    assert subjects(judge(builder.build())) == {("gang-deadlock", "jobs:a+b")}


# -- gang-partial-hold ---------------------------------------------------------------------------


def lone_gang(held="1h", **fields) -> SnapshotBuilder:
    """``g`` (2 × 8 GPUs) holds node 000; node 001 is busy."""
    builder = SnapshotBuilder().pool("a100", nodes=2).job("busy", node="a100-001")
    return partial(builder, "g", "a100-000", gpus=8, held=held, **fields)


def test_partial_gang_that_cannot_complete_is_reported():
    [finding] = judge(lone_gang(util=0.0).build())

    assert finding.rule == "gang-partial-hold"
    assert finding.subject == "job:g"
    assert finding.severity == "warning"
    assert finding.evidence["bound"] == "1/2"
    assert finding.evidence["gpus_held"] == 8
    assert finding.evidence["hold_s"] == 3600.0
    assert finding.evidence["held_util_mean"] == 0.0
    assert finding.evidence["free_pod_slots"] == 0


@pytest.mark.parametrize(("held", "fires"), [(599, False), (600, True)])
def test_partial_hold_min_hold_boundary(held, fires):
    assert bool(judge(lone_gang(held=held).build())) is fires


def test_partial_gang_that_can_complete_on_free_gpus_is_not_reported():
    builder = lone_gang().node("a100-spare", pool="a100")

    assert judge(builder.build()) == ()


def test_min_member_not_pods_decides_what_is_missing():
    """4 pods, min_member 2, 2 bound: the gang can run — it is not a partial gang."""
    builder = SnapshotBuilder().pool("a100", nodes=3).job("busy", node="a100-002")
    builder.job("g", state="pending", pods=4, gpus_per_pod=8, min_member=2, bound=2,
                nodes=["a100-000", "a100-001"], partial_since="1h")  # fmt: skip

    assert judge(builder.build()) == ()


def test_non_gang_job_is_not_a_partial_gang():
    builder = SnapshotBuilder().pool("a100", nodes=2).job("busy", node="a100-001")
    builder.job("g", state="pending", pods=2, gpus_per_pod=8, gang=False, bound=1,
                node="a100-000", partial_since="1h")  # fmt: skip

    assert judge(builder.build()) == ()


# -- the sets against the definition, on small random pools ---------------------------------------


def _fits(job, helpers, snap, facts) -> bool:
    """The definition, directly: the job's missing pods placeable on free GPUs plus the GPUs
    held by ``helpers`` (node by node)."""
    alloc = snap.allocations
    extra = alloc[alloc["job"].isin(helpers)].groupby("node").size()
    room = facts.free_per_node.add(extra, fill_value=0)
    room = room[snap.nodes["pool"] == snap.jobs.at[job, "pool"]]
    size = int(snap.jobs.at[job, "gpus_per_pod"])
    missing = int(snap.jobs.at[job, "min_member"] - snap.jobs.at[job, "bound_pods"])
    return int((room // size).sum()) >= missing


def random_pool(seed: int):
    rng = np.random.default_rng(seed)
    builder = SnapshotBuilder().pool("a100", nodes=int(rng.integers(2, 5)))
    nodes = [n["name"] for n in builder.doc["nodes"]]
    free = dict.fromkeys(nodes, 8)
    for i in range(int(rng.integers(2, 7))):
        size = int(rng.choice([2, 4, 8]))
        pods = int(rng.integers(2, 5))
        roomy = [n for n in nodes if free[n] >= size]
        if not roomy:
            break
        bound = int(rng.integers(1, pods))
        allocation = []
        for _ in range(bound):
            roomy = [n for n in nodes if free[n] >= size]
            if not roomy:
                break
            node = roomy[int(rng.integers(len(roomy)))]
            allocation.append((node, list(range(8 - free[node], 8 - free[node] + size))))
            free[node] -= size
        builder.job(f"g{i}", state="pending", pods=pods, gpus_per_pod=size,
                    allocation=allocation, partial_since="1h")  # fmt: skip
    for node in nodes:  # fill some of what is left with running jobs
        take = int(rng.integers(0, free[node] + 1))
        if take:
            first = 8 - free[node]
            builder.job(
                f"r-{node}", gpus_per_pod=take, allocation=[(node, [*range(first, first + take)])]
            )
            free[node] -= take
    return builder.build()


@pytest.mark.parametrize("seed", range(40))
def test_deadlock_sets_meet_the_definition_and_miss_no_gang(seed):
    snap = random_pool(seed)
    facts = SnapshotFacts(snap)
    partial = facts.partial_gang_placement
    stuck = [j for j in partial.index if not partial.at[j, "can_complete"]]

    sets = facts.deadlock_sets(600)

    for members in sets:
        assert len(members) >= 2
        for job in members:
            assert job in stuck
            assert _fits(job, [m for m in members if m != job], snap, facts)
    # maximality: a stuck gang in some valid set D (searched by brute force) is reported
    reported = {job for members in sets for job in members}
    for size in range(2, len(stuck) + 1):
        for group in itertools.combinations(stuck, size):
            if all(_fits(j, [m for m in group if m != j], snap, facts) for j in group):
                assert set(group) <= reported
