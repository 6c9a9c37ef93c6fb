"""``manage.py demo``: the built-in demo cluster (docs/architecture.md#command-line), end to end on
one machine.

Creates the cluster ``demo`` (the simulator as its scheduler and metrics source, the seed
scenario) and runs diagnosis cycles against it through the same code path a real cluster uses
(``actions.run_cluster_cycle``). ``--cycles N`` runs N cycles and exits; without it, cycles run
every ``--interval`` seconds until interrupted, and ``--serve ADDR`` also serves the web UI from a
child process. With ``REDIS_URL`` set, the cycles are left to real Celery workers and beat, which
``--serve`` then starts as children too.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

from django.conf import settings
from django.core.management.base import BaseCommand

from diagnosis.actions.enqueue import run_deferred_impacts
from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.management.cli import bad_input
from diagnosis.management.deferred_impacts import write_deferred_note
from diagnosis.models import Cluster
from diagnosis.tasks import run_collect_shards
from gpuobs.celery import QUEUES, mirror_queues

DEMO = "demo"


class Command(BaseCommand):
    help = "Create the simulated demo cluster and run diagnosis cycles against it."

    def add_arguments(self, parser):
        parser.add_argument("--cycles", type=int, help="run this many cycles, then exit")
        parser.add_argument(
            "--speed",
            type=float,
            default=60.0,
            help="simulated seconds per wall second (default 60: an hour a minute)",
        )
        parser.add_argument(
            "--interval", type=float, default=10.0, help="wall seconds between cycles (default 10)"
        )
        parser.add_argument(
            "--step",
            type=float,
            default=600.0,
            help="with --cycles: simulated seconds each cycle advances (default 600)",
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--scenario", default="seed", choices=sorted(sim_runtime.SCENARIOS))
        parser.add_argument("--reset", action="store_true", help="start the cluster afresh")
        parser.add_argument(
            "--serve", metavar="ADDR", help="also serve the UI, e.g. 127.0.0.1:8000"
        )

    def handle(self, *args, **options):
        cluster = self._cluster(options)
        if options["cycles"] is not None:
            self._run_cycles(cluster, options["cycles"])
            return
        children = self._start_children(options["serve"]) if options["serve"] else []
        try:
            if settings.REDIS_URL:
                self.stdout.write("REDIS_URL is set: Celery worker and beat run the cycles.")
                for child in children:
                    child.wait()
            else:
                self._loop(cluster, options["interval"])
        except KeyboardInterrupt:
            self.stdout.write("stopping")
        finally:
            for child in children:
                child.send_signal(signal.SIGINT)
            for child in children:
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()

    def _cluster(self, options) -> Cluster:
        config = {
            "scenario": options["scenario"],
            "seed": options["seed"],
            "speed": options["speed"],
            "clock": "step" if options["cycles"] is not None else "wall",
            "step_s": options["step"],
            "started_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "changes": [],
        }
        cluster = Cluster.objects.filter(name=DEMO).first()
        if cluster is not None and options["reset"]:
            cluster.findings.all().delete()
            cluster.snapshots.all().delete()
            cluster.cycles.all().delete()
        if cluster is None:
            cluster = Cluster.objects.create(
                name=DEMO, scheduler_kind="sim", metrics_kind="sim", scheduler_config=config
            )
            self.stdout.write(f"created cluster {DEMO} ({options['scenario']} scenario)")
        elif options["reset"] or cluster.scheduler_config.get("clock") != config["clock"]:
            cluster.scheduler_config = config
            cluster.save(update_fields=["scheduler_config"])
            sim_runtime.forget(DEMO)
        if cluster.scheduler_kind != "sim" or cluster.metrics_kind != "sim":
            raise bad_input(f"cluster {DEMO!r} exists and is not a simulated cluster")
        return cluster

    def _run_cycles(self, cluster: Cluster, count: int) -> None:
        for number in range(1, count + 1):
            cycle = run_cluster_cycle(cluster, shard_runner=run_collect_shards)
            self._report(number, cycle)
        write_deferred_note(self.stdout)

    def _loop(self, cluster: Cluster, interval: float) -> None:
        number = 0
        while True:
            started = time.monotonic()
            number += 1
            cluster.refresh_from_db()
            self._report(number, run_cluster_cycle(cluster, shard_runner=run_collect_shards))
            # the idle time before the next cycle: the impact estimates the cycle deferred
            # (embedded mode; diagnosis/actions/enqueue.py), never past the next cycle's start
            run_deferred_impacts(until=started + interval)
            time.sleep(max(0.0, interval - (time.monotonic() - started)))

    def _report(self, number: int, cycle) -> None:
        if not cycle.ok:
            self.stdout.write(f"cycle {number}: FAILED: {cycle.error}")
            return
        rules = ", ".join(
            f"{rule} {sum(counts.values())}" for rule, counts in sorted(cycle.findings.items())
        )
        util = cycle.allocation_utilization or 0.0
        self.stdout.write(
            f"cycle {number}: as of {cycle.as_of:%Y-%m-%d %H:%M} UTC, {cycle.gpus} GPUs, "
            f"{100 * util:.1f}% allocated, {cycle.seconds:.2f} s; findings: {rules or 'none'}"
        )
        self.stdout.flush()

    def _start_children(self, address: str) -> list[subprocess.Popen]:
        refuse_taken_address(address)
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        children = [subprocess.Popen([*manage, "runserver", address, "--noreload"])]
        if settings.REDIS_URL:
            celery = [sys.executable, "-m", "celery", "-A", "gpuobs"]
            queues = ",".join(QUEUES)  # every queue, the impact estimates' too
            children.append(subprocess.Popen([*celery, "worker", "-Q", queues, "--loglevel=INFO"]))
            for queue in mirror_queues(settings.GPUOBS_MIRROR_QUEUES):  # one process each
                mirror_worker = ["worker", "-Q", queue, "--concurrency", "1", "-n", f"{queue}@%h"]
                children.append(subprocess.Popen([*celery, *mirror_worker, "--loglevel=INFO"]))
            children.append(subprocess.Popen([*celery, "beat", "--loglevel=INFO"]))
        self.stdout.write(f"serving on http://{address}/ (login at /accounts/login/)")
        return children


def refuse_taken_address(address: str) -> None:
    """The exit-2 error saying so when ``address`` (``HOST:PORT``) cannot be served: its
    port is taken (another gpuobs, another program) or the host is not this machine's, with
    how to choose another, before anything starts (the web server would only log it and the
    cycles run on without a UI)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit():
        raise bad_input(f"--serve {address!r}: expected HOST:PORT, e.g. 127.0.0.1:8000")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as runserver binds
        try:
            probe.bind((host, int(port)))
        except OSError as exc:
            raise bad_input(
                f"cannot serve on {address}: {exc.strerror or exc} (is another gpuobs or "
                f"another program using port {port}?). Choose another address: "
                f"make demo DEMO_ADDRESS={host}:{int(port) + 1}, or "
                f"python manage.py demo --serve {host}:{int(port) + 1}"
            ) from exc
