"""The autopilot's pure core (diagnosis/core/autopilot/): a policy's terms checked, matching, each
guard holding a candidate back with its reason, the budget arithmetic under a storm, and the
replay of stored cycles. No database: candidates are built here as the actions build them from
stored recommendations (an Xid 79 drain's codes come from the ``xid`` rule's evidence, NVIDIA's
Xid catalogue via diagnosis/core/xid_catalog.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from diagnosis.core import xid_catalog
from diagnosis.core.autopilot import guards
from diagnosis.core.autopilot.guards import Done, Health, PoolCapacity, decide
from diagnosis.core.autopilot.policy import (
    Budgets,
    Candidate,
    PolicySpec,
    QuietWindow,
    condition_errors,
    mismatch,
    policy_errors,
)
from diagnosis.core.autopilot.replay import ReplayCycle, replay

NOW = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
POOL = PoolCapacity(gpus=1024)
POOLS = {("demo", "a100"): POOL}


def drain_policy(**fields) -> PolicySpec:
    values = {
        "id": 1,
        "name": "xid-drain",
        "kind": "drain-node",
        "condition": {"xid_codes": [79]},
        "mode": "enforce",
        "budgets": Budgets(per_pool_per_hour=1, pool_out_share=0.1, per_hour=5),
    }
    return PolicySpec(**{**values, **fields})


def drain(rec: int, *, node: str | None = None, codes=(79,), pool="a100", **fields) -> Candidate:
    return Candidate(
        rec,
        "demo",
        "drain-node",
        f"node:{node or f'gpu-{rec:03d}'}",
        pool=pool,
        xid_codes=codes,
        gpus_out=8,
        verdict="not simulated",
        **fields,
    )


def test_the_drain_class_is_the_catalogues_critical_hardware_codes() -> None:
    assert {48, 64, 74, 79, 95, 119} <= xid_catalog.drain_class()
    assert not {13, 31, 43} & xid_catalog.drain_class()  # application-level: never a drain


def test_a_drain_condition_outside_the_drain_class_is_refused_naming_the_codes() -> None:
    assert condition_errors("drain-node", {"xid_codes": [79, 13, 43]}) == [
        "condition.xid_codes: not of the catalogue's drain class: 13, 43"
    ]
    assert condition_errors("drain-node", {"xid_codes": [79]}) == []
    assert condition_errors("drain-node", {"xid_codes": "79"}) == [
        "condition.xid_codes: a list of Xid codes"
    ]


def test_binpack_and_weights_are_never_a_policys() -> None:
    assert condition_errors("placement-policy", {}) == [
        "kind: placement (binpack) changes are never applied by a policy"
    ]
    assert condition_errors("queue-weight", {})[0].startswith("kind: queue weights are never")


def test_every_problem_of_a_policy_is_named_at_once() -> None:
    spec = PolicySpec(
        1,
        "bad",
        "gang-release",
        {"min_gpus": 0, "colour": "red"},
        mode="sometimes",
        budgets=Budgets(per_pool_per_hour=-1, pool_out_share=2.0, per_hour=1),
        quiet=QuietWindow(0, 2000),
    )
    assert policy_errors(spec) == [
        "condition.colour: not a field of a gang-release condition",
        "condition.min_gpus: a number of at least 1",
        "condition.min_hold_s: a number of at least 1",
        "mode: one of dry-run, enforce",
        "budgets.per_pool_per_hour: a whole number from 0 to 1000",
        "budgets.pool_out_share: a fraction from 0 to 1",
        "quiet window: minutes of the day from 0 to 1439",
    ]


def test_a_drain_matches_on_its_xid_codes_scope_and_kind() -> None:
    spec = drain_policy(pools=frozenset({"a100"}))
    assert mismatch(spec, drain(1)) == ""
    assert mismatch(spec, drain(1, codes=(48,))) == "no Xid of the condition (codes found: 48)"
    assert mismatch(spec, drain(1, pool="h100")) == "pool h100 is outside the policy's scope"
    assert "outside" in mismatch(drain_policy(clusters=frozenset({"prod"})), drain(1))
    # an empty code list is the whole drain class
    assert mismatch(drain_policy(condition={"xid_codes": []}), drain(1, codes=(48,))) == ""


def test_a_gang_release_matches_only_a_gang_held_long_and_large_enough() -> None:
    spec = PolicySpec(
        2, "gangs", "gang-release", {"min_gpus": 200, "min_hold_s": 3600}, mode="enforce"
    )
    big_and_long = Candidate(9, "demo", "gang-release", "job:s", gpus_held=232, hold_s=4000)
    assert mismatch(spec, big_and_long) == ""
    assert "needs 3600" in mismatch(
        spec, Candidate(9, "demo", "gang-release", "job:s", gpus_held=232, hold_s=600)
    )
    assert "needs 200" in mismatch(
        spec, Candidate(9, "demo", "gang-release", "job:s", gpus_held=88, hold_s=7200)
    )
    assert (
        mismatch(spec, Candidate(9, "demo", "gang-release", "job:s", gpus_held=200, hold_s=3600))
        == ""
    )


def test_a_storm_of_fifty_xids_drains_at_most_the_pool_budget() -> None:
    storm = [drain(i) for i in range(1, 51)]

    decisions = decide([drain_policy()], storm, as_of=NOW, pools=POOLS)

    applied = [d for d in decisions if d.outcome == guards.APPLY]
    assert [d.recommendation for d in applied] == [1]  # the oldest recommendation first
    held = [d for d in decisions if d.outcome == guards.HELD]
    assert len(held) == 49
    assert {d.guard for d in held} == {guards.POOL_HOUR}
    assert "had 1 of at most 1 drain-node action(s) in the last hour" in held[0].reason


def test_the_pool_budget_counts_the_last_hour_not_earlier() -> None:
    spec = drain_policy()
    earlier = Done(1, "drain-node", "demo", "a100", NOW - timedelta(minutes=59), enforced=True)
    long_ago = Done(1, "drain-node", "demo", "a100", NOW - timedelta(minutes=61), enforced=True)

    assert decide([spec], [drain(2)], as_of=NOW, pools=POOLS, done=[earlier])[0].guard == (
        guards.POOL_HOUR
    )
    assert decide([spec], [drain(2)], as_of=NOW, pools=POOLS, done=[long_ago])[0].outcome == (
        guards.APPLY
    )


def test_the_hourly_budget_spans_the_pools() -> None:
    spec = drain_policy(budgets=Budgets(per_pool_per_hour=5, pool_out_share=1.0, per_hour=2))
    pools = {("demo", p): POOL for p in ("a", "b", "c")}
    storm = [drain(1, pool="a"), drain(2, pool="b"), drain(3, pool="c")]

    outcomes = [d.outcome for d in decide([spec], storm, as_of=NOW, pools=pools)]
    assert outcomes == [guards.APPLY, guards.APPLY, guards.HELD]
    assert decide([spec], storm, as_of=NOW, pools=pools)[2].guard == guards.HOUR


def test_a_drain_that_would_put_too_much_of_the_pool_out_is_held() -> None:
    spec = drain_policy(budgets=Budgets(per_pool_per_hour=10, pool_out_share=0.1, per_hour=10))
    small = {("demo", "a100"): PoolCapacity(gpus=64, out=0)}  # 10% of 64 = 6.4 GPUs

    decision = decide([spec], [drain(1)], as_of=NOW, pools=small)[0]
    assert decision.guard == guards.POOL_SHARE
    assert "8 of pool a100's 64 GPUs would be out (12.5%, at most 10.0%)" in decision.reason
    # the GPUs already out count too
    busy = {("demo", "a100"): PoolCapacity(gpus=160, out=9)}  # 9 + 8 > 16
    assert decide([spec], [drain(1)], as_of=NOW, pools=busy)[0].guard == guards.POOL_SHARE
    assert decide([spec], [drain(1)], as_of=NOW, pools={})[0].reason == (
        "the size of pool a100 is unknown"
    )


@pytest.mark.parametrize(
    ("health", "stopped", "guard"),
    [
        (Health(stale="the latest cycle is 900 s old"), False, guards.STALE),
        (Health(degraded="rule xid failed"), False, guards.DEGRADED),
        (Health(), True, guards.KILL_SWITCH),
    ],
)
def test_stale_degraded_data_and_the_kill_switch_hold_everything(health, stopped, guard) -> None:
    decisions = decide(
        [drain_policy()],
        [drain(1), drain(2, pool="b")],
        as_of=NOW,
        pools=POOLS,
        health={"demo": health},
        stopped=stopped,
    )
    assert [d.guard for d in decisions] == [guard, guard]
    assert not any(d.acts for d in decisions)


def test_a_harms_estimate_and_a_pending_one_hold_the_change() -> None:
    harmful = drain(1, harm=("allocation utilization: 60% -> 50%",))
    pending = Candidate(
        2, "demo", "drain-node", "node:b", "a100", (79,), 8, verdict="impact pending"
    )

    first, second = decide([drain_policy()], [harmful, pending], as_of=NOW, pools=POOLS)
    assert (first.guard, second.guard) == (guards.HARMS, guards.PENDING)
    assert "allocation utilization: 60% -> 50%" in first.reason


def test_the_quiet_window_holds_and_wraps_past_midnight() -> None:
    night = QuietWindow(22 * 60, 6 * 60)
    assert night.contains(23 * 60)
    assert night.contains(3 * 60)
    assert not night.contains(12 * 60)
    assert not QuietWindow(60, 60).contains(60)

    decision = decide([drain_policy(quiet=night)], [drain(1)], as_of=NOW, pools=POOLS)[0]
    assert (decision.guard, decision.reason) == (
        guards.QUIET,
        "inside the policy's quiet window (22:00-06:00 UTC)",
    )


def test_a_dry_run_policy_says_what_it_would_apply_within_its_own_budget() -> None:
    spec = drain_policy(mode="dry-run")

    decisions = decide([spec], [drain(1), drain(2)], as_of=NOW, pools=POOLS)
    assert [d.outcome for d in decisions] == [guards.WOULD_APPLY, guards.HELD]
    assert "dry run" in decisions[0].reason


def test_another_policys_real_drains_use_the_budget_but_its_dry_runs_do_not() -> None:
    spec = drain_policy(id=2)
    real = Done(1, "drain-node", "demo", "a100", NOW - timedelta(minutes=5), enforced=True)
    imagined = Done(3, "drain-node", "demo", "a100", NOW - timedelta(minutes=5), enforced=False)

    assert decide([spec], [drain(5)], as_of=NOW, pools=POOLS, done=[real])[0].guard == (
        guards.POOL_HOUR
    )
    assert decide([spec], [drain(5)], as_of=NOW, pools=POOLS, done=[imagined])[0].acts


def test_the_lowest_policy_id_decides_and_unmatched_candidates_get_nothing() -> None:
    dry = drain_policy(id=7, mode="dry-run")
    enforce = drain_policy(id=3)
    decisions = decide([dry, enforce], [drain(1), drain(2, codes=(48,))], as_of=NOW, pools=POOLS)

    assert [(d.policy, d.recommendation, d.outcome) for d in decisions] == [(3, 1, guards.APPLY)]


def test_the_replay_lists_what_would_have_been_done_cycle_by_cycle() -> None:
    # three Xid drains in one pool over two hours, as a week of stored cycles would show them
    cycles = [
        ReplayCycle(NOW, (drain(1),), POOLS),
        ReplayCycle(NOW + timedelta(minutes=10), (drain(1), drain(2)), POOLS),
        ReplayCycle(NOW + timedelta(minutes=70), (drain(2), drain(3)), POOLS),
        ReplayCycle(NOW + timedelta(minutes=80), (drain(3),), POOLS),
    ]

    result = replay(drain_policy(mode="enforce"), list(reversed(cycles)))

    assert result.cycles == 4
    assert [(at, d.recommendation) for at, d in result.would_apply] == [
        (NOW, 1),
        (NOW + timedelta(minutes=70), 2),
    ]
    assert all(d.outcome == guards.WOULD_APPLY for _, d in result.would_apply)
    # drain 3 was still held by the budget at the last cycle: its last reason is kept
    assert [(d.recommendation, d.guard) for _, d in result.held] == [(3, guards.POOL_HOUR)]
    assert result.held_by_guard() == {guards.POOL_HOUR: 1}
