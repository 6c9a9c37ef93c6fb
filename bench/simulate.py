"""Time the discrete-event simulator and compare placements on the same arrivals.

    PYTHONPATH=. python bench/simulate.py             # week benchmark + placement comparison
    PYTHONPATH=. python bench/simulate.py --runs 3    # best of 3 timings
    PYTHONPATH=. python bench/simulate.py --seeds 3   # placement figures over seeds 0..2
    PYTHONPATH=. python bench/simulate.py --scale     # replays at 2,048 vs 16,384 GPUs, and
                                                      # the impact models (issue #17); best of
                                                      # 5 runs per size unless --runs says

Budget (docs/architecture.md#performance-budget): a simulated week of a 1,024-GPU cluster with
10,000 jobs <= 5 s on 2 cores. The placement comparison runs the seed (demo) scenario and the
benchmark week under each placement with every other setting and every arrival identical (the seed
workload without its injected faults, which would hit different jobs under different placements),
and prints what the simulator says -- whatever it says.

``--scale`` (issue #17) replays bench/rules.py's synthetic snapshots (50 tenants, one queue
each) at 2,048 and 16,384 GPUs under weighted fair share, one seed, ``--horizon`` simulated
seconds: the 16k replay must take at most 8x the 2k one (CPU seconds, best of ``--runs`` runs of
each, the sizes taking turns so that a machine busy for a while slows both; the budget is the
ratio). It then estimates the impact of the queue-weight drafts of the 16k
snapshot with the full model (3 seeds x 3 h) and the reduced one the impact task uses at that
size (1 seed x 1 h), prints the CPU seconds of each estimate (the current setting's replays
are shared, as the task's cache shares them) and how far the reduced estimates are from the
full ones (verdicts that agree, error of the target queue's predicted share).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.recommend.base import RecommendContext, RecommendSettings
from diagnosis.core.recommend.builtin import queue_weight
from diagnosis.core.recommend.impact import (
    gpu_hours_at_stake,
    impact_settings_for,
    replay_policy,
    simulated_impact,
)
from diagnosis.core.rules.engine import run_rules
from diagnosis.core.simulate.replay import replay
from diagnosis.core.simulate.scenarios import Scenario, seed_scenario, week_scenario
from diagnosis.core.simulate.summary import Summary

BUDGET_SECONDS = 5.0
WEEK_S = 7 * 86400.0
PLACEMENTS = ("spread", "binpack", "packing", "random")


def run(scenario: Scenario, until: float, seed: int | None = None) -> tuple[Summary, float, float]:
    """The summary at ``until``, with wall and CPU seconds of building and running."""
    wall, cpu = time.perf_counter(), time.process_time()
    sim = scenario.build(seed=seed)
    sim.run_until(until)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return sim.summary(), wall, cpu


def time_week(runs: int) -> bool:
    print("== a week of 1,024 GPUs, 10,000 jobs (week_scenario, fair-share, binpack) ==")
    started = time.perf_counter()
    scenario = week_scenario(gpus=1024, jobs=10000, seed=0)
    print(f"workload generated in {time.perf_counter() - started:.2f} s")
    walls, cpus = [], []
    summary = None
    for _ in range(runs):
        summary, wall, cpu = run(scenario, WEEK_S)
        walls.append(wall)
        cpus.append(cpu)
    best = min(walls)
    verdict = "within" if best <= BUDGET_SECONDS else "OVER"
    print(
        f"simulated week: {best:.2f} s wall (best of {runs}; CPU {min(cpus):.2f} s), "
        f"{verdict} the {BUDGET_SECONDS:.0f} s budget"
    )
    print(json.dumps(summary.as_dict(), indent=1))
    return best <= BUDGET_SECONDS


def compare_placements(name: str, scenario: Scenario, until: float, seeds: range) -> None:
    print(f"\n== placement on {name}: same arrivals, {until / 3600:.0f} h, seeds {list(seeds)} ==")
    print(
        f"{'placement':<9} {'alloc %':>8} {'active %':>9} {'frag GPUs':>10} "
        f"{'wait p95 2-8':>13} {'wait p95 9-64':>14} {'pending':>8} {'s':>6}"
    )
    for placement in PLACEMENTS:
        results = []
        seconds = []
        for seed in seeds:
            summary, wall, _ = run(scenario.with_placement(placement), until, seed)
            results.append(summary)
            seconds.append(wall)

        def median(values: list[float | None]) -> float:
            present = [v for v in values if v is not None]
            return statistics.median(present) if present else float("nan")

        print(
            f"{placement:<9} "
            f"{100 * median([r.allocation_util for r in results]):>8.1f} "
            f"{100 * median([r.activity_util for r in results]):>9.1f} "
            f"{median([r.fragmentation_mean_gpus for r in results]):>10.1f} "
            f"{median([r.waits_by_size['2-8'].p95_s for r in results]) / 60:>11.1f} m "
            f"{median([r.waits_by_size['9-64'].p95_s for r in results]) / 60:>12.1f} m "
            f"{median([r.jobs['pending'] for r in results]):>8.0f} "
            f"{median(seconds):>6.2f}"
        )


SCALE_TENANTS = 50
SCALE_DRAFTS = 6
REPLAY_RATIO_BUDGET = 8.0
IMPACT_CPU_BUDGET_S = 5.0


def scale_snapshot(gpus: int):
    """bench/rules.py's synthetic snapshot of ``gpus`` GPUs with 50 tenants (one queue each)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import rules  # noqa: PLC0415 -- the other bench's snapshot builder

    rules.TENANTS = tuple(f"team-{i:02d}" for i in range(SCALE_TENANTS))
    return snapshot_format.load(rules.build_document(gpus))


def cpu_of(function) -> tuple[object, float]:
    started = time.process_time()
    result = function()
    return result, time.process_time() - started


def time_scale(horizon_s: float, runs: int) -> bool:
    print(
        f"== replays under weighted fair share, 1 seed, {horizon_s / 3600:g} h "
        f"(CPU s, best of {runs}) =="
    )
    sizes = (2048, 16384)
    snapshots = {gpus: scale_snapshot(gpus) for gpus in sizes}
    policies = {gpus: replay_policy(snapshots[gpus], "fair-share") for gpus in sizes}
    times: dict[int, list[float]] = {gpus: [] for gpus in sizes}
    for _ in range(runs):
        for gpus in sizes:  # in turns: a busy spell slows both sizes, not one
            snap, policy = snapshots[gpus], policies[gpus]
            times[gpus].append(cpu_of(lambda s=snap, p=policy: replay(s, p, horizon_s, (0,)))[1])
    seconds = {gpus: min(times[gpus]) for gpus in sizes}
    for gpus in sizes:
        print(
            f"{gpus:>6} GPUs, {len(snapshots[gpus].jobs):>6} jobs: {seconds[gpus]:.3f} s "
            f"(median {statistics.median(times[gpus]):.3f} s)"
        )
    ratio = seconds[16384] / seconds[2048]
    ok = ratio <= REPLAY_RATIO_BUDGET
    print(f"16k / 2k: x{ratio:.2f} ({'within' if ok else 'OVER'} the x{REPLAY_RATIO_BUDGET:g})")
    return compare_models(snapshots[16384]) and ok


def compare_models(snap) -> bool:
    full = RecommendSettings()
    reduced, _ = impact_settings_for(int(snap.nodes["gpus"].sum()), full)
    diagnosis = run_rules(snap)
    context = RecommendContext(snap, diagnosis, full, diagnosis.facts)
    drafts = [d for d in queue_weight.GENERATOR.generate(context) if d.plan is not None]
    drafts.sort(key=lambda d: -gpu_hours_at_stake(snap, d.plan, full.horizon_s))
    drafts = drafts[:SCALE_DRAFTS]
    print(
        f"\n== queue-weight impact at 16,384 GPUs: {len(drafts)} drafts, full "
        f"({len(full.seeds)} seeds x {full.horizon_s / 3600:g} h) vs reduced "
        f"({len(reduced.seeds)} seed x {reduced.horizon_s / 3600:g} h) =="
    )
    agree, errors, reduced_cpu = 0, [], []
    models = {"full": (full, {}), "reduced": (reduced, {})}
    for name, (settings, baselines) in models.items():
        _, cpu = cpu_of(
            lambda s=settings, b=baselines: simulated_impact(snap, drafts[0].plan, s, b)
        )
        print(f"{name}: the current setting's replays (shared by every draft) + one: {cpu:.2f} s")
    for draft in drafts:
        results = {}
        for name, (settings, baselines) in models.items():
            (impact, assessment), cpu = cpu_of(
                lambda s=settings, b=baselines, p=draft.plan: simulated_impact(snap, p, s, b)
            )
            share = next(
                (
                    m
                    for m in impact["metrics"]
                    if m["metric"] == "queue_share" and m["subject"] == draft.target
                ),
                None,
            )
            results[name] = (assessment.verdict, share, cpu)
        (v_full, s_full, c_full), (v_red, s_red, c_red) = results["full"], results["reduced"]
        agree += v_full == v_red
        reduced_cpu.append(c_red)
        error = None
        if s_full is not None and s_red is not None:
            error = abs(s_full["delta"]["mean"] - s_red["delta"]["mean"])
            errors.append(error)
        shown = "-" if error is None else f"{100 * error:.2f} pts"
        print(
            f"{draft.target:<14} full {v_full:<22} {c_full:6.2f} s | reduced {v_red:<22} "
            f"{c_red:6.2f} s | share delta error {shown}"
        )
    worst = max(reduced_cpu) if reduced_cpu else 0.0
    ok = worst <= IMPACT_CPU_BUDGET_S
    mean_error = statistics.mean(errors) if errors else float("nan")
    print(
        f"verdicts agree on {agree} of {len(drafts)}; share delta error mean "
        f"{100 * mean_error:.2f} pts, max {100 * max(errors, default=float('nan')):.2f} pts; "
        f"reduced estimate at most {worst:.2f} s CPU ({'within' if ok else 'OVER'} "
        f"{IMPACT_CPU_BUDGET_S:g} s)"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=None, help="timed runs, best kept (week: 1, --scale: 5)"
    )
    parser.add_argument("--seeds", type=int, default=1, help="seeds per placement (median)")
    parser.add_argument("--skip-week", action="store_true")
    parser.add_argument("--scale", action="store_true", help="only the scale figures (issue #17)")
    parser.add_argument("--horizon", type=float, default=3 * 3600.0, help="--scale replay, s")
    args = parser.parse_args()
    if args.scale:
        return 0 if time_scale(args.horizon, args.runs or 5) else 1

    ok = True if args.skip_week else time_week(args.runs or 1)
    seeds = range(args.seeds)
    demo = seed_scenario(0).without_faults()
    compare_placements("the seed workload, no faults (first day)", demo, 86400.0, seeds)
    compare_placements("the seed workload, no faults (week)", demo, WEEK_S, seeds)
    for load in (0.8, 1.3):
        week = week_scenario(gpus=1024, jobs=10000, seed=0, load=load)
        week = replace(week, policy=replace(week.policy, queue_order="fifo"))
        compare_placements(
            f"the benchmark week at {load:.0%} offered load (fifo)", week, WEEK_S, seeds
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
