"""Start-time forecasts: the backtest error per scenario and the forecast's cost per cycle.

    PYTHONPATH=. python bench/forecast.py              # demo + OpenB, 5 seeds, 24 h horizon
    PYTHONPATH=. python bench/forecast.py --seeds 3

Prints, per scenario (the demo cluster; the OpenB pod list over time, read from
``../shared/data/alibaba-gpu-v2023/csv`` or ``$GPUOBS_SHARED_DATA/...``, skipped when absent):
its size, how many forecasts were scored, the median and p90 absolute error, the median and
p90 error relative to the real wait (target: median <= 35 % on the demo), and the CPU seconds of
one forecast of the demo's 3 h snapshot (what one cycle's ``estimate_forecasts`` task costs).
Figures, not a pass/fail: docs/forecasts.md records them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.forecast.backtest import demo_backtest, openb_backtest
from diagnosis.core.forecast.starts import ForecastSettings, forecast_starts
from diagnosis.core.simulate.openb.trace import read_nodes, read_pods
from diagnosis.core.simulate.scenarios import seed_scenario

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_csv_dir() -> Path:
    base = os.environ.get("GPUOBS_SHARED_DATA")
    root = Path(base) if base else REPO_ROOT.parent / "shared" / "data"
    return root / "alibaba-gpu-v2023" / "csv"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--csv-dir", type=Path, default=default_csv_dir())
    args = parser.parse_args()
    settings = ForecastSettings(seeds=tuple(range(args.seeds)))

    snap = snapshot_format.load(seed_scenario(0).build().snapshot(at=3 * 3600))
    started = time.process_time()
    one = forecast_starts(snap, settings=settings)
    print(
        f"one forecast: demo snapshot at 3 h, {len(snap.gpus)} GPUs, {len(snap.jobs)} jobs, "
        f"{len(one.jobs)} pending: {time.process_time() - started:.2f} s CPU ({args.seeds} seeds)"
    )
    results = [demo_backtest(settings)]
    nodes, pods = (
        args.csv_dir / "openb_node_list_gpu_node.csv",
        args.csv_dir / "openb_pod_list_default.csv",
    )
    if nodes.is_file() and pods.is_file():
        results.append(openb_backtest(read_nodes(nodes), read_pods(pods), settings))
    else:
        print(f"openb: skipped, the trace is not at {args.csv_dir} (set GPUOBS_SHARED_DATA)")
    print(
        f"{'scenario':<9} {'GPUs':>5} {'times':>5} {'pending':>7} {'scored':>6} {'censored':>8} "
        f"{'abs p50':>8} {'abs p90':>8} {'rel p50':>8} {'rel p90':>8} {'wait p50':>8} {'cpu s':>6}"
    )
    for r in results:

        def minutes(v: float | None) -> str:
            return "-" if v is None else f"{v / 60:.1f}m"

        def pct(v: float | None) -> str:
            return "-" if v is None else f"{100 * v:.1f}%"

        print(
            f"{r.scenario:<9} {r.gpus:>5} {r.times:>5} {r.pending:>7} {r.scored:>6} "
            f"{r.censored:>8} {minutes(r.median_abs_error_s):>8} {minutes(r.p90_abs_error_s):>8} "
            f"{pct(r.median_rel_error):>8} {pct(r.p90_rel_error):>8} "
            f"{minutes(r.median_real_wait_s):>8} {r.cpu_s:>6}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
