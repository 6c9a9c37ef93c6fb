import json
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from diagnosis.core.simulate.openb.replay import DEFAULT_ARRIVE, POLICIES, replay_openb
from diagnosis.core.simulate.openb.trace import TraceFormatError, read_nodes, read_pods
from diagnosis.management.cli import Progress


class Command(BaseCommand):
    help = (
        "Run the simulator on a scenario and print its figures. Scenarios: `openb` replays the "
        "Alibaba OpenB trace as the FGD paper (ATC'23) does. Exit 2 on unreadable input."
    )

    def add_arguments(self, parser):
        scenarios = parser.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
        openb = scenarios.add_parser(
            "openb",
            help="replay an OpenB pod list on an OpenB node list",
            description=(
                "Inflate the pod list until it asks for ARRIVE x the cluster's GPUs, place pods "
                "in arrival order (they never leave) and report GPU allocation and fragmentation."
            ),
        )
        openb.add_argument(
            "--nodes", type=Path, required=True, help="node list CSV (sn,cpu_milli,...)"
        )
        openb.add_argument("--pods", type=Path, required=True, help="pod list CSV (name,...)")
        openb.add_argument("--policy", choices=POLICIES, required=True, help="placement policy")
        openb.add_argument(
            "--arrive",
            type=float,
            default=DEFAULT_ARRIVE,
            help="GPUs requested by the arriving workload, as a multiple of the cluster's "
            f"(default {DEFAULT_ARRIVE})",
        )
        openb.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
        openb.add_argument(
            "--no-shuffle",
            action="store_true",
            help="keep the trace's creation-time order instead of shuffling it as the paper does",
        )
        openb.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **options):
        handlers = {"openb": self.handle_openb}
        return handlers[options["scenario"]](options)

    def handle_openb(self, options):
        if not options["arrive"] > 0:
            raise CommandError("--arrive must be positive", returncode=2)
        progress = Progress.of(self, options)
        progress.step(f"reading {options['nodes']} and {options['pods']}")
        try:
            nodes = read_nodes(options["nodes"])
            pods = read_pods(options["pods"])
        except TraceFormatError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        progress.step(
            f"replaying {len(pods)} pods on {len(nodes)} nodes under {options['policy']} "
            f"(arrive {options['arrive']}, seed {options['seed']})"
        )
        started = time.perf_counter()
        result = replay_openb(
            nodes,
            pods,
            options["policy"],
            arrive=options["arrive"],
            seed=options["seed"],
            shuffle=not options["no_shuffle"],
        )
        figures = result.as_dict() | {"seconds": round(time.perf_counter() - started, 2)}
        progress.step(f"done: {figures['pods_placed']} of {figures['pods_arrived']} pods placed")
        if options["json"]:
            self.stdout.write(json.dumps(figures, allow_nan=False))
        else:
            width = max(map(len, figures))
            lines = (f"{key:<{width}}  {value}" for key, value in figures.items())
            self.stdout.write("\n".join(lines))
