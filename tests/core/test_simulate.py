"""The discrete-event simulator: placement, admission, queue order, faults, changes, outputs."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.engine import run_rules
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.registry import all_rules
from diagnosis.core.simulate.cluster import A100_SXM4_TOPOLOGY, ClusterSpec, PoolSpec, QueueSpec
from diagnosis.core.simulate.faults import (
    DeadlockingGangs,
    Misplace,
    NodeDown,
    RepairAfterDrain,
    Xid,
)
from diagnosis.core.simulate.jobs import DATA_STARVED, HUNG, IDLE, LOW_MFU, JobSpec
from diagnosis.core.simulate.placement import choose_gpus, choose_node
from diagnosis.core.simulate.policy import Policy, drain_node, set_placement, set_queue_weight
from diagnosis.core.simulate.replay import replay, simulator_from_snapshot
from diagnosis.core.simulate.scenarios import (
    NOT_SIMULATED,
    SEED_LEAVES_OUT,
    rule_showcase_scenario,
    seed_scenario,
    small_scenario,
    week_scenario,
)
from diagnosis.core.simulate.simulator import Simulator
from tests.support.builders import BUILTIN_RULE_IDS

HOUR = 3600.0


def cluster(nodes: int = 2, *, queues: tuple[QueueSpec, ...] = ()) -> ClusterSpec:
    return ClusterSpec((PoolSpec.uniform("a100", nodes, **A100_SXM4_TOPOLOGY),), queues)


def simulator(nodes: int = 2, seed: int = 0, **policy: object) -> Simulator:
    return Simulator(cluster(nodes), Policy(**policy), seed)


def job(job_id: str, at: float = 0.0, gpus: int = 1, hours: float = 10.0, **fields) -> JobSpec:
    return JobSpec(job_id, at, hours * HOUR, gpus_per_pod=gpus, **fields)


def nodes_of(sim: Simulator, job_id: str) -> list[str]:
    return [node for node, _ in sim.job_allocation(job_id)]


def snapshot_job(document: dict, job_id: str) -> dict:
    return next(j for j in document["jobs"] if j["id"] == job_id)


# -- placement -------------------------------------------------------------------------------


def test_binpack_and_spread_choose_the_expected_nodes():
    free = np.array([2, 6, 8])
    capacity = np.full(3, 8)
    rng = np.random.default_rng(0)
    assert choose_node("binpack", free, capacity, 2, rng) == 0
    assert choose_node("spread", free, capacity, 2, rng) == 2
    assert choose_node("binpack", free, capacity, 4, rng) == 1


def test_binpack_fills_one_node_where_spread_uses_every_node():
    packed = simulator(3, default_placement="binpack")
    spread = simulator(3, default_placement="spread")
    for sim in (packed, spread):
        sim.submit(job(f"j{i}", at=i) for i in range(3))
        sim.run_until(10)
    assert [nodes_of(packed, f"j{i}")[0] for i in range(3)] == ["a100-000"] * 3
    assert [nodes_of(spread, f"j{i}")[0] for i in range(3)] == ["a100-000", "a100-001", "a100-002"]


def test_packing_prefers_partly_used_nodes_over_the_tightest_fit():
    free = np.array([8, 5, 3])
    capacity = np.full(3, 8)
    rng = np.random.default_rng(0)
    assert choose_node("packing", free, capacity, 2, rng) == 1
    assert choose_node("binpack", free, capacity, 2, rng) == 2
    assert choose_node("packing", np.array([8, 8]), np.full(2, 8), 2, rng) == 0


def test_gpus_inside_a_node_stay_in_one_numa_node():
    domains = (0,) * 8
    numa = A100_SXM4_TOPOLOGY["numa"]
    assert choose_gpus(domains, numa, 0xFF, 4) == (0, 1, 2, 3)
    assert choose_gpus(domains, numa, 0b11110110, 2) == (1, 2)
    assert choose_gpus(domains, numa, 0b11111100, 4) == (4, 5, 6, 7)


def test_misplaced_tp_job_spans_nodes_and_numa_nodes():
    sim = simulator(2, default_placement="binpack")
    sim.submit(JobSpec("tp", 10, HOUR, pods=2, gpus_per_pod=4, tp=8))
    sim.inject(Misplace(0, "tp"))
    sim.run_until(20)
    allocation = sim.job_allocation("tp")
    assert sorted(node for node, _ in allocation) == ["a100-000", "a100-001"]
    numa = A100_SXM4_TOPOLOGY["numa"]
    assert all(len({numa[g] for g in gpus}) == 2 for _, gpus in allocation)


# -- gang admission --------------------------------------------------------------------------


def test_all_or_nothing_gang_holds_no_gpus_while_it_cannot_start():
    sim = simulator(2)
    sim.submit([job("busy", gpus=8), JobSpec("gang", 10, HOUR, pods=2, gpus_per_pod=8)])
    sim.run_until(HOUR)
    document = sim.snapshot()
    gang = snapshot_job(document, "gang")
    assert gang["state"] == "pending"
    assert gang["allocation"] == []
    assert gang["partial_since"] is None


def test_partial_binding_deadlocks_two_gangs_and_the_snapshot_shows_them():
    sim = simulator(4)
    sim.inject(DeadlockingGangs(60, "a100", pods=3))
    sim.run_until(2 * HOUR)
    document = sim.snapshot()
    for gang_id in ("gang-a", "gang-b"):
        gang = snapshot_job(document, gang_id)
        assert gang["state"] == "pending"
        assert len(gang["allocation"]) == 2
        assert gang["partial_since"] == "2026-11-29T00:01:00Z"
        assert gang["pending_reason"] == "PartiallyBound"
    partial = SnapshotFacts(snapshot_format.load(document)).partial_gangs
    assert sorted(partial.index) == ["gang-a", "gang-b"]


# -- queue order -----------------------------------------------------------------------------


def _contended(queue_order: str) -> Simulator:
    """One node and two queues of weight 1: queue ``big`` holds 4 GPUs, queue ``small`` 1, and
    a 3-GPU filler ends at 100 s; then ``big-2`` (t=10) and ``small-1`` (t=20) wait for the
    filler's 3 GPUs."""
    queues = (QueueSpec("big", weight=1), QueueSpec("small", weight=1))
    sim = Simulator(cluster(1, queues=queues), Policy(queue_order=queue_order))
    sim.submit(
        [
            job("big-1", 0, 4, tenant="big"),
            job("small-0", 0, 1, tenant="small"),
            job("filler", 0, 3, hours=100 / HOUR, tenant="big"),
            job("big-2", 10, 3, tenant="big"),
            job("small-1", 20, 3, tenant="small"),
        ]
    )
    return sim


def _states(sim: Simulator, *job_ids: str) -> tuple[str, ...]:
    return tuple(sim.job_state(job_id) for job_id in job_ids)


def test_fair_share_starts_the_job_of_the_under_served_queue():
    sim = _contended("fair-share")
    sim.run_until(200)
    assert _states(sim, "small-1", "big-2") == ("running", "pending")


def test_fifo_starts_the_earlier_job():
    sim = _contended("fifo")
    sim.run_until(200)
    assert _states(sim, "big-2", "small-1") == ("running", "pending")


def test_priority_order_starts_the_higher_priority_job_first():
    sim = simulator(1, queue_order="priority")
    sim.submit(
        [
            job("running", 0, 8, hours=100 / HOUR),
            job("low", 10, 8, priority=0),
            job("high", 20, 8, priority=10),
        ]
    )
    sim.run_until(200)
    assert _states(sim, "high", "low") == ("running", "pending")


def test_queue_weight_change_reorders_from_the_next_pass():
    sim = _contended("fair-share")
    sim.run_until(50)
    sim.apply(set_queue_weight("big", 100))
    sim.run_until(200)
    assert _states(sim, "big-2", "small-1") == ("running", "pending")


# -- backfill --------------------------------------------------------------------------------


def _blocked_big_job(backfill: bool) -> Simulator:
    sim = simulator(1, backfill=backfill)
    sim.submit([job("half", 0, 4), job("big", 10, 8), job("small", 20, 2)])
    sim.run_until(HOUR)
    return sim


def test_backfill_lets_a_small_job_pass_a_blocked_big_one():
    sim = _blocked_big_job(backfill=True)
    assert sim.job_state("big") == "pending"
    assert sim.job_state("small") == "running"


def test_without_backfill_a_blocked_job_holds_back_later_ones():
    sim = _blocked_big_job(backfill=False)
    assert sim.job_state("small") == "pending"
    document = sim.snapshot()
    assert snapshot_job(document, "small")["pending_reason"] == "Priority"
    assert snapshot_job(document, "big")["pending_reason"] == "Unschedulable"


def test_tick_runs_passes_only_on_multiples_of_it():
    sim = simulator(1, tick_s=60)
    sim.submit(job("waits", 10, 1))
    sim.run_until(59)
    assert sim.job_state("waits") == "pending"
    sim.run_until(60)
    assert sim.job_state("waits") == "running"


# -- faults ----------------------------------------------------------------------------------


def _xid_on_a_job(index: int, code: int) -> Simulator:
    """A 2-GPU job ``victim`` on one node; at 600 s its node's GPU ``index`` reports Xid
    ``code``; run to 900 s."""
    sim = simulator(1)
    sim.submit(job("victim", 0, 2))
    sim.inject(Xid(600, "a100-000", index, code))
    sim.run_until(900)
    return sim


def test_xid_79_fails_the_job_and_marks_the_gpu_unhealthy():
    sim = _xid_on_a_job(1, 79)
    assert sim.job_state("victim") == "failed"
    assert sim.gpu_health("a100-000", 1) == "unhealthy"
    gpu = next(g for g in sim.snapshot()["gpus"] if g["node"] == "a100-000" and g["index"] == 1)
    assert gpu["health"] == "unhealthy"
    assert gpu["xid"] == [{"code": 79, "time": "2026-11-29T00:10:00Z"}]


def test_application_xid_fails_the_job_but_keeps_the_gpu():
    sim = _xid_on_a_job(0, 13)
    assert sim.job_state("victim") == "failed"
    assert sim.gpu_health("a100-000", 0) == "ok"


def test_unhealthy_gpu_is_never_placed_on_again():
    sim = simulator(1)
    sim.inject(Xid(0, "a100-000", 0, 79))
    sim.submit(job("eight", 10, 8))
    sim.submit(job("seven", 20, 7))
    sim.run_until(60)
    assert sim.job_state("eight") == "pending"
    assert 0 not in sim.job_allocation("seven")[0][1]


def test_node_down_fails_its_jobs():
    sim = simulator(2)
    sim.submit(job("on-0", 0, 8))
    sim.inject(NodeDown(100, "a100-000"))
    sim.run_until(200)
    assert sim.job_state("on-0") == "failed"
    assert sim.node_state_of("a100-000") == "down"


def gpu_health(sim: Simulator, node: str, index: int) -> str:
    gpus = sim.snapshot()["gpus"]
    return next(g["health"] for g in gpus if (g["node"], g["index"]) == (node, index))


def test_a_gpu_fatal_xid_is_repaired_only_after_its_node_is_drained():
    """Issue #32 item 13: the demo's recovery -- the technician comes once the node is out."""
    sim = simulator(2)
    sim.inject([Xid(100, "a100-000", 3, 79), RepairAfterDrain(100, "a100-000", 3, after_s=600)])
    sim.run_until(3 * HOUR)
    assert gpu_health(sim, "a100-000", 3) == "unhealthy"  # nobody drained it: no repair
    sim.apply(drain_node("a100-000", "Xid 79"))
    sim.run_until(3 * HOUR + 599)
    assert gpu_health(sim, "a100-000", 3) == "unhealthy"
    sim.run_until(3 * HOUR + 600)
    assert gpu_health(sim, "a100-000", 3) == "ok"
    assert sim.node_state_of("a100-000") == "drained"  # back in service only when resumed


def test_a_repair_watch_set_on_a_drained_node_starts_at_once():
    sim = simulator(1)
    sim.inject(Xid(10, "a100-000", 0, 79))
    sim.apply(drain_node("a100-000", "Xid 79"))
    sim.run_until(100)
    sim.inject(RepairAfterDrain(100, "a100-000", 0, after_s=50))
    sim.run_until(149)
    assert gpu_health(sim, "a100-000", 0) == "unhealthy"
    sim.run_until(150)
    assert gpu_health(sim, "a100-000", 0) == "ok"


# -- changes ---------------------------------------------------------------------------------


def test_drain_evicts_running_jobs_and_keeps_the_node_out_of_placement():
    sim = simulator(2)
    sim.submit(job("first", 0, 8))
    sim.run_until(100)
    assert nodes_of(sim, "first") == ["a100-000"]
    sim.apply(drain_node("a100-000", "Xid 79"))
    sim.submit(job("later", 110, 1))
    sim.run_until(200)
    assert sim.node_state_of("a100-000") == "drained"
    assert nodes_of(sim, "first") == ["a100-001"]
    assert sim.job_state("later") == "pending"
    assert snapshot_job(sim.snapshot(), "first")["preemptions"] == 1


def test_drain_without_eviction_lets_jobs_finish_first():
    sim = simulator(1)
    sim.submit(job("running", 0, 2, hours=0.5))
    sim.run_until(100)
    sim.apply(drain_node("a100-000", "maintenance", evict=False))
    sim.run_until(200)
    assert sim.node_state_of("a100-000") == "cordoned"
    assert sim.job_state("running") == "running"
    sim.run_until(HOUR)
    assert sim.node_state_of("a100-000") == "drained"
    assert sim.job_state("running") == "completed"


def test_placement_change_takes_effect_on_the_next_pass():
    sim = simulator(3, default_placement="spread")
    sim.submit(job("first", 0, 1))
    sim.run_until(10)
    sim.apply(set_placement("a100", "binpack"))
    assert sim.snapshot()["scheduler"]["placement"] == {"a100": "spread"}
    sim.submit(job("second", 20, 1))
    sim.run_until(30)
    assert sim.snapshot()["scheduler"]["placement"] == {"a100": "binpack"}
    assert nodes_of(sim, "second") == ["a100-000"]


# -- outputs ---------------------------------------------------------------------------------


def test_snapshot_of_the_small_scenario_loads():
    scenario = small_scenario(0)
    document = scenario.build().snapshot(scenario.snapshot_at)
    snap = snapshot_format.load(document)
    assert snap.total_gpus == 32
    assert set(snap.jobs["state"]) >= {"running", "completed"}
    assert snap.placement("a100") == "spread"


def test_same_seed_gives_the_same_snapshot_document():
    scenario = small_scenario(3)
    first = scenario.build().snapshot(scenario.snapshot_at)
    second = scenario.build().snapshot(scenario.snapshot_at)
    assert first == second


def test_another_seed_gives_other_metrics():
    scenario = small_scenario(3)
    first = scenario.build(seed=1).snapshot(scenario.snapshot_at)
    second = scenario.build(seed=2).snapshot(scenario.snapshot_at)
    busy = [i for i, g in enumerate(first["gpus"]) if g["util"]["mean"] > 0.5]
    assert busy
    assert [first["gpus"][i]["util"] for i in busy] != [second["gpus"][i]["util"] for i in busy]


def test_events_are_those_since_the_previous_snapshot():
    sim = simulator(1)
    sim.submit(job("a", 0, 1, hours=0.1))
    first = sim.snapshot(100)
    second = sim.snapshot(HOUR)
    assert [e["kind"] for e in first["events"]] == ["submitted", "scheduled", "started"]
    assert [e["kind"] for e in second["events"]] == ["completed"]


def test_profiles_shape_the_window_statistics():
    sim = simulator(3)
    sim.submit(
        [
            job("starved", 0, 8, profile=DATA_STARVED),
            job("idle", 0, 8, profile=IDLE),
            job("low", 0, 8, profile=LOW_MFU),
        ]
    )
    snap = snapshot_format.load(sim.snapshot(HOUR))
    stats = SnapshotFacts(snap).job_gpu_stats
    assert stats.at["starved", "util_mean"] == pytest.approx(0.3, abs=0.08)
    assert stats.at["starved", "util_p10"] < 0.05
    assert stats.at["starved", "util_p90"] > 0.8
    assert stats.at["idle", "util_mean"] < 0.05
    assert stats.at["idle", "fb_used_frac_mean"] > 0.2
    assert stats.at["low", "util_mean"] == pytest.approx(0.8, abs=0.05)
    assert stats.at["low", "tensor_active_mean"] == pytest.approx(0.1, abs=0.03)


def test_metric_series_agrees_with_the_snapshot_window():
    scenario = small_scenario(0)
    sim = scenario.build()
    document = sim.snapshot(scenario.snapshot_at)
    window = document["window_s"]
    series = sim.metric_series(sim.now - window, sim.now, 15)
    assert series.values["util"].shape == (32, window // 15 + 1)
    reported = np.array([g["util"]["mean"] for g in document["gpus"]])
    assert np.allclose(series.values["util"].mean(axis=1), reported, atol=1e-3)


def test_summary_reports_allocation_over_time():
    sim = simulator(2)
    sim.submit(job("half", 0, 8, hours=2))
    sim.run_until(2 * HOUR)
    summary = sim.summary()
    assert summary.allocation_util == pytest.approx(0.5)
    assert summary.activity_util == pytest.approx(0.5 * 0.92, abs=0.01)
    assert summary.jobs["completed"] == 1
    assert summary.waits_by_size["2-8"].p50_s == 0


def test_a_short_week_runs_to_the_end():
    scenario = week_scenario(gpus=64, jobs=300, seed=1)
    sim = scenario.build()
    sim.run_until(7 * 86400)
    summary = sim.summary()
    assert summary.jobs["submitted"] == 300
    assert 0 < summary.allocation_util <= 1


# -- every rule on the purpose-built scenario ------------------------------------------------


@pytest.fixture(scope="module")
def showcase_diagnosis():
    scenario = rule_showcase_scenario(0)
    document = scenario.build().snapshot(scenario.snapshot_at)
    return run_rules(snapshot_format.load(document)), scenario.notes


SIMULATED_RULE_IDS = [rule_id for rule_id in BUILTIN_RULE_IDS if rule_id not in NOT_SIMULATED]


def test_only_named_registered_rules_are_left_out_of_the_showcase():
    assert set(NOT_SIMULATED) <= set(all_rules())
    assert all(NOT_SIMULATED.values())  # each says why


def test_the_showcase_does_not_fire_the_rules_it_leaves_out(showcase_diagnosis):
    diagnosis, _ = showcase_diagnosis
    assert not [f for rule_id in NOT_SIMULATED for f in diagnosis.by_rule(rule_id)]


@pytest.mark.parametrize("rule_id", SIMULATED_RULE_IDS)
def test_every_rule_fires_on_the_showcase_scenario(showcase_diagnosis, rule_id):
    assert rule_id in all_rules()
    diagnosis, notes = showcase_diagnosis
    assert not diagnosis.errors
    expected_subject = notes[rule_id].split(" ")[0]
    assert expected_subject in {f.subject for f in diagnosis.by_rule(rule_id)}


def test_seed_scenario_fires_every_rule_within_its_first_hours():
    scenario = seed_scenario(0)
    sim = scenario.build()
    fired: set[str] = set()
    for hours in (0.75, 2.0, 3.0, 4.5):
        diagnosis = run_rules(snapshot_format.load(sim.snapshot(hours * HOUR)))
        assert not diagnosis.errors
        fired |= {f.rule for f in diagnosis.findings}
    expected = {
        rule_id
        for rule_id in BUILTIN_RULE_IDS
        if rule_id in all_rules() and rule_id not in SEED_LEAVES_OUT
    }
    assert expected <= fired


# -- replay ----------------------------------------------------------------------------------


def test_replay_from_a_snapshot_reproduces_running_allocations():
    scenario = rule_showcase_scenario(0)
    document = scenario.build().snapshot(scenario.snapshot_at)
    rebuilt = simulator_from_snapshot(document).snapshot()
    held = {j["id"]: j["allocation"] for j in document["jobs"] if j["allocation"]}
    assert held
    assert {j["id"]: j["allocation"] for j in rebuilt["jobs"] if j["allocation"]} == held
    assert [n["state"] for n in rebuilt["nodes"]] == [n["state"] for n in document["nodes"]]
    assert [g["health"] for g in rebuilt["gpus"]] == [g["health"] for g in document["gpus"]]


def test_replay_gives_one_summary_per_seed_and_is_deterministic():
    scenario = small_scenario(0)
    document = scenario.build().snapshot(scenario.snapshot_at)
    first = replay(document, None, 2 * HOUR, seeds=(0, 1))
    again = replay(document, None, 2 * HOUR, seeds=(0, 1))
    assert len(first) == 2
    assert [s.as_dict() for s in first] == [s.as_dict() for s in again]


# -- hidden waste: the simulated signatures ------------------------------------------------------


def test_a_hung_gang_spins_at_low_power_with_no_tensor_or_dram_activity():
    sim = simulator(2, seed=1)
    sim.submit([job("stuck", 0, 8, pods=2, profile=HUNG)])
    sim.run_until(HOUR)
    snap = snapshot_format.load(sim.snapshot())
    gpus = snap.gpus  # the gang holds all 16
    assert gpus["util_mean"].min() > 0.9
    assert gpus["tensor_active_mean"].max() < 0.02
    assert gpus["dram_active_mean"].max() < 0.05
    assert (gpus["power_w_mean"] / gpus["power_limit_w_max"]).max() < 0.3
    assert [f.subject for f in run_rules(snap).by_rule("hung-collective")] == ["job:stuck"]
