"""``manage.py forecast backtest``: the start-time forecast's error against real starts
(docs/forecasts.md "Backtest")."""

import json
import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from diagnosis.core.forecast.backtest import BacktestResult, demo_backtest, openb_backtest
from diagnosis.core.forecast.starts import ForecastSettings
from diagnosis.core.simulate.openb.trace import TraceFormatError, read_nodes, read_pods

SCENARIOS = ("demo", "openb")


def default_csv_dir() -> Path:
    base = os.environ.get("GPUOBS_SHARED_DATA")
    root = Path(base) if base else Path(settings.BASE_DIR).parent / "shared" / "data"
    return root / "alibaba-gpu-v2023" / "csv"


class Command(BaseCommand):
    help = (
        "Backtest the start-time forecasts: forecast at times t of the demo's and the OpenB "
        "trace's simulated runs and report the error against the starts the runs made. "
        "Exit 2 on unreadable input."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        backtest = actions.add_parser("backtest", help="forecast error against real starts")
        backtest.add_argument(
            "--scenario",
            choices=SCENARIOS,
            action="append",
            help="demo and/or openb (default: both; openb skipped when its trace is absent)",
        )
        backtest.add_argument("--seeds", type=int, default=5, help="seeds per forecast (5)")
        backtest.add_argument(
            "--horizon-hours", type=float, default=24.0, help="forecast horizon (24)"
        )
        backtest.add_argument("--nodes", type=Path, help="OpenB node list CSV")
        backtest.add_argument("--pods", type=Path, help="OpenB pod list CSV")
        backtest.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **options):
        if not 1 <= options["seeds"] <= 50:
            raise CommandError("--seeds must be 1..50", returncode=2)
        if not 0 < options["horizon_hours"] <= 24 * 14:
            raise CommandError("--horizon-hours must be in (0, 336]", returncode=2)
        forecast_settings = ForecastSettings(
            seeds=tuple(range(options["seeds"])), horizon_s=options["horizon_hours"] * 3600.0
        )
        results: list[BacktestResult] = []
        skipped: dict[str, str] = {}
        for scenario in options["scenario"] or SCENARIOS:
            if scenario == "demo":
                results.append(demo_backtest(forecast_settings))
                continue
            csv_dir = default_csv_dir()
            nodes = options["nodes"] or csv_dir / "openb_node_list_gpu_node.csv"
            pods = options["pods"] or csv_dir / "openb_pod_list_default.csv"
            if not (options["nodes"] or options["pods"]) and not nodes.is_file():
                skipped["openb"] = f"the OpenB trace is not at {csv_dir} (set GPUOBS_SHARED_DATA)"
                continue
            try:
                trace = read_nodes(nodes), read_pods(pods)
                results.append(openb_backtest(*trace, forecast_settings))
            except (TraceFormatError, ValueError) as exc:
                raise CommandError(str(exc), returncode=2) from exc
        if options["json"]:
            out = {"results": [r.as_dict() for r in results], "skipped": skipped}
            self.stdout.write(json.dumps(out, allow_nan=False))
            return
        for result in results:
            self.stdout.write(describe(result))
        for scenario, why in skipped.items():
            self.stdout.write(f"{scenario}: skipped, {why}")


def describe(r: BacktestResult) -> str:
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value / 60:.1f} min"

    def share(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.1f} %"

    verdict = r.as_dict()["meets_target"]
    target = {True: "meets", False: "misses", None: "cannot judge"}[verdict]
    return (
        f"{r.scenario}: {r.gpus} GPUs, {r.times} forecast times, {r.pending} pending-job "
        f"forecasts, {r.scored} scored, {r.censored} not started within the horizon "
        f"({r.censored_agreed} of them forecast so)\n"
        f"  absolute error median {seconds(r.median_abs_error_s)}, p90 "
        f"{seconds(r.p90_abs_error_s)}; real wait median {seconds(r.median_real_wait_s)}\n"
        f"  error / real wait: median {share(r.median_rel_error)}, p90 {share(r.p90_rel_error)} "
        f"({target} the {100 * r.target_rel_error:.0f} % target); {r.cpu_s} s CPU"
    )
