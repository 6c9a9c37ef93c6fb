"""Time the discrete-event simulator and compare placements on the same arrivals.

    PYTHONPATH=. python bench/simulate.py             # week benchmark + placement comparison
    PYTHONPATH=. python bench/simulate.py --runs 3    # best of 3 timings
    PYTHONPATH=. python bench/simulate.py --seeds 3   # placement figures over seeds 0..2

Budget (DESIGN.md section 12): a simulated week of a 1,024-GPU cluster with 10,000 jobs <= 5 s
on 2 cores. The placement comparison runs the seed (demo) scenario and the benchmark week under
each placement with every other setting and every arrival identical (the seed workload without
its injected faults, which would hit different jobs under different placements), and prints
what the simulator says -- whatever it says.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="timed runs of the week (best kept)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per placement (median)")
    parser.add_argument("--skip-week", action="store_true")
    args = parser.parse_args()

    ok = True if args.skip_week else time_week(args.runs)
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
