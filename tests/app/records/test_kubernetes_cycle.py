"""A Volcano and a Kueue cluster through the whole cycle (``run_cluster_cycle``: collect with the
scheduler-only collector, store, diagnose, record) against the loopback API server, and their
events stored once however often they are read."""

from __future__ import annotations

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.records.events import record_scheduler_events
from diagnosis.edge.schedulers.registry import adapter_for
from diagnosis.models import Cluster, Finding, SchedulerEvent, Snapshot
from tests.support.kube_server import KubeApiServer, kube_api_fixture, load_fixture
from tests.support.kube_server import adapter_config as config

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]


kube_api = kube_api_fixture()


@pytest.fixture
def volcano_cluster(kube_api: KubeApiServer, make_cluster) -> Cluster:
    kube_api.load(load_fixture("nodes"))
    kube_api.load(load_fixture("volcano"))
    return make_cluster(
        "volcano-1", scheduler_kind="volcano", scheduler_config=config(), metrics_kind="none"
    )


def test_a_volcano_cluster_runs_the_full_cycle(volcano_cluster: Cluster) -> None:
    cycle = run_cluster_cycle(volcano_cluster)

    assert cycle.ok, cycle.error
    assert (cycle.gpus, cycle.allocated_gpus) == (
        40,
        21,
    )  # llm-pretrain 16, finetune's bound pod 4, notebook 1
    document = Snapshot.objects.get(cluster=volcano_cluster).load_document()
    assert document["scheduler"]["kind"] == "volcano"
    assert {j["id"] for j in document["jobs"]} >= {"team-a/llm-pretrain", "team-b/finetune"}
    # the partial gang has held 4 H100s for hours and cannot complete on free GPUs
    assert Finding.objects.filter(
        cluster=volcano_cluster, rule_id="gang-partial-hold", subject="job:team-b/finetune"
    ).exists()


def test_cycles_store_the_clusters_events_once_and_keep_the_cursor(
    volcano_cluster: Cluster, kube_api: KubeApiServer
) -> None:
    run_cluster_cycle(volcano_cluster)
    repeated = kube_api.get("Event", "finetune.181c0d2f3a4b5c6e", "team-b")
    kube_api.put({**repeated, "count": 13, "lastTimestamp": "2026-11-29T07:58:00Z"})

    run_cluster_cycle(volcano_cluster)

    volcano_cluster.refresh_from_db()
    events = SchedulerEvent.objects.filter(cluster=volcano_cluster)
    assert events.count() == 5  # the 4 listed, then the repeated one as a new version
    assert events.filter(reason="Unschedulable").count() == 2
    assert (
        volcano_cluster.event_cursor
        == kube_api.get("Event", repeated["metadata"]["name"], "team-b")["metadata"][
            "resourceVersion"
        ]
    )


def test_a_kueue_cluster_runs_the_full_cycle(kube_api: KubeApiServer, make_cluster) -> None:
    kube_api.load(load_fixture("nodes"))
    kube_api.load(load_fixture("kueue"))
    cluster = make_cluster(
        "kueue-1", scheduler_kind="kueue", scheduler_config=config(), metrics_kind="none"
    )
    cycle = run_cluster_cycle(cluster)
    assert cycle.ok, cycle.error
    assert (cycle.gpus, cycle.allocated_gpus) == (40, 16)


def test_an_unreachable_api_server_fails_the_cycle_and_keeps_the_last_data(
    volcano_cluster: Cluster, kube_api: KubeApiServer
) -> None:
    good = run_cluster_cycle(volcano_cluster)
    kube_api.stop()
    volcano_cluster.scheduler_config = config(request_timeout_s=0.5, page_size=7)  # a new mirror
    failed = run_cluster_cycle(volcano_cluster)
    assert not failed.ok
    assert "scheduler" in failed.error
    assert failed.as_of == good.as_of
    assert Snapshot.objects.filter(cluster=volcano_cluster).count() == 1


def test_events_read_again_after_a_410_are_stored_once(
    volcano_cluster: Cluster, kube_api: KubeApiServer
) -> None:
    adapter = adapter_for("volcano", volcano_cluster.scheduler_config)
    first = record_scheduler_events(volcano_cluster, adapter.read_events(None))
    kube_api.put(kube_api.get("Queue", "team-b"))  # history moves on ...
    kube_api.compact()  # ... and the stored cursor falls out of it
    again = record_scheduler_events(
        volcano_cluster, adapter.read_events(volcano_cluster.event_cursor)
    )
    assert (first.stored, again.stored, again.duplicates) == (4, 0, 4)
    assert SchedulerEvent.objects.filter(cluster=volcano_cluster).count() == 4
    assert volcano_cluster.event_cursor == again.cursor


def test_a_dra_only_cluster_runs_the_full_cycle_with_its_gpus_by_uuid(
    kube_api: KubeApiServer, make_cluster
) -> None:
    """No nvidia.com/gpu allocatable anywhere, no GPU Feature Discovery labels: the GPUs come from
    the ResourceSlices, the stored snapshot keeps their UUIDs, MIG instances and health, and the
    rules run over them."""
    kube_api.load(load_fixture("dra"))
    cluster = make_cluster(
        "dra-1", scheduler_kind="volcano", scheduler_config=config(), metrics_kind="none"
    )
    cycle = run_cluster_cycle(cluster)

    assert cycle.ok, cycle.error
    document = Snapshot.objects.get(cluster=cluster).load_document()
    assert {n["name"] for n in document["nodes"]} == {"dra-h-1", "dra-a-1"}
    gpus = {g["uuid"]: g for g in document["gpus"]}
    assert gpus["GPU-4b2a7e10-91c3-4f55-a0d1-3c9e8f000003"]["health"] == "unhealthy"
    assert gpus["MIG-7f0e1d2c-0000-5a5a-8000-000000000001"]["mig"]["profile"] == "1g.10gb"
    train = next(j for j in document["jobs"] if j["id"] == "research/train-0")
    assert train["allocation"] == [{"node": "dra-h-1", "gpus": [0, 1]}]
    # the stored form names a whole GPU's UUID once, in gpus[], at the allocated index
    at = {(g["node"], g["index"]): g["uuid"] for g in document["gpus"] if "mig" not in g}
    assert [at[("dra-h-1", i)] for i in (0, 1)] == [
        "GPU-4b2a7e10-91c3-4f55-a0d1-3c9e8f000000",
        "GPU-4b2a7e10-91c3-4f55-a0d1-3c9e8f000001",
    ]
    notebook = next(j for j in document["jobs"] if j["id"] == "research/notebook")
    assert notebook["allocation"][0]["uuids"] == ["MIG-7f0e1d2c-0000-5a5a-8000-000000000001"]
