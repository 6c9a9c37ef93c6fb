"""Start-time forecasts stored and shown (issue #33, docs/forecasts.md): a cycle of the demo
cluster at 3 h (the simulator's own snapshot, what ``manage.py demo`` stores) sends the forecast
task by name; one row per pending job, replaced per forecast; the job, queue and tenant pages,
the API and /metrics show them; a manager sees only their tenants' jobs."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.actions.records.forecasts import record_forecasts
from diagnosis.api.metrics import exposition, readable_clusters
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.simulate.scenarios import seed_scenario
from diagnosis.models import Cluster, Job, JobForecast, Tenant
from tests.support.builders import SnapshotBuilder
from tests.support.world import logged_in_client, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def demo_at_3h() -> snapshot_format.ClusterSnapshot:
    return snapshot_format.load(seed_scenario(0).build().snapshot(at=3 * 3600))


@pytest.fixture
def forecast_cluster(
    make_cluster, demo_at_3h, settings, celery_eager, django_capture_on_commit_callbacks
) -> Cluster:
    """The demo's cycle at 3 h recorded; the forecast task it sends run in-process."""
    settings.GPUOBS_EMBEDDED_IMPACTS = "inline"
    cluster = make_cluster("fc")
    with django_capture_on_commit_callbacks(execute=True):
        record_cycle(cluster, demo_at_3h)
    return cluster


def test_a_cycle_forecasts_every_pending_job_once(forecast_cluster, demo_at_3h) -> None:
    pending = set(
        Job.objects.filter(cluster=forecast_cluster, state="pending").values_list(
            "external_id", flat=True
        )
    )
    rows = JobForecast.objects.filter(cluster=forecast_cluster).select_related("job")
    assert pending == {"research-big", "sweep-gang-a", "sweep-gang-b"}
    assert {r.job.external_id for r in rows} == pending
    assert {r.as_of for r in rows} == {demo_at_3h.as_of.to_pydatetime()}
    assert all(r.seeds == 5 for r in rows)
    # a redelivered task replays nothing
    assert record_forecasts(forecast_cluster.pk)["outcome"] == "skipped"
    assert JobForecast.objects.filter(cluster=forecast_cluster).count() == len(pending)


def test_a_forecast_names_its_cause_and_links_the_finding_and_recommendation(
    forecast_cluster,
) -> None:
    big = JobForecast.objects.get(cluster=forecast_cluster, job__external_id="research-big")
    assert big.cause == "fragmentation"
    assert (big.finding.rule_id, big.finding.subject) == ("fragmentation", "pool:a100")
    assert big.recommendation is not None
    assert big.finding in big.recommendation.motivating_findings.all()
    gang = JobForecast.objects.get(cluster=forecast_cluster, job__external_id="sweep-gang-a")
    assert gang.cause == "partial-gang"
    assert gang.finding.rule_id == "gang-deadlock"
    assert gang.figures["held_gpus"] == 192


def test_the_job_queue_and_tenant_pages_show_the_forecast(forecast_cluster, bob) -> None:
    client = logged_in_client(bob)
    big = JobForecast.objects.get(cluster=forecast_cluster, job__external_id="research-big")
    page = client.get("/clusters/fc/jobs/research-big/").content.decode()
    assert 'id="job-forecast"' in page
    assert "but scattered" in page  # the fragmentation cause
    assert "Binpack placement in pool a100" in page
    assert f"/clusters/fc/findings/{big.finding_id}/" in page
    assert f"/clusters/fc/recommendations/{big.recommendation_id}/" in page
    queue = client.get("/clusters/fc/queues/research/").content.decode()
    assert 'id="forecasts"' in queue
    assert "/clusters/fc/jobs/research-big/" in queue
    tenant = client.get("/clusters/fc/tenants/research/").content.decode()
    assert 'id="forecasts"' in tenant
    assert "research-big" in tenant


def test_the_api_lists_forecasts_within_the_readers_scope(forecast_cluster, bob, mallory) -> None:
    listed = token_client(bob).get("/api/v1/clusters/fc/forecasts").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert {r["job"] for r in rows} == {"research-big", "sweep-gang-a", "sweep-gang-b"}
    one = token_client(bob).get("/api/v1/clusters/fc/jobs/research-big/forecast").json()
    assert one["cause"] == "fragmentation"
    assert one["finding_url"].endswith(f"/findings/{one['finding']}/")
    assert one["unblock_text"].startswith("Binpack placement")

    manager = token_client(mallory)
    Tenant.objects.get(cluster=forecast_cluster, name="pretrain").managers.add(mallory)
    assert manager.get("/api/v1/clusters/fc/jobs/research-big/forecast").status_code == 404
    listed = manager.get("/api/v1/clusters/fc/forecasts").json()
    assert (listed["results"] if isinstance(listed, dict) else listed) == []
    assert manager.get("/api/v1/clusters/fc/forecasts?tenant=research").status_code == 404
    Tenant.objects.get(cluster=forecast_cluster, name="research").managers.add(mallory)
    listed = manager.get("/api/v1/clusters/fc/forecasts").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    research = set(
        Job.objects.filter(
            cluster=forecast_cluster, state="pending", tenant__name="research"
        ).values_list("external_id", flat=True)
    )
    assert {r["job"] for r in rows} == research


def test_an_unknown_tenant_filter_is_a_404_not_a_500(forecast_cluster, bob) -> None:
    answer = token_client(bob).get("/api/v1/clusters/fc/forecasts?tenant=nope")
    assert answer.status_code == 404


def test_metrics_has_the_predicted_wait_histogram(forecast_cluster, alice) -> None:
    clusters = [c for c in readable_clusters(alice) if c.name == "fc"]
    families = {f.name: f for f in text_string_to_metric_families(exposition(clusters).decode())}
    samples = {
        (s.name, s.labels.get("le")): s.value
        for s in families["gpuobs_forecast_wait_seconds"].samples
        if s.labels.get("cluster") == "fc"
    }
    assert samples[("gpuobs_forecast_wait_seconds_count", None)] == 3
    assert samples[("gpuobs_forecast_wait_seconds_bucket", "+Inf")] == 3
    known = JobForecast.objects.filter(cluster=forecast_cluster, start_at__isnull=False).count()
    assert samples[("gpuobs_forecast_wait_seconds_bucket", "86400.0")] == known


def test_a_manager_reads_no_other_tenants_gang_in_a_cause(make_cluster, mallory, bob) -> None:
    """team-a's job waits for GPUs team-b's partial gang holds: the cause names the gang to
    readers, and "(another tenant's job)" to team-a's manager (access.text_for_user)."""
    snap = (
        SnapshotBuilder(cluster="scoped")
        .pool("a100", nodes=1, gpus=8)
        .job(
            "gang-b",
            state="pending",
            pods=2,
            gpus_per_pod=4,
            tenant="team-b",
            bound=1,
            node="a100-000",
            partial_since="20m",
        )
        .job("wait-a", state="pending", gpus_per_pod=8, tenant="team-a", waited="10m")
        .build()
    )
    cluster = make_cluster("scoped")
    record_cycle(cluster, snap)
    assert record_forecasts(cluster.pk)["jobs"] == 2
    path = "/api/v1/clusters/scoped/jobs/wait-a/forecast"
    whole = token_client(bob).get(path).json()
    assert whole["cause"] == "partial-gangs"
    assert whole["figures"]["gangs"] == ["gang-b"]
    assert "gang-b" in whole["cause_text"]
    Tenant.objects.get(cluster=cluster, name="team-a").managers.add(mallory)
    scoped = token_client(mallory).get(path).json()
    assert "gang-b" not in json.dumps(scoped)
    assert scoped["figures"]["gangs"] == ["(another tenant's job)"]
    page = logged_in_client(mallory).get("/clusters/scoped/jobs/wait-a/").content.decode()
    assert 'id="job-forecast"' in page
    assert "gang-b" not in page
