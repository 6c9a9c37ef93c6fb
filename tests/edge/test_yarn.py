"""The YARN adapter on answers shaped like Hadoop's ResourceManager REST API docs
(tests/fixtures/yarn, see its README), served by a loopback server."""

from __future__ import annotations

import json

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.errors import SchedulerError
from diagnosis.edge.schedulers.registry import adapter_for
from diagnosis.edge.schedulers.yarn import parse
from diagnosis.edge.schedulers.yarn.adapter import YarnAdapter
from tests.conftest import REPO_ROOT
from tests.support.rest_server import serving

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "yarn"
NOW_MS = 1795944000000  # 2026-11-29T09:20:00Z
SETTINGS = parse.YarnSettings(gpu_models={"gpu": "A100-SXM4-80GB"})


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def routes(scheduler: str = "scheduler_capacity.json") -> dict:
    def apps(query, headers):
        finished = "FINISHED" in query.get("states", [""])[0]
        return 200, fixture("apps_finished.json" if finished else "apps_live.json")

    return {
        "/ws/v1/cluster/nodes": (200, fixture("nodes.json")),
        "/ws/v1/cluster/scheduler": (200, fixture(scheduler)),
        "/ws/v1/cluster/apps": apps,
    }


def adapter(url: str, **config) -> YarnAdapter:
    """An adapter on ``url``; the NodeManagers are asked only where a test serves them."""
    settings = {"url": url, "read_node_gpus": False, **config}
    return adapter_for("yarn", settings, cluster="hadoop")  # type: ignore[return-value]


# -- parsing -------------------------------------------------------------------------------------


def test_nodes_have_their_label_as_pool_and_yarn_gpus() -> None:
    nodes = {n["name"]: n for n in parse.parse_nodes(fixture("nodes.json"), SETTINGS)}

    assert {k: (n["pool"], n["gpus"], n["state"]) for k, n in nodes.items()} == {
        "gpu-1.example.com": ("gpu", 8, "ready"),
        "gpu-2.example.com": ("gpu", 8, "ready"),
        "gpu-3.example.com": ("gpu", 8, "cordoned"),  # DECOMMISSIONING
        "gpu-4.example.com": ("gpu", 8, "down"),  # UNHEALTHY
        "cpu-1.example.com": ("default", 0, "ready"),
    }
    assert nodes["gpu-1.example.com"]["gpu_model"] == "A100-SXM4-80GB"
    assert nodes["gpu-1.example.com"]["gpus_used"] == 4
    assert "gpus_used" not in nodes["cpu-1.example.com"]


def test_capacity_leaf_queues_take_their_absolute_capacity_of_the_gpus() -> None:
    queues = parse.parse_queues(fixture("scheduler_capacity.json"), total_gpus=32)

    assert queues == [
        {
            "name": "research",
            "tenant": "research",
            "weight": 42.0,
            "deserved_gpus": 13.44,
            "capability_gpus": 32.0,
        },
        {
            "name": "prod",
            "tenant": "prod",
            "weight": 28.0,
            "deserved_gpus": 8.96,
            "capability_gpus": 16.0,
        },
        {
            "name": "default",
            "tenant": "default",
            "weight": 30.0,
            "deserved_gpus": 9.6,
            "capability_gpus": 32.0,
        },
    ]


def test_fair_leaf_queues_take_weight_and_gpu_min_max_where_reported() -> None:
    queues = parse.parse_queues(fixture("scheduler_fair.json"), total_gpus=32)

    assert queues == [
        {"name": "root.default", "tenant": "root.default"},
        {
            "name": "root.teams.research",
            "tenant": "root.teams.research",
            "weight": 3.0,
            "deserved_gpus": 8,
            "capability_gpus": 24,
        },
        {
            "name": "root.teams.prod",
            "tenant": "root.teams.prod",
            "weight": 1.0,
            "deserved_gpus": 4,
            "capability_gpus": 16,
        },
    ]


def test_applications_are_jobs_without_a_guessed_allocation() -> None:
    parsed = parse.parse_apps([fixture("apps_live.json"), fixture("apps_finished.json")], SETTINGS)
    jobs = {j["id"][-4:]: j for j in parsed.jobs}

    assert {k: j["state"] for k, j in jobs.items()} == {
        "0001": "running",
        "0002": "pending",
        "0003": "pending",
        "0004": "running",
        "0005": "completed",
        "0006": "failed",
        "0007": "failed",
    }
    assert (jobs["0001"]["pods"], jobs["0001"]["allocation"], jobs["0001"]["gpus_per_pod"]) == (
        3,
        [],
        0,
    )
    assert jobs["0001"]["preemptions"] == 1
    assert (jobs["0002"]["pending_reason"], jobs["0002"]["started"]) == ("ACCEPTED", None)
    assert jobs["0001"]["submitted"] == "2026-11-29T08:13:20Z"
    assert jobs["0005"]["ended"] == parse.ms_time(1795943000000)


def test_pending_diagnostics_are_failed_scheduling_events_reported_when_they_change() -> None:
    parsed = parse.parse_apps([fixture("apps_live.json")], SETTINGS)
    events, cursor = parse.derive_events(parsed, parse.EventCursor(), now_ms=NOW_MS)
    failed = {e["job"][-4:]: e for e in events if e["kind"] == "failed_scheduling"}

    assert set(failed) == {"0002", "0003"}
    assert failed["0002"]["reason"] == "ACCEPTED"
    assert "Queue's AM resource limit exceeded" in failed["0002"]["message"]

    again, _ = parse.derive_events(parsed, cursor, now_ms=NOW_MS + 60_000)
    assert [e for e in again if e["kind"] == "failed_scheduling"] == []


@pytest.mark.parametrize(
    "document",
    [{"nodes": None}, {"nodes": {}}, {"nodes": {"node": [1, None, {"state": 3}]}}],
)
def test_none_or_odd_node_records_give_no_nodes_not_a_crash(document) -> None:
    assert parse.parse_nodes(document, SETTINGS) == []


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ({}, "has no 'nodes'"),
        ({"nodes": 7}, "'nodes' is int '7', not an object or null"),
        ({"nodes": [{"nodeHostName": "gpu-1"}]}, "'nodes' is list"),
        ({"nodes": {"node": "x"}}, "nodes.node is str, not a list"),
    ],
)
def test_a_malformed_node_answer_is_an_error_never_an_empty_cluster(document, named) -> None:
    with pytest.raises(SchedulerError, match="/ws/v1/cluster/nodes answer") as raised:
        parse.parse_nodes(document, SETTINGS)
    assert named in str(raised.value)


def test_apps_null_is_no_application_and_apps_7_is_malformed() -> None:
    """``{"apps": null}`` is what the ResourceManager answers when no application matches
    (Jersey prints an empty list as null; ResourceManagerRest.md, Cluster Applications API)."""
    assert parse.parse_apps([{"apps": None}], SETTINGS).jobs == []
    with pytest.raises(SchedulerError, match="'apps' is int"):
        parse.parse_apps([{"apps": 7}], SETTINGS)


def test_a_deeply_nested_queue_tree_is_cut_at_a_bounded_depth() -> None:
    queue: dict = {"queueName": "leaf", "absoluteCapacity": 1.0}
    for depth in range(5000):
        queue = {"queueName": f"q{depth}", "queues": {"queue": [queue]}}
    document = {"scheduler": {"schedulerInfo": {"type": "capacityScheduler", **queue}}}

    assert parse.parse_queues(document, total_gpus=8) == []


# -- the adapter against a loopback ResourceManager ----------------------------------------------


def test_read_state_is_a_valid_snapshot_from_four_requests() -> None:
    with serving(routes()) as server:
        yarn = adapter(server.url, gpu_models={"gpu": "A100-SXM4-80GB"})
        state = yarn.read_state()
        batch = yarn.read_events(None)

    snap = snapshot_format.load(
        {
            "format": snapshot_format.FORMAT,
            "cluster": "hadoop",
            "as_of": "2026-11-29T09:20:00Z",
            "scheduler": state.scheduler,
            "nodes": state.nodes,
            "queues": state.queues,
            "jobs": state.jobs,
            "events": [{k: v for k, v in e.items() if k != "dedup_key"} for e in batch.events],
        }
    )
    assert snap.total_gpus == 32
    assert set(snap.queues.index) == {"research", "prod", "default"}
    assert [r.path for r in server.requests] == [
        "/ws/v1/cluster/nodes",
        "/ws/v1/cluster/scheduler",
        "/ws/v1/cluster/apps",
        "/ws/v1/cluster/apps",
    ]
    assert server.requests[2].query["states"] == ["NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING"]
    assert server.requests[3].query["states"] == ["FINISHED,FAILED,KILLED"]
    kinds = {(e["kind"], e["job"][-4:]) for e in batch.events}
    assert {("completed", "0005"), ("failed", "0006"), ("failed", "0007")} <= kinds
    assert {("started", "0001"), ("started", "0004")} <= kinds
    assert ("started", "0002") not in kinds  # ACCEPTED: its AM has not launched
    assert {("failed_scheduling", "0002"), ("failed_scheduling", "0003")} <= kinds


def test_the_next_read_asks_for_applications_finished_since_its_cursor() -> None:
    with serving(routes()) as server:
        yarn = adapter(server.url, event_overlap_s=60)
        yarn.read_state()
        cursor = parse.EventCursor(time_ms=NOW_MS).dump()
        yarn.read_events(cursor)

    assert server.requests[-1].query["finishedTimeBegin"] == [str(NOW_MS - 60_000)]


@pytest.mark.parametrize(
    ("answer", "permanent", "words"),
    [
        ((503, {"RemoteException": {"message": "standby"}}), False, "HTTP 503"),
        ((403, {"RemoteException": {"message": "denied"}}), True, "HTTP 403"),
        ((200, b"<html>not json</html>"), True, "not JSON"),
        ((200, [1, 2]), True, "not an object"),
    ],
)
def test_failures_are_scheduler_errors_of_the_right_kind(answer, permanent, words) -> None:
    with (
        serving({**routes(), "/ws/v1/cluster/nodes": answer}) as server,
        pytest.raises(SchedulerError, match=words) as caught,
    ):
        adapter(server.url).read_state()

    assert caught.value.permanent is permanent


def test_an_unreachable_resource_manager_is_a_transient_error() -> None:
    with serving(routes()) as server:
        url = server.url
    with pytest.raises(SchedulerError, match="unreachable") as caught:
        adapter(url, timeout_s=2).read_state()

    assert caught.value.permanent is False


def test_queue_weight_is_advice_only() -> None:
    change = {"kind": "queue-weight", "target": "queue:research", "from": 42.0, "to": 50}
    with serving(routes()) as server:
        yarn = adapter(server.url)
        shown = yarn.apply(change, dry_run=True)
        with pytest.raises(SchedulerError, match="read and advise only") as caught:
            yarn.apply(change, dry_run=False)

    assert (shown.applied, shown.dry_run, shown.before) == (False, True, 42.0)
    # 50 % of the cluster under root.teams (70 %) is 71.43 % of the parent.
    assert "set yarn.scheduler.capacity.root.teams.research.capacity to 71.43" in shown.command
    assert "yarn rmadmin -refreshQueues" in shown.command
    assert caught.value.permanent
    assert yarn.capabilities.change_kinds == frozenset()


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "scheduler_config.url"),
        ({"url": "rm:8088"}, "scheduler_config.url"),
        ({"url": "http://user:pw@rm:8088"}, "scheduler_config.url"),
        ({"url": "http://rm:8088", "timeout_s": 0}, "scheduler_config.timeout_s"),
        ({"url": "http://rm:8088", "gpu_models": ["a100"]}, "scheduler_config.gpu_models"),
    ],
)
def test_bad_config_names_the_field(config, field) -> None:
    with pytest.raises(SchedulerError, match=field) as caught:
        adapter_for("yarn", config)
    assert caught.value.permanent


# -- GPUs per container from the NodeManagers ---------------------------------------------------


def test_container_ids_name_their_application() -> None:
    assert parse.container_app("container_1795939000000_0001_01_000002") == (
        "application_1795939000000_0001"
    )
    assert parse.container_app("container_e07_1795939000000_0004_01_000001") == (
        "application_1795939000000_0004"
    )
    assert parse.container_app("container_x") is None


def test_both_node_manager_layouts_give_container_gpus() -> None:
    assert parse.assigned_gpus(fixture("nm_gpu_gpu-1.json")) == {
        "container_1795939000000_0001_01_000002": [0, 1],
        "container_1795939000000_0001_01_000003": [2, 3],
    }
    assert parse.assigned_gpus(fixture("nm_gpu_gpu-3.json")) == {
        "container_e07_1795939000000_0004_01_000001": [4, 5]
    }
    assert parse.assigned_gpus({"assignedGpuDevices": [{"index": 5000, "containerId": "c"}]}) == {}


def test_running_applications_get_their_containers_gpus_from_the_node_managers() -> None:
    nm_path = "/ws/v1/node/resources/yarn.io%2Fgpu"
    with (
        serving({nm_path: (200, fixture("nm_gpu_gpu-1.json"))}) as gpu1,
        serving({nm_path: (200, fixture("nm_gpu_gpu-3.json"))}) as gpu3,
    ):
        nodes = fixture("nodes.json")
        for record in nodes["nodes"]["node"]:
            served = {"gpu-1.example.com": gpu1, "gpu-3.example.com": gpu3}.get(
                record["nodeHostName"]
            )
            if served:
                record["nodeHTTPAddress"] = served.url.removeprefix("http://")
        with serving({**routes(), "/ws/v1/cluster/nodes": (200, nodes)}) as server:
            state = adapter(server.url, read_node_gpus=True).read_state()

    jobs = {j["id"][-4:]: j for j in state.jobs}
    assert jobs["0001"]["allocation"] == [
        {"node": "gpu-1.example.com", "gpus": [0, 1]},
        {"node": "gpu-1.example.com", "gpus": [2, 3]},
    ]
    assert (jobs["0001"]["pods"], jobs["0001"]["gpus_per_pod"]) == (2, 2)
    assert jobs["0004"]["allocation"] == [{"node": "gpu-3.example.com", "gpus": [4, 5]}]
    assert [r.path for r in gpu1.requests] == [nm_path]  # gpu-2 and gpu-4 hold none: not asked
    assert "node_gpu_problems" not in state.scheduler
    snap = snapshot_format.load(
        {
            "format": snapshot_format.FORMAT,
            "cluster": "hadoop",
            "as_of": "2026-11-29T09:20:00Z",
            "nodes": state.nodes,
            "queues": state.queues,
            "jobs": state.jobs,
        }
    )
    assert len(snap.allocations) == 6  # one row per held GPU


def test_a_node_manager_that_does_not_answer_leaves_its_gpus_unattributed() -> None:
    nodes = fixture("nodes.json")
    with serving({}) as dead:
        address = dead.url.removeprefix("http://")
    for record in nodes["nodes"]["node"]:
        record["nodeHTTPAddress"] = address
    with serving({**routes(), "/ws/v1/cluster/nodes": (200, nodes)}) as server:
        state = adapter(server.url, timeout_s=2, read_node_gpus=True).read_state()

    assert all(j["allocation"] == [] for j in state.jobs)
    assert len(state.scheduler["node_gpu_problems"]) == 2
    assert "unreachable" in state.scheduler["node_gpu_problems"][0]


def test_capacity_leaves_know_their_path_and_parent_share() -> None:
    leaves = parse.capacity_leaves(fixture("scheduler_capacity.json"))

    assert leaves["research"] == parse.CapacityLeaf("root.teams.research", 42.0, "root.teams", 70.0)
    assert leaves["default"] == parse.CapacityLeaf("root.default", 30.0, "root", 100.0)


def test_fair_scheduler_advice_is_the_allocation_files_weight() -> None:
    change = {"kind": "queue-weight", "target": "queue:root.teams.prod", "to": 2}
    with serving(routes("scheduler_fair.json")) as server:
        shown = adapter(server.url).apply(change, dry_run=True)

    assert "set <weight>2</weight> on queue root.teams.prod" in shown.command


def test_advice_for_a_queue_the_scheduler_does_not_have_is_refused() -> None:
    change = {"kind": "queue-weight", "target": "queue:ghost", "to": 5}
    with (
        serving(routes()) as server,
        pytest.raises(SchedulerError, match="no leaf queue") as caught,
    ):
        adapter(server.url).apply(change, dry_run=True)

    assert caught.value.permanent
