"""Time the OpenB replay per policy and compare its figures with the FGD paper's.

    PYTHONPATH=. python bench/openb.py                       # default trace, seed 42
    PYTHONPATH=. python bench/openb.py --seeds 10            # medians of seeds 42..51
    PYTHONPATH=. python bench/openb.py --pods openb_pod_list_gpushare40.csv

The trace is read from ``../shared/data/alibaba-gpu-v2023/csv`` (or ``$GPUOBS_SHARED_DATA/...``).
Budget (docs/architecture.md#performance-budget): one replay <= 10 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from diagnosis.core.simulate.openb.replay import POLICIES, PUBLISHED_DEFAULT_TRACE, replay_openb
from diagnosis.core.simulate.openb.trace import read_nodes, read_pods

REPO_ROOT = Path(__file__).resolve().parent.parent
BUDGET_SECONDS = 10.0


def default_csv_dir() -> Path:
    base = os.environ.get("GPUOBS_SHARED_DATA")
    root = Path(base) if base else REPO_ROOT.parent / "shared" / "data"
    return root / "alibaba-gpu-v2023" / "csv"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv-dir", type=Path, default=default_csv_dir())
    parser.add_argument("--nodes", default="openb_node_list_gpu_node.csv")
    parser.add_argument("--pods", default="openb_pod_list_default.csv")
    parser.add_argument("--policy", action="append", choices=POLICIES)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 42, 43, ... (default 1)")
    parser.add_argument("--arrive", type=float, default=1.3)
    args = parser.parse_args()

    nodes_path, pods_path = args.csv_dir / args.nodes, args.csv_dir / args.pods
    if not nodes_path.is_file() or not pods_path.is_file():
        print(f"skipped: the OpenB trace is not at {args.csv_dir} (set GPUOBS_SHARED_DATA)")
        return 0
    nodes, pods = read_nodes(nodes_path), read_pods(pods_path)
    published = PUBLISHED_DEFAULT_TRACE if args.pods == "openb_pod_list_default.csv" else {}
    seeds = range(42, 42 + args.seeds)
    print(
        f"{args.pods} on {args.nodes}, arrive {args.arrive}, seeds {seeds.start}..{seeds.stop - 1}"
    )
    print(
        f"{'policy':<8} {'alloc %':>8} {'frag %':>7} {'paper':>13} {'failed':>7} "
        f"{'s/replay':>9} {'cpu s':>6}"
    )
    over_budget = False
    for policy in args.policy or POLICIES:
        allocs, frags, failed, seconds, cpu_seconds = [], [], [], [], []
        for seed in seeds:
            started, cpu_started = time.perf_counter(), time.process_time()
            result = replay_openb(nodes, pods, policy, arrive=args.arrive, seed=seed)
            seconds.append(time.perf_counter() - started)
            cpu_seconds.append(time.process_time() - cpu_started)
            allocs.append(result.gpu_alloc_pct_at_arrive)
            frags.append(result.frag_gpu_pct_at_arrive)
            failed.append(result.pods_failed)
        paper = "{:.2f}/{:.2f}".format(*published[policy]) if policy in published else "-"
        worst = max(seconds)
        over_budget |= worst > BUDGET_SECONDS
        print(
            f"{policy:<8} {statistics.median(allocs):>8.2f} {statistics.median(frags):>7.2f} "
            f"{paper:>13} {statistics.median(failed):>7.0f} {worst:>9.2f} {max(cpu_seconds):>6.2f}"
        )
    if over_budget:
        print(f"OVER BUDGET: a replay took more than {BUDGET_SECONDS:.0f} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
