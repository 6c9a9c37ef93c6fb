"""The Volcano and Kueue adapters driving the real ``kubernetes`` client against the loopback API
server of tests/support/kube_server.py: initial list (paged), watch events, 410 Gone, client
timeouts, events, and writes (dry run and real, optimistic concurrency)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from diagnosis.core import snapshot
from diagnosis.edge.schedulers.base import SchedulerError
from diagnosis.edge.schedulers.kubernetes import client as kube_client
from diagnosis.edge.schedulers.kubernetes.kueue import KueueAdapter
from diagnosis.edge.schedulers.kubernetes.volcano import (
    QUEUES,
    VolcanoAdapter,
    placement_of,
    with_placement,
)
from diagnosis.edge.schedulers.registry import adapter_for
from tests.support.kube_server import (
    KubeApiServer,
    adapter_config,
    kube_api_fixture,
    load_fixture,
    serving,
)

pytestmark = pytest.mark.kubernetes


kube_api = kube_api_fixture()


config = adapter_config


@pytest.fixture
def volcano(kube_api: KubeApiServer) -> Callable[..., VolcanoAdapter]:
    kube_api.load(load_fixture("nodes"))
    kube_api.load(load_fixture("volcano"))
    return lambda **extra: VolcanoAdapter(config(**extra))


@pytest.fixture
def kueue(kube_api: KubeApiServer) -> Callable[..., KueueAdapter]:
    kube_api.load(load_fixture("nodes"))
    kube_api.load(load_fixture("kueue"))
    return lambda **extra: KueueAdapter(config(**extra))


def by_name(rows: list[dict[str, Any]], key: str = "name") -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in rows}


def as_snapshot(state) -> snapshot.ClusterSnapshot:
    return snapshot.load(
        {
            "format": snapshot.FORMAT,
            "cluster": "k8s",
            "as_of": "2026-11-29T08:00:00Z",
            "scheduler": state.scheduler,
            "nodes": state.nodes,
            "queues": state.queues,
            "jobs": state.jobs,
        }
    )


# -- Volcano: the initial list -------------------------------------------------------------------


def test_gpu_nodes_carry_pool_model_and_state(volcano) -> None:
    nodes = by_name(volcano().read_state().nodes)
    assert "cpu-1" not in nodes  # no GPUs, not a node of the snapshot
    assert nodes["gpu-a-1"] == {
        "name": "gpu-a-1",
        "pool": "NVIDIA-A100-SXM4-80GB",
        "gpu_model": "NVIDIA-A100-SXM4-80GB",
        "gpus": 8,
        "state": "ready",
    }
    assert nodes["gpu-a-3"]["state"] == "drained"  # cordoned, no pod holds its GPUs
    assert nodes["gpu-h-2"]["state"] == "down"  # Ready is Unknown


def test_pool_label_is_configurable(volcano) -> None:
    nodes = volcano(pool_label="kubernetes.io/hostname").read_state().nodes
    assert {n["name"]: n["pool"] for n in nodes}["gpu-a-2"] == "gpu-a-2"


def test_queues_weight_deserved_capability_and_tenant(volcano) -> None:
    queues = by_name(volcano().read_state().queues)
    assert queues["team-a"] == {
        "name": "team-a",
        "tenant": "research",
        "weight": 4,
        "deserved_gpus": 16,
        "capability_gpus": 24,
    }
    assert queues["team-b"]["tenant"] == "team-b"


def test_running_gang_holds_annotated_and_packed_gpus(volcano) -> None:
    job = by_name(volcano().read_state().jobs, "id")["team-a/llm-pretrain"]
    assert (job["state"], job["pods"], job["gpus_per_pod"], job["gang"]) == ("running", 2, 8, True)
    assert job["allocation"] == [
        {"node": "gpu-a-1", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]},
        # no annotation on the second pod: its indexes are a guess, and say so
        {"node": "gpu-a-2", "gpus": [0, 1, 2, 3, 4, 5, 6, 7], "gpus_guessed": True},
    ]
    assert (job["tenant"], job["queue"], job["kind"]) == ("research", "team-a", "training")


def test_partial_gang_is_pending_with_volcano_reason(volcano) -> None:
    job = by_name(volcano().read_state().jobs, "id")["team-b/finetune"]
    assert job["state"] == "pending"
    assert job["min_member"] == 2
    assert len(job["allocation"]) == 1
    assert job["pending_reason"].startswith("NotEnoughResources: 1/2 tasks in gang unschedulable")
    assert job["partial_since"] == "2026-11-29T07:00:30Z"


def test_gpu_pod_outside_podgroups_is_a_one_pod_job(volcano) -> None:
    job = by_name(volcano().read_state().jobs, "id")["default/notebook"]
    assert (job["pods"], job["gpus_per_pod"], job["state"]) == (1, 1, "running")
    # bound before finetune-0, lowest free: a guess
    assert job["allocation"] == [{"node": "gpu-h-1", "gpus": [0], "gpus_guessed": True}]


def test_state_is_a_valid_snapshot(volcano) -> None:
    snap = as_snapshot(volcano().read_state())
    assert snap.total_gpus == 40
    assert snap.placement("NVIDIA-A100-SXM4-80GB") == "spread"


def test_initial_list_is_paged(volcano, kube_api: KubeApiServer) -> None:
    volcano(page_size=2).read_state()
    pod_lists = kube_api.requests_to("GET", "/api/v1/pods")
    assert [q.get("limit") for q in pod_lists] == [["2"]] * len(pod_lists)
    assert len(pod_lists) == 4  # 8 pods, 2 a page
    assert all("continue" in q for q in pod_lists[1:])


# -- Volcano: watching ---------------------------------------------------------------------------


def test_watch_folds_in_added_modified_and_deleted(volcano, kube_api: KubeApiServer) -> None:
    adapter = volcano()
    adapter.read_state()
    listed_at = kube_client.mirror(adapter.key, kube_client.PODS).resource_version
    queue = kube_api.get("Queue", "team-b")
    queue["spec"]["weight"] = 3
    kube_api.put(queue)
    kube_api.put({**kube_api.get("Queue", "default"), "metadata": {"name": "team-c"}})
    kube_api.delete("Pod", "notebook", "default")

    state = adapter.read_state()

    queues = by_name(state.queues)
    assert queues["team-b"]["weight"] == 3
    assert "team-c" in queues
    assert "default/notebook" not in by_name(state.jobs, "id")
    pod_requests = kube_api.requests_to("GET", "/api/v1/pods")
    assert pod_requests[-1]["watch"] == ["True"]
    assert pod_requests[-1]["resourceVersion"] == [listed_at]


def test_gone_resource_version_lists_again(volcano, kube_api: KubeApiServer) -> None:
    adapter = volcano()
    adapter.read_state()
    queue = kube_api.get("Queue", "team-a")
    queue["spec"]["weight"] = 9
    kube_api.put(queue)
    kube_api.compact()  # the version the mirrors hold is gone

    state = adapter.read_state()

    assert by_name(state.queues)["team-a"]["weight"] == 9
    stats = kube_client.mirror(adapter.key, kube_client.NODES).stats
    assert (stats.lists, stats.relists_after_gone) == (2, 1)


def test_watch_timeout_keeps_state_and_resumes(volcano, kube_api: KubeApiServer) -> None:
    adapter = volcano(request_timeout_s=0.5)
    first = adapter.read_state()
    kube_api.hang_watches = True
    started = time.monotonic()

    during = adapter.read_state()

    assert time.monotonic() - started < 10
    assert during == first
    queues = kube_client.mirror(adapter.key, QUEUES)
    assert queues.stats.watch_timeouts == 1
    kube_api.hang_watches = False
    queue = kube_api.get("Queue", "team-b")
    queue["spec"]["weight"] = 7
    kube_api.put(queue)
    assert by_name(adapter.read_state().queues)["team-b"]["weight"] == 7
    assert queues.stats.lists == 1  # resumed by watching, never listed again


def test_unreachable_api_is_a_transient_error(volcano, kube_api: KubeApiServer) -> None:
    adapter = volcano(request_timeout_s=0.5)
    kube_api.stop()
    with pytest.raises(SchedulerError) as caught:
        adapter.read_state()
    assert not caught.value.permanent


def test_apply_to_an_unreachable_api_is_a_transient_error(volcano, kube_api: KubeApiServer) -> None:
    adapter = volcano(request_timeout_s=0.5)
    kube_api.stop()
    change = {"kind": "queue-weight", "target": "queue:research", "from": 1, "to": 2}
    with pytest.raises(SchedulerError, match="volcano: applying a change") as caught:
        adapter.apply(change, dry_run=True)
    assert not caught.value.permanent


def test_wrong_token_is_a_permanent_error(volcano, kube_api: KubeApiServer) -> None:
    kube_api.token = "another"
    with pytest.raises(SchedulerError, match="401") as caught:
        volcano().read_state()
    assert caught.value.permanent


def test_kubeconfig_path_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUOBS_SECRET_NO_SUCH_KUBECONFIG", raising=False)
    adapter = adapter_for("volcano", {"kubeconfig_env": "GPUOBS_SECRET_NO_SUCH_KUBECONFIG"})
    with pytest.raises(SchedulerError, match="GPUOBS_SECRET_NO_SUCH_KUBECONFIG") as caught:
        adapter.read_state()
    assert caught.value.permanent


def test_unknown_or_mistyped_settings_are_named() -> None:
    with pytest.raises(SchedulerError) as caught:
        VolcanoAdapter({"pool_lable": "x", "page_size": "many"})
    assert "pool_lable: unknown setting" in str(caught.value)
    assert "page_size: expected a whole number" in str(caught.value)


# -- Volcano: events -----------------------------------------------------------------------------


def test_first_event_read_lists_and_maps_native_reasons(volcano) -> None:
    batch = volcano().read_events(None)
    kinds = {(e["kind"], e["reason"], e["job"], e["node"]) for e in batch.events}
    assert kinds == {
        ("failed_scheduling", "FailedScheduling", "team-b/eval-big", None),
        ("failed_scheduling", "Unschedulable", "team-b/finetune", None),
        ("scheduled", "Scheduled", "team-a/llm-pretrain", "gpu-a-1"),
        ("node_cordoned", "NodeNotSchedulable", None, "gpu-a-3"),
    }  # the kubelet's Pulling is no scheduler event
    assert [e["time"] for e in batch.events] == sorted(e["time"] for e in batch.events)
    assert batch.cursor


def test_events_since_a_cursor_are_only_the_new_versions(volcano, kube_api) -> None:
    cursor = volcano().read_events(None).cursor
    repeated = kube_api.get("Event", "eval-big-0.181c0d2f3a4b5c6d", "team-b")
    repeated["count"] = 4
    repeated["lastTimestamp"] = "2026-11-29T07:50:05Z"
    kube_api.put(repeated)

    batch = volcano().read_events(cursor)  # a new process: resumes from the stored cursor

    assert [(e["reason"], e["time"]) for e in batch.events] == [
        ("FailedScheduling", "2026-11-29T07:50:05Z")
    ]
    assert batch.events[0]["dedup_key"].endswith(f"@{repeated_version(kube_api)}")
    assert int(batch.cursor) > int(cursor)


def repeated_version(kube_api: KubeApiServer) -> str:
    return kube_api.get("Event", "eval-big-0.181c0d2f3a4b5c6d", "team-b")["metadata"][
        "resourceVersion"
    ]


def test_events_cursor_too_old_lists_again(volcano, kube_api) -> None:
    cursor = volcano().read_events(None).cursor
    late = kube_api.get("Event", "finetune.181c0d2f3a4b5c6e", "team-b")
    kube_api.put({**late, "metadata": {"name": "finetune.181c0d2f3a4b5c99", "namespace": "team-b"}})
    kube_api.compact()  # the cursor predates the server's history now

    batch = volcano().read_events(cursor)

    assert len(batch.events) == 5  # everything the server keeps; storage drops duplicates
    assert kube_client.mirror(volcano().key, kube_client.EVENTS).stats.relists_after_gone == 1


# -- Volcano: writes -----------------------------------------------------------------------------


def test_queue_weight_dry_run_writes_nothing(volcano, kube_api) -> None:
    result = volcano().apply(
        {"kind": "queue-weight", "target": "queue:team-a", "to": 8}, dry_run=True
    )
    assert (result.applied, result.before, result.after) == (False, 4, 8)
    assert kube_api.requests_to("PATCH", "/queues/team-a")[-1]["dryRun"] == ["All"]
    assert kube_api.get("Queue", "team-a")["spec"]["weight"] == 4
    assert '"spec":{"weight":8}' in result.command


def test_queue_weight_patch_is_guarded_by_resource_version(volcano, kube_api) -> None:
    version = kube_api.get("Queue", "team-a")["metadata"]["resourceVersion"]
    result = volcano().apply(
        {"kind": "queue-weight", "target": "queue:team-a", "to": 8}, dry_run=False
    )
    assert result.applied
    assert kube_api.get("Queue", "team-a")["spec"]["weight"] == 8
    assert f'"resourceVersion":"{version}"' in result.command


def test_queue_changed_since_the_recommendation_is_not_written(volcano, kube_api) -> None:
    change = {"kind": "queue-weight", "target": "queue:team-a", "to": 8, "from": 2}
    with pytest.raises(SchedulerError, match="changed since the recommendation") as caught:
        volcano().apply(change, dry_run=False)
    assert caught.value.permanent
    assert kube_api.requests_to("PATCH", "/queues/") == []


@pytest.mark.parametrize("weight", [0, 65536, 2.5, "4", True])
def test_queue_weight_outside_volcanos_range_is_refused(volcano, kube_api, weight) -> None:
    with pytest.raises(SchedulerError):
        volcano().apply(
            {"kind": "queue-weight", "target": "queue:team-a", "to": weight}, dry_run=True
        )
    assert kube_api.requests_to("PATCH", "/queues/") == []


def test_binpack_placement_patches_the_scheduler_configmap(volcano, kube_api) -> None:
    adapter = volcano()
    change = {"kind": "placement-policy", "target": "pool:NVIDIA-A100-SXM4-80GB", "to": "binpack"}
    result = adapter.apply(change, dry_run=False)
    conf = kube_api.get("ConfigMap", "volcano-scheduler-configmap", "volcano-system")["data"][
        "volcano-scheduler.conf"
    ]
    binpack = [
        p for t in yaml.safe_load(conf)["tiers"] for p in t["plugins"] if p["name"] == "binpack"
    ]
    assert binpack[0]["arguments"]["binpack.resources.nvidia.com/gpu"] == 10
    assert "nvidia.com/gpu" in binpack[0]["arguments"]["binpack.resources"]
    assert (result.before, result.after) == ("spread", "binpack")
    assert adapter.read_state().scheduler["placement"]["NVIDIA-A100-SXM4-80GB"] == "binpack"


def test_spread_takes_gpus_out_of_binpack_only() -> None:
    conf = {
        "tiers": [
            {
                "plugins": [
                    {
                        "name": "binpack",
                        "arguments": {
                            "binpack.weight": 10,
                            "binpack.cpu": 2,
                            "binpack.resources": "nvidia.com/gpu, example.com/foo",
                            "binpack.resources.nvidia.com/gpu": 5,
                        },
                    }
                ]
            }
        ]
    }
    spread = with_placement(conf, "spread", "nvidia.com/gpu", 10)
    assert placement_of(conf, "nvidia.com/gpu") == "binpack"
    assert placement_of(spread, "nvidia.com/gpu") == "spread"
    assert spread["tiers"][0]["plugins"][0]["arguments"] == {
        "binpack.weight": 10,
        "binpack.cpu": 2,
        "binpack.resources": "example.com/foo",
    }


def test_drain_cordons_and_evicts_but_not_daemonsets(volcano, kube_api) -> None:
    change = {"kind": "drain-node", "target": "node:gpu-a-1", "reason": "Xid 79"}
    result = volcano().apply(change, dry_run=False)
    node = kube_api.get("Node", "gpu-a-1")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["gpuobs.io/drain-reason"] == "Xid 79"
    with pytest.raises(KeyError):
        kube_api.get("Pod", "llm-pretrain-worker-0", "team-a")
    kube_api.get("Pod", "nvidia-device-plugin-daemonset-x7k2p", "gpu-operator")  # still there
    assert (result.before, result.after) == ("schedulable", "cordoned")


def test_drain_dry_run_and_disruption_budget(volcano, kube_api) -> None:
    kube_api.blocked_evictions.add("team-a/llm-pretrain-worker-0")
    result = volcano().apply({"kind": "drain-node", "target": "node:gpu-a-1"}, dry_run=True)
    assert "blocked by a PodDisruptionBudget: team-a/llm-pretrain-worker-0" in result.message
    assert not kube_api.get("Node", "gpu-a-1")["spec"].get("unschedulable")
    assert all(q["dryRun"] == ["All"] for q in kube_api.requests_to("PATCH", "/nodes/gpu-a-1"))


# -- Kueue ---------------------------------------------------------------------------------------


def test_cluster_queues_weight_quota_cohort_and_tenant(kueue) -> None:
    queues = by_name(kueue().read_state().queues)
    assert queues["cq-research"] == {
        "name": "cq-research",
        "tenant": "research",  # the namespace of its only LocalQueue
        "weight": 2,
        "deserved_gpus": 16,
        "capability_gpus": 24,
        "cohort": "org",
    }
    assert queues["cq-prod"]["tenant"] == "production"  # the LocalQueue's tenant label
    assert "capability_gpus" not in queues["cq-prod"]  # may borrow without limit


def test_admitted_workload_runs_on_its_jobs_pods(kueue) -> None:
    job = by_name(kueue().read_state().jobs, "id")["research/job-pretrain-5c7f1"]
    assert (job["state"], job["queue"], job["tenant"]) == ("running", "cq-research", "research")
    assert [a["node"] for a in job["allocation"]] == ["gpu-a-1", "gpu-a-2"]
    assert job["started"] == "2026-11-29T06:00:31Z"


def test_pending_and_preempted_workloads_say_why(kueue) -> None:
    jobs = by_name(kueue().read_state().jobs, "id")
    sweep, serve = jobs["research/job-sweep-9a1b3"], jobs["prod/job-serve-77d0e"]
    assert sweep["pending_reason"] == (
        "Pending: couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 4 more needed"
    )
    assert serve["state"] == "pending"
    assert serve["preemptions"] == 1
    assert serve["pending_reason"].startswith("Evicted: Preempted:")
    assert jobs["prod/job-old-1f2e3"]["state"] == "completed"
    as_snapshot(kueue().read_state())  # and the whole state loads as a snapshot


def test_workload_events(kueue) -> None:
    events = {(e["kind"], e["job"]) for e in kueue().read_events(None).events}
    assert events == {
        ("failed_scheduling", "research/job-sweep-9a1b3"),
        ("failed_scheduling", "prod/job-serve-77d0e"),  # its QuotaReserved reason after eviction
        ("preempted", "prod/job-serve-77d0e"),
        ("scheduled", "research/job-pretrain-5c7f1"),
    }


def test_fair_sharing_weight_write(kueue, kube_api) -> None:
    adapter = kueue()
    dry = adapter.apply(
        {"kind": "queue-weight", "target": "queue:cq-research", "to": 3}, dry_run=True
    )
    assert kube_api.get("ClusterQueue", "cq-research")["spec"]["fairSharing"]["weight"] == "2"
    real = adapter.apply(
        {"kind": "queue-weight", "target": "queue:cq-research", "to": 3}, dry_run=False
    )
    assert kube_api.get("ClusterQueue", "cq-research")["spec"]["fairSharing"]["weight"] == "3"
    assert (dry.applied, real.applied, real.before, real.after) == (False, True, 2, 3)


def test_kueue_does_not_place_pods(kueue, kube_api) -> None:
    with pytest.raises(SchedulerError, match="MostAllocated") as caught:
        kueue().apply(
            {"kind": "placement-policy", "target": "pool:x", "to": "binpack"}, dry_run=True
        )
    assert caught.value.permanent


def as_v1beta2(obj: dict[str, Any]) -> dict[str, Any]:
    """A v1beta1 fixture object as Kueue's v1beta2 (``cohort`` was renamed ``cohortName``)."""
    if not obj["apiVersion"].startswith("kueue.x-k8s.io/"):
        return obj
    spec = dict(obj.get("spec") or {})
    if "cohort" in spec:
        spec["cohortName"] = spec.pop("cohort")
    return {**obj, "apiVersion": "kueue.x-k8s.io/v1beta2", "spec": spec}


def test_kueue_v1beta2_reads_cohort_name_and_writes_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(tmp_path, monkeypatch, versions=("v1beta2",)) as server:
        server.load(load_fixture("nodes"))
        server.load(as_v1beta2(obj) for obj in load_fixture("kueue"))
        adapter = KueueAdapter(config(api_version="v1beta2"))
        assert by_name(adapter.read_state().queues)["cq-prod"]["cohort"] == "org"
        adapter.apply({"kind": "queue-weight", "target": "queue:cq-prod", "to": 2}, dry_run=False)
        assert server.requests_to("PATCH", "/kueue.x-k8s.io/v1beta2/clusterqueues/cq-prod")
        assert server.get("ClusterQueue", "cq-prod")["spec"]["fairSharing"] == {"weight": "2"}
