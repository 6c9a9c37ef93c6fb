"""The Prometheus commands end to end: ``collect`` against a real Prometheus,
``export_openmetrics`` backfilling one, and ``serve_exporter`` scraped by one (the demo without
the in-process simulator source)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.edge.collection import collect_snapshot
from diagnosis.edge.sim import runtime as sim_runtime
from tests.conftest import REPO_ROOT
from tests.edge.test_prometheus import iso, scheduler_doc
from tests.support.processes import free_port, wait_until
from tests.support.prometheus_fixtures import sim_cluster, start_prometheus

pytestmark = pytest.mark.prometheus


def collect_command(prometheus, planted_history, tmp_path, cluster: str, node: str, stderr) -> Path:
    """``manage.py collect`` of the planted ``cluster`` at t0, its scheduler part one node of 4
    GPUs; the snapshot file it wrote."""
    scheduler = tmp_path / "scheduler.json"
    scheduler.write_text(json.dumps(scheduler_doc([(node, 4)])))
    out = tmp_path / "snapshot.json"
    call_command(
        "collect",
        prometheus=prometheus.url,
        scheduler_snapshot=scheduler,
        as_of=iso(planted_history.t0),
        match=[f"cluster={cluster}"],
        out=str(out),
        stderr=stderr,
    )
    return out


def test_collect_fills_a_scheduler_snapshot_from_prometheus(prometheus, planted_history, tmp_path):
    err = StringIO()
    out = collect_command(prometheus, planted_history, tmp_path, "steady", "st-0", err)
    document = json.loads(out.read_text())
    assert document["as_of"] == iso(planted_history.t0)
    assert [g["util"]["mean"] for g in document["gpus"]] == [0.9, 0.5, 0.0, 0.25]
    assert "collected 4 GPUs" in err.getvalue()
    assert "coverage 100.0%" in err.getvalue()


def test_collects_snapshot_is_what_diagnose_reads(prometheus, planted_history, tmp_path):
    out = collect_command(prometheus, planted_history, tmp_path, "xid", "xi-0", StringIO())
    printed = StringIO()
    call_command("diagnose", str(out), json=True, stdout=printed)
    findings = json.loads(printed.getvalue())["findings"]
    assert {f["subject"] for f in findings if f["rule"] == "xid"} == {
        "gpu:xi-0/0",
        "gpu:xi-0/2",
        "gpu:xi-0/3",
    }


def test_collect_says_when_prometheus_is_unreachable(planted_history, tmp_path):
    scheduler = tmp_path / "scheduler.json"
    scheduler.write_text(json.dumps(scheduler_doc([("st-0", 4)])))
    with pytest.raises(CommandError, match="is unreachable"):
        call_command(
            "collect",
            prometheus=f"http://127.0.0.1:{free_port()}",
            scheduler_snapshot=scheduler,
            out=str(tmp_path / "out.json"),
            stderr=StringIO(),
        )


def test_collect_names_a_bad_scheduler_snapshot(prometheus, tmp_path):
    scheduler = tmp_path / "scheduler.json"
    scheduler.write_text(json.dumps({"format": "gpuobs.snapshot/v1", "nodes": []}))
    with pytest.raises(CommandError, match=r"cluster: required field is missing"):
        call_command(
            "collect",
            prometheus=prometheus.url,
            scheduler_snapshot=scheduler,
            out=str(tmp_path / "out.json"),
        )


@pytest.mark.django_db
def test_exported_history_backfills_a_prometheus_that_a_cycle_reads(
    make_cluster, make_prometheus, planted_history, tmp_path
):
    spec = sim_cluster(planted_history.t0, name="exported")
    cluster = make_cluster(
        "exported",
        scheduler_kind="sim",
        scheduler_config=spec.scheduler_config,
        metrics_kind="prometheus",
        metrics_config={"url": "http://unused", "matchers": {"cluster": "exported"}},
    )
    history = tmp_path / "history.om"
    err = StringIO()
    call_command(
        "export_openmetrics",
        cluster="exported",
        hours=1,
        label=["cluster=exported"],
        host_label="hostname",
        output=str(history),
        stderr=err,
    )
    sim_runtime.forget("exported")  # the cycle replays the simulation from its start
    server = make_prometheus(history=history)
    cluster.metrics_config = {**cluster.metrics_config, "url": server.url}
    try:
        cycle = run_cluster_cycle(cluster)
    finally:
        sim_runtime.forget("exported")
    # 32 GPUs x 241 times x 18 fields (the 12 of before and the six hidden-waste health fields)
    assert "wrote 138816 samples" in err.getvalue()
    assert cycle.ok, cycle.error
    assert (cycle.gpus, cycle.coverage) == (32, 1.0)


# -- serve_exporter scraped by a real Prometheus --------------------------------------------------
# The exporter runs as its own process with its own database (a SQLite file, as a separate
# embedded install would have): rows of the test database are invisible to other processes.


def manage(database: Path, *arguments: str, **options) -> subprocess.Popen | None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["DATABASE_URL"] = f"sqlite:///{database}"
    env.update(options.pop("env", {}))
    command = [sys.executable, str(REPO_ROOT / "manage.py"), *arguments]
    if options.pop("background", False):
        return subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)
    return None


@pytest.fixture(scope="module")
def exporter_database(tmp_path_factory) -> Path:
    database = tmp_path_factory.mktemp("exporter-db") / "gpuobs.sqlite3"
    manage(database, "migrate", "--noinput")
    return database


def create_in(database: Path, **cluster) -> None:
    """A cluster row in the exporter's database."""
    code = (
        "import json, os; from diagnosis.models import Cluster; "
        "Cluster.objects.create(**json.loads(os.environ['GPUOBS_TEST_CLUSTER']))"
    )
    manage(database, "shell", "-c", code, env={"GPUOBS_TEST_CLUSTER": json.dumps(cluster)})


@pytest.fixture
def exporter_port() -> int:
    return free_port()


@pytest.fixture
def scraping_prometheus(exporter_port, tmp_path_factory):
    config = (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: dcgm\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter_port}']\n        labels: {{cluster: live}}\n"
    )
    server = start_prometheus(tmp_path_factory.mktemp("scraping"), config=config)
    yield server
    server.stop()


@pytest.fixture
def serve_exporter(exporter_port, exporter_database):
    processes = []

    def start(cluster: str, *arguments: str) -> subprocess.Popen:
        process = manage(
            exporter_database,
            "serve_exporter",
            "--cluster",
            cluster,
            "--port",
            str(exporter_port),
            *arguments,
            background=True,
        )
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.mark.django_db
def test_a_real_prometheus_scrapes_serve_exporter_and_a_cycle_reads_it(
    make_cluster, scraping_prometheus, serve_exporter, exporter_database
):
    started = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    spec = {
        "name": "live",
        "scheduler_kind": "sim",
        "scheduler_config": {
            "scenario": "small",
            "seed": 1,
            "speed": 1,
            "clock": "wall",
            "started_at": started.isoformat(),
        },
        "metrics_kind": "prometheus",
        "metrics_config": {
            "url": scraping_prometheus.url,
            "matchers": {"cluster": "live"},
            "window_s": 60,
            "scrape_interval_s": 1,
            "max_data_age_s": 10,
        },
    }
    create_in(exporter_database, **spec)
    cluster = make_cluster(**spec)
    exporter = serve_exporter("live", "--host-label", "hostname")
    wait_until(
        lambda: (
            exporter.poll() is None
            and len(scraping_prometheus.query("count_over_time(DCGM_FI_DEV_GPU_UTIL[1m]) >= 3"))
            == 32
        ),
        timeout=60,
        what="three scrapes of 32 GPUs",
    )
    try:
        cycle = run_cluster_cycle(cluster)
        document = collect_snapshot(cluster)  # the collected document, pod labels included
    finally:
        sim_runtime.forget("live")

    assert cycle.ok, cycle.error
    assert (cycle.gpus, cycle.coverage) == (32, 1.0)
    assert scraping_prometheus.query('count(DCGM_FI_DEV_GPU_UTIL{Hostname!=""})') == []
    workloads = {(g["node"], g["index"]): g.get("workload") for g in document["gpus"]}
    # The scenario's 16-GPU training job runs from the start for four hours.
    train = next(j for j in document["jobs"] if j["id"] == "train-16")
    assert train["state"] == "running"
    for pod, bound in enumerate(train["allocation"]):
        for index in bound["gpus"]:
            assert workloads[(bound["node"], index)] == f"team-a/train-16-{pod}/main"


@pytest.mark.django_db
def test_collect_runs_a_configured_clusters_cycles(make_cluster, prometheus, planted_history):
    spec = sim_cluster(planted_history.t0, name="cycled", url=prometheus.url)
    make_cluster(
        "cycled",
        scheduler_kind="sim",
        scheduler_config=spec.scheduler_config,
        metrics_kind="prometheus",
        metrics_config=spec.metrics_config,
    )
    out = StringIO()
    try:
        call_command("collect", cluster="cycled", cycles=1, stdout=out)
    finally:
        sim_runtime.forget("cycled")
    assert f"cycle 1: as of {planted_history.as_of:%Y-%m-%d %H:%M:%S} UTC, 32 GPUs" in (
        out.getvalue()
    )
    assert "coverage 100.0%, status ok" in out.getvalue()


def test_serve_exporter_creates_the_demo_cluster(serve_exporter, exporter_database):
    exporter = serve_exporter("promdemo", "--create", "--scenario", "small")
    first = exporter.stdout.readline().decode()
    with sqlite3.connect(exporter_database) as db:
        row = db.execute(
            "SELECT scheduler_kind, metrics_kind, scheduler_config, metrics_config "
            "FROM diagnosis_cluster WHERE name = 'promdemo'"
        ).fetchone()
    assert "created cluster promdemo" in first
    assert row[:2] == ("sim", "prometheus")
    scheduler_config = json.loads(row[2])
    assert (scheduler_config["speed"], scheduler_config["clock"]) == (1, "wall")
    assert json.loads(row[3])["url"] == "http://127.0.0.1:9090"
