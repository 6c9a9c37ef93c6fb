"""The periodic cycle of clusters whose metrics come from Prometheus: a real Prometheus, the real
cycle path (``run_cluster_cycle`` / ``record_cycle``), PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis import tasks
from diagnosis.actions.records.cycles import record_cycle, run_cluster_cycle
from diagnosis.choices import DataSourceStatus
from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.sources.prometheus import PrometheusConfig, collect_document, shard_payloads
from diagnosis.models import ClusterCycle, Finding, Snapshot
from diagnosis.tasks import run_collect_shards
from gpuobs import celery_app
from tests.edge.test_prometheus import scheduler_doc
from tests.support.celery_worker import celery_worker_process

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db]


def test_a_cycle_reads_the_simulated_cluster_through_prometheus(
    make_sim_cluster, prometheus, planted_history
):
    cluster = make_sim_cluster(prometheus.url)
    cycle = run_cluster_cycle(cluster)
    assert cycle.ok, cycle.error
    assert cycle.as_of == planted_history.as_of
    assert (cycle.gpus, cycle.coverage) == (32, 1.0)
    assert cycle.source["queries"] == 12 + 1  # one per metric family, the recording rules' markers
    assert cycle.source["data_age_s"] == 0
    cluster.refresh_from_db()
    assert cluster.status == DataSourceStatus.OK
    stored = Snapshot.objects.get(cluster=cluster).load_document()
    assert all("util" in gpu for gpu in stored["gpus"])


def test_prometheus_down_fails_the_cycle_and_keeps_the_last_good_data(
    make_sim_cluster, make_prometheus
):
    server = make_prometheus()
    cluster = make_sim_cluster(server.url, retries=1, backoff_s=0)
    good = run_cluster_cycle(cluster)
    findings = list(Finding.objects.filter(cluster=cluster).values_list("id", "state", "last_seen"))
    server.stop()

    failed = run_cluster_cycle(cluster)

    assert good.ok
    assert not failed.ok
    assert failed.error.startswith("PrometheusError: Prometheus at ")
    assert "is unreachable" in failed.error
    cluster.refresh_from_db()
    assert cluster.status == DataSourceStatus.ERROR
    assert cluster.status_message.startswith("metrics source (prometheus) failed")
    assert "unreachable" in cluster.status_detail  # the whole error is for admins (issue #12)
    assert list(Snapshot.objects.filter(cluster=cluster).values_list("as_of", flat=True)) == [
        good.as_of
    ]
    assert (
        list(Finding.objects.filter(cluster=cluster).values_list("id", "state", "last_seen"))
        == findings
    )


def test_the_page_and_the_api_say_the_collection_failed(
    make_sim_cluster, make_prometheus, alice_client
):
    server = make_prometheus()
    cluster = make_sim_cluster(server.url, retries=0)
    run_cluster_cycle(cluster)
    server.stop()
    run_cluster_cycle(cluster)

    page = alice_client.get(f"/clusters/{cluster.name}/").content.decode()
    api = alice_client.get("/api/clusters/").json()

    assert "The last collection failed" in page
    assert "is unreachable" in page
    entry = next(c for c in api["results"] if c["name"] == cluster.name)
    assert entry["status"] == "error"
    assert entry["status_message"].startswith("metrics source (prometheus) failed")
    assert "127.0.0.1" not in entry["status_message"]  # readers learn what failed, not where


def test_prometheus_warnings_degrade_the_status(make_sim_cluster, make_prometheus):
    server = make_prometheus(
        config="global:\n  scrape_interval: 15s\nremote_read:\n"
        "  - url: http://127.0.0.1:1/api/v1/read\n    read_recent: true\n"
    )
    cluster = make_sim_cluster(server.url)
    cycle = run_cluster_cycle(cluster)
    assert cycle.ok
    assert cycle.source["warnings"]
    cluster.refresh_from_db()
    assert cluster.status == DataSourceStatus.DEGRADED
    assert "Prometheus warned: remote_read" in cluster.status_message


def idle_job_scheduler(planted) -> dict:
    """The steady node with a job on its idle GPU 2 (half its memory in use: idle-held) for two
    hours."""
    document = scheduler_doc([("st-0", 4)])
    started = (planted.as_of - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    document["jobs"] = [
        {
            "id": "idle-job",
            "tenant": "team",
            "queue": "team",
            "pool": "a100",
            "kind": "training",
            "state": "running",
            "submitted": started,
            "started": started,
            "pods": 1,
            "gpus_per_pod": 1,
            "allocation": [{"node": "st-0", "gpus": [2]}],
        }
    ]
    return document


def record(cluster, config, scheduler, as_of):
    document = collect_document(config, scheduler, as_of=as_of)
    return record_cycle(cluster, snapshot_format.load(document), collection=document["collection"])


def test_a_finding_is_not_resolved_when_the_metrics_go_missing(
    make_cluster, prometheus, planted_history
):
    cluster = make_cluster("idle", metrics_kind="prometheus")
    config = PrometheusConfig.parse({"url": prometheus.url, "matchers": {"cluster": "steady"}})
    scheduler = idle_job_scheduler(planted_history)
    record(cluster, config, scheduler, planted_history.as_of)
    before = Finding.objects.get(cluster=cluster, rule_id="idle-held")

    later = planted_history.as_of + timedelta(minutes=20)  # the history ends at t0: stale
    cycle = record(cluster, config, scheduler, later)

    after = Finding.objects.get(pk=before.pk)
    assert (after.state, after.last_seen, after.resolved_at) == (
        before.state,
        before.last_seen,
        None,
    )
    assert "idle-held" in cycle.not_judged
    assert cycle.source["judgeable"] is False


def test_missing_metrics_are_named_on_the_page_not_shown_as_healthy(
    make_cluster, prometheus, planted_history, alice_client
):
    cluster = make_cluster("gappy", metrics_kind="prometheus")
    config = PrometheusConfig.parse({"url": prometheus.url, "matchers": {"cluster": "gap"}})
    record(cluster, config, scheduler_doc([("ga-0", 8), ("ga-1", 2)]), planted_history.as_of)

    cluster.refresh_from_db()
    page = alice_client.get(f"/clusters/{cluster.name}/").content.decode()

    assert cluster.status == DataSourceStatus.DEGRADED
    assert "GPU metrics cover 9 of 10 GPUs (90.0%), below 95%" in cluster.status_message
    assert "cover 9 of 10 GPUs" in page
    assert "xid: 10 GPUs not judged" in page


def test_pools_are_collected_as_shards_of_a_celery_group(prometheus, planted_history, celery_eager):
    document = scheduler_doc([("mx-prof", 2), ("mx-dev", 2)])
    document["nodes"][1]["pool"] = "old"
    settings = {"url": prometheus.url, "matchers": {"cluster": "mixed"}}
    whole = collect_document(
        PrometheusConfig.parse(settings), document, as_of=planted_history.as_of
    )
    sharded = collect_document(
        PrometheusConfig.parse({**settings, "shard_min_gpus": 1}),
        document,
        as_of=planted_history.as_of,
        shard_runner=run_collect_shards,
    )
    assert sharded["collection"]["shards"] == 2
    # each pool asks the same families (the one without profiling also its fallbacks)
    assert whole["collection"]["queries"] < sharded["collection"]["queries"]
    assert sharded["collection"]["queries"] <= 2 * whole["collection"]["queries"]
    assert sharded["gpus"] == whole["gpus"]
    assert sharded["collection"]["coverage"] == whole["collection"]["coverage"] == 1.0


def test_cycles_keep_the_source_report(make_sim_cluster, prometheus):
    cluster = make_sim_cluster(prometheus.url)
    run_cluster_cycle(cluster)
    cycle = ClusterCycle.objects.get(cluster=cluster)
    assert set(cycle.source) >= {
        "coverage",
        "data_age_s",
        "queries",
        "bytes",
        "wire_bytes",
        "warnings",
        "judgeable",
    }


# -- shards on a real Celery worker --------------------------------------------------------------


def shard_payloads_of_the_mixed_pools(url: str, planted) -> list[dict]:
    document = scheduler_doc([("mx-prof", 2), ("mx-dev", 2)])
    document["nodes"][1]["pool"] = "old"
    config = PrometheusConfig.parse(
        {"url": url, "matchers": {"cluster": "mixed"}, "shard_min_gpus": 1}
    )
    return shard_payloads(config, document["nodes"], {}, planted.t0, 900)


@pytest.fixture
def collect_worker(redis_url, tmp_path):
    """A real Celery worker on the ``collect`` queue (shards need no database)."""
    with celery_worker_process("collect", redis_url, tmp_path) as worker:
        yield worker


@pytest.mark.celery_worker
def test_shards_run_on_a_real_worker(collect_worker, prometheus, planted_history):
    payloads = shard_payloads_of_the_mixed_pools(prometheus.url, planted_history)
    results = run_collect_shards(payloads)
    assert [sorted(g["node"] for g in r["gpus"]) for r in results] == [
        ["mx-prof", "mx-prof"],
        ["mx-dev", "mx-dev"],
    ]
    assert collect_worker.poll() is None


@pytest.mark.celery_worker
def test_shards_no_worker_takes_run_in_the_cycle(
    redis_url, prometheus, planted_history, monkeypatch
):
    celery_app.control.purge()
    monkeypatch.setattr(tasks, "SHARD_WAIT_S", 0.5)
    payloads = shard_payloads_of_the_mixed_pools(prometheus.url, planted_history)
    results = run_collect_shards(payloads)
    celery_app.control.purge()
    assert [r["answered"] for r in results] == [2, 2]
