"""``manage.py serve_exporter --cluster NAME --port 9400``: a dcgm-exporter stand-in for a
simulated cluster, so that a real Prometheus can scrape it.

``GET /metrics`` answers the cluster's GPUs at this moment in dcgm-exporter's exposition format
(names, HELP/TYPE lines and labels as the real exporter writes them; ``--host-label`` picks the
host label's spelling). A wall-clock cluster advances with the wall clock (its changes recorded
by other processes replayed as they come); a step-clock cluster is served at the time of its
latest good cycle. ``--create`` first creates the cluster: the seed scenario in real time
(``speed`` 1) whose metrics come from Prometheus at ``--prometheus``.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.core.management.base import BaseCommand, CommandError

from diagnosis.actions.records.clusters import create_prometheus_demo_cluster
from diagnosis.edge.errors import CollectError
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.edge.sources.dcgm.exporter import SimExporter
from diagnosis.models import Cluster, ClusterCycle

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ExporterServer(ThreadingHTTPServer):
    """Serves one cluster's exposition; ``render()`` builds the text of a scrape."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], render) -> None:
        self.render = render
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: ExporterServer

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/metrics":
            try:
                body = self.server.render().encode()
            except (CollectError, ValueError, KeyError) as exc:
                self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, f"exporter failed: {exc}\n")
                return
            self._answer(HTTPStatus.OK, body, CONTENT_TYPE)
        elif self.path == "/":
            self._answer(HTTPStatus.OK, "gpuobs dcgm-exporter stand-in: see /metrics\n")
        else:
            self._answer(HTTPStatus.NOT_FOUND, "not found\n")

    def _answer(self, status: HTTPStatus, body: bytes | str, kind: str = "text/plain") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        return


class SimScrape:
    """What one scrape of a simulated cluster shows: its state now (wall clock), or at its
    latest good cycle (step clock)."""

    def __init__(
        self, cluster: Cluster, host_label: str, *, profiling: bool = True, refresh: bool = True
    ) -> None:
        self.cluster = cluster
        self.refresh = refresh
        self.runtime = sim_runtime.runtime_for(cluster)
        self.exporter = SimExporter(self.runtime, host_label, profiling=profiling)
        self.lock = threading.Lock()

    def target(self) -> float:
        config = self.cluster.scheduler_config or {}
        if config.get("clock", "wall") == "step":
            latest = (
                ClusterCycle.objects.filter(cluster=self.cluster, ok=True)
                .order_by("-as_of")
                .values_list("as_of", flat=True)
                .first()
            )
            if latest is None:
                return self.runtime.simulator.now
            return max(0.0, (latest - self.runtime.started_at).total_seconds())
        return sim_runtime.target_time(self.cluster, self.runtime, datetime.now(UTC))

    def __call__(self) -> str:
        with self.lock:
            if self.refresh:
                self.cluster.refresh_from_db(fields=["scheduler_config"])
            at = self.target()
            with self.runtime.lock:
                if at > self.runtime.simulator.now:
                    sim_runtime.catch_up_changes(self.cluster, self.runtime, at)
            return self.exporter.current(at)


class Command(BaseCommand):
    help = "Serve a simulated cluster's GPU metrics as dcgm-exporter would, for Prometheus."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="a cluster whose scheduler is sim")
        parser.add_argument("--port", type=int, default=9400)
        parser.add_argument("--bind", default="127.0.0.1", help="address to listen on")
        parser.add_argument("--host-label", default="hostname", choices=["hostname", "Hostname"])
        parser.add_argument(
            "--no-profiling",
            action="store_true",
            help="leave out the DCGM_FI_PROF_* fields (as on GPUs without profiling)",
        )
        parser.add_argument(
            "--create",
            action="store_true",
            help="create the cluster first (seed scenario in real time, metrics from Prometheus)",
        )
        parser.add_argument("--scenario", default="seed", choices=sorted(sim_runtime.SCENARIOS))
        parser.add_argument(
            "--prometheus",
            default="http://127.0.0.1:9090",
            help="with --create: the Prometheus the cluster's metrics come from",
        )

    def handle(self, *args, **options):
        cluster = self._cluster(options)
        try:
            render = SimScrape(
                cluster, options["host_label"], profiling=not options["no_profiling"]
            )
        except CollectError as exc:
            raise CommandError(str(exc)) from exc
        server = ExporterServer((options["bind"], options["port"]), render)
        host, port = server.server_address[:2]
        self.stdout.write(
            f"serving cluster {cluster.name}'s GPUs as dcgm-exporter on http://{host}:{port}/metrics"
        )
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            self.stdout.write("stopping")
        finally:
            server.server_close()

    def _cluster(self, options) -> Cluster:
        name = options["cluster"]
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None and options["create"]:
            cluster = create_prometheus_demo_cluster(
                name, prometheus_url=options["prometheus"], scenario=options["scenario"]
            )
            self.stdout.write(
                f"created cluster {name}: the {options['scenario']} scenario in real time, "
                f"metrics from Prometheus at {options['prometheus']}"
            )
        if cluster is None:
            raise CommandError(f"no cluster {name!r} (use --create to make a simulated one)")
        if cluster.scheduler_kind != "sim":
            raise CommandError(f"cluster {name!r} is not simulated (scheduler_kind sim)")
        return cluster
