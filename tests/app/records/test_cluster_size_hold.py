"""Issue #29, item 2: a scheduler that answers 200 with an empty (or halved) cluster resolves
nothing. A YARN ResourceManager (the loopback server, tests/fixtures/yarn) answers
``{"nodes": null}``, or keeps its nodes and answers ``{"apps": null}`` (no application: what
ResourceManagerRest.md's Cluster Applications API prints for an empty list): the cycle is not
judged, says why, and keeps every finding until an SRE confirms the new size or it holds for
GPUOBS_SIZE_HOLD_CYCLES cycles. ``{"nodes": 7}`` is no answer at all: a recorded error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.choices import DataSourceStatus, FindingState
from diagnosis.edge.sim.scheduler import SimScheduler
from diagnosis.models import AuditEntry, Cluster, ClusterCycle, Finding
from tests.edge.test_yarn import routes
from tests.support.records import make_finding
from tests.support.rest_server import RestServer, serving
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

NODES = "/ws/v1/cluster/nodes"
APPS = "/ws/v1/cluster/apps"


@pytest.fixture
def yarn() -> Iterator[RestServer]:
    with serving(routes()) as server:
        yield server


@pytest.fixture
def hadoop(make_cluster, yarn) -> Cluster:
    """A YARN cluster with one good cycle behind it (5 nodes, 32 GPUs) and its findings."""
    cluster = make_cluster(
        "hadoop",
        scheduler_kind="yarn",
        metrics_kind="none",
        scheduler_config={"url": yarn.url, "read_node_gpus": False},
    )
    assert run_cluster_cycle(cluster).ok
    # a pool finding whose rule runs on the scheduler's data alone, last hit long ago: the next
    # judged cycle that does not report it resolves it
    long_ago = timezone.now() - timedelta(days=1)
    finding = make_finding(cluster, "fragmentation", "pool:gpu", "firing")
    finding.first_seen = finding.last_seen = finding.last_hit_at = long_ago
    finding.firing_since = long_ago
    finding.save()
    return cluster


def firing(cluster: Cluster) -> set[str]:
    return set(
        Finding.objects.filter(cluster=cluster)
        .exclude(state=FindingState.RESOLVED)
        .values_list("fingerprint", flat=True)
    )


def test_an_empty_answer_resolves_nothing_and_says_why(hadoop, yarn) -> None:
    before = firing(hadoop)
    assert before, "the fixture cluster has findings to keep"
    yarn.routes[NODES] = (200, {"nodes": None})

    cycle = run_cluster_cycle(hadoop)

    assert not cycle.ok
    assert "not judged: the scheduler reports nodes 5 → 0, GPUs 32 → 0" in cycle.error
    hadoop.refresh_from_db()
    assert hadoop.status == DataSourceStatus.DEGRADED
    assert "until an SRE confirms the new size" in hadoop.status_message
    assert firing(hadoop) == before
    assert ClusterCycle.objects.filter(cluster=hadoop, ok=True).count() == 1


def test_a_size_held_for_n_cycles_is_judged(hadoop, yarn, settings) -> None:
    settings.GPUOBS_SIZE_HOLD_CYCLES = 3
    yarn.routes[NODES] = (200, {"nodes": None})
    assert [run_cluster_cycle(hadoop).ok for _ in range(3)] == [False, False, True]
    entry = AuditEntry.objects.get(cluster=hadoop, action="cluster-size-held")
    assert entry.after == {"nodes": 0, "gpus": 0, "jobs": 4}
    hadoop.refresh_from_db()
    assert hadoop.size_hold == {}


def test_a_size_that_comes_back_is_judged_at_once(hadoop, yarn) -> None:
    yarn.routes[NODES] = (200, {"nodes": None})
    assert not run_cluster_cycle(hadoop).ok
    yarn.routes[NODES] = routes()[NODES]
    assert run_cluster_cycle(hadoop).ok
    hadoop.refresh_from_db()
    assert hadoop.size_hold == {}


def test_an_sre_confirms_the_new_size_in_the_api_and_it_is_audited(
    hadoop, yarn, carol, bob
) -> None:
    yarn.routes[NODES] = (200, {"nodes": None})
    run_cluster_cycle(hadoop)
    url = "/api/v1/clusters/hadoop/size"
    held = logged_in_client(bob).get(url).json()
    assert held["held"] is True
    assert held["size"] == {"nodes": 0, "gpus": 0, "jobs": 4}
    assert logged_in_client(bob).post(url).status_code == 403

    response = logged_in_client(carol).post(url)

    assert response.status_code == 200
    entry = AuditEntry.objects.get(cluster=hadoop, action="cluster-size-confirm")
    assert entry.actor == "carol"
    assert run_cluster_cycle(hadoop).ok  # judged: what is gone resolves now
    assert not firing(hadoop)
    assert logged_in_client(carol).post(url).status_code == 409  # nothing held any more


def test_a_small_shrink_is_judged(hadoop, yarn) -> None:
    nodes = routes()[NODES][1]
    fewer = {"nodes": {"node": nodes["nodes"]["node"][:4]}}
    yarn.routes[NODES] = (200, fewer)
    assert run_cluster_cycle(hadoop).ok


def test_the_overview_says_why_and_an_sre_confirms_with_its_button(hadoop, yarn, carol, bob):
    yarn.routes[NODES] = (200, {"nodes": None})
    run_cluster_cycle(hadoop)
    page = logged_in_client(bob).get("/clusters/hadoop/").content.decode()
    assert "Not judged: the cluster shrank at once." in page
    assert "nodes 5 → 0, GPUs 32 → 0" in page
    assert "Confirm the new size" not in page  # a viewer has no button
    assert logged_in_client(bob).post("/clusters/hadoop/confirm-size/").status_code == 403

    sre = logged_in_client(carol)
    assert "Confirm the new size" in sre.get("/clusters/hadoop/").content.decode()
    response = sre.post("/clusters/hadoop/confirm-size/", follow=True)

    assert "Confirmed: the next cycle is judged." in response.content.decode()
    assert AuditEntry.objects.filter(cluster=hadoop, action="cluster-size-confirm").exists()


def test_jobs_that_vanish_while_the_nodes_stay_resolve_nothing(hadoop, yarn, settings) -> None:
    settings.GPUOBS_SIZE_JOBS_MIN = 2  # the fixture runs 4 live applications
    before = firing(hadoop)
    yarn.routes[APPS] = (200, {"apps": None})

    cycle = run_cluster_cycle(hadoop)

    assert not cycle.ok
    assert "not judged: the scheduler reports jobs 4 → 0 since the last good cycle" in cycle.error
    assert "nodes" not in cycle.error.split("reports ")[1].split(" since")[0]
    hadoop.refresh_from_db()
    assert hadoop.status == DataSourceStatus.DEGRADED
    assert firing(hadoop) == before
    assert hadoop.size_hold["match"] == {"nodes": 5, "gpus": 32, "fallen": ["jobs"]}


def test_a_confirmed_loss_of_jobs_is_judged_and_resolves(hadoop, yarn, settings, carol) -> None:
    settings.GPUOBS_SIZE_JOBS_MIN = 2
    yarn.routes[APPS] = (200, {"apps": None})
    assert not run_cluster_cycle(hadoop).ok
    assert logged_in_client(carol).post("/api/v1/clusters/hadoop/size").status_code == 200

    assert run_cluster_cycle(hadoop).ok
    assert not firing(hadoop)


def test_a_few_jobs_that_all_end_are_judged(hadoop, yarn) -> None:
    """Below GPUOBS_SIZE_JOBS_MIN (10) live jobs, all of them ending is ordinary."""
    yarn.routes[APPS] = (200, {"apps": None})
    assert run_cluster_cycle(hadoop).ok


def test_a_malformed_nodes_answer_is_a_recorded_error_not_an_empty_cluster(hadoop, yarn) -> None:
    before = firing(hadoop)
    yarn.routes[NODES] = (200, {"nodes": 7})

    cycle = run_cluster_cycle(hadoop)

    assert not cycle.ok
    assert "/ws/v1/cluster/nodes answer is malformed: 'nodes' is int" in cycle.error
    hadoop.refresh_from_db()
    assert hadoop.status == DataSourceStatus.ERROR
    assert hadoop.size_hold == {}  # no size was read: nothing to hold or confirm
    assert firing(hadoop) == before


@pytest.mark.lab("lab-size")
def test_the_simulator_losing_its_jobs_is_not_judged(lab, settings, monkeypatch) -> None:
    """The built-in simulator's real state, its jobs dropped from what its adapter answers."""
    settings.GPUOBS_SIZE_JOBS_MIN = 1
    assert run_cluster_cycle(lab).ok
    live = ClusterCycle.objects.get(cluster=lab, ok=True).size["jobs"]
    assert live >= 1
    read_state = SimScheduler.read_state
    monkeypatch.setattr(SimScheduler, "read_state", lambda self: replace(read_state(self), jobs=[]))

    cycle = run_cluster_cycle(lab)

    assert not cycle.ok
    assert f"jobs {live} → 0" in cycle.error
