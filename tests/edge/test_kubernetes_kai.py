"""The KAI scheduler adapter (scheduling.run.ai Queue v2, PodGroup v2alpha2) driving the real
``kubernetes`` client against the loopback API server, which validates every KAI object it
serves or receives against the CRDs of tests/fixtures/crds/kai."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from diagnosis.core import snapshot
from diagnosis.edge.schedulers.base import SchedulerError
from diagnosis.edge.schedulers.kubernetes.kai import KaiAdapter
from diagnosis.edge.schedulers.registry import adapter_for
from tests.support.kube_server import (
    adapter_config,
    kube_api_fixture,
    serving,
)

pytestmark = pytest.mark.kubernetes
QUEUE = "Queue.scheduling.run.ai"


kube_api = kube_api_fixture("nodes", "kai")


def by(rows: list[dict[str, Any]], key: str = "name") -> dict[Any, dict[str, Any]]:
    return {row[key]: row for row in rows}


def test_the_registry_builds_the_kai_adapter() -> None:
    assert isinstance(adapter_for("kai", adapter_config()), KaiAdapter)


def test_queues_quota_limit_weight_and_parent(kube_api) -> None:
    state = KaiAdapter(adapter_config()).read_state()
    queues = by(state.queues)
    assert queues["research"] == {
        "name": "research",
        "tenant": "research-dept",
        "weight": 2,
        "deserved_gpus": 16,
        "capability_gpus": 24,
        "parent": "org",
    }
    assert "deserved_gpus" not in queues["org"]  # quota -1: unlimited, not a number of GPUs
    assert "capability_gpus" not in queues["inference"]  # limit -1: none
    assert state.scheduler["queue_parents"] == {"research": "org", "inference": "org"}


def test_a_running_podgroup_is_a_gang_job(kube_api) -> None:
    job = by(KaiAdapter(adapter_config()).read_state().jobs, "id")["research/pg-llm-train"]
    assert (job["state"], job["pods"], job["gpus_per_pod"], job["gang"]) == ("running", 2, 8, True)
    assert (job["queue"], job["tenant"]) == ("research", "research-dept")
    assert [a["node"] for a in job["allocation"]] == ["gpu-a-1", "gpu-a-2"]


def test_a_pending_podgroup_says_why(kube_api) -> None:
    job = by(KaiAdapter(adapter_config()).read_state().jobs, "id")["research/pg-sweep"]
    assert job["state"] == "pending"
    assert job["pending_reason"].startswith("OverLimit: podgroup research/pg-sweep requested 16")


def test_kai_state_is_a_valid_snapshot(kube_api) -> None:
    state = KaiAdapter(adapter_config()).read_state()
    snap = snapshot.load(
        {
            "format": snapshot.FORMAT,
            "cluster": "kai",
            "as_of": "2026-11-29T08:00:00Z",
            "scheduler": state.scheduler,
            "nodes": state.nodes,
            "queues": state.queues,
            "jobs": state.jobs,
        }
    )
    assert len(snap.jobs) == 2


def test_a_cluster_without_kai_is_a_clear_permanent_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(tmp_path, monkeypatch) as server:
        server.unserved.add("scheduling.run.ai/v2")
        with pytest.raises(SchedulerError, match="is the KAI scheduler installed") as caught:
            KaiAdapter(adapter_config()).read_state()
    assert caught.value.permanent


def test_over_quota_weight_dry_run_writes_nothing(kube_api) -> None:
    result = KaiAdapter(adapter_config()).apply(
        {"kind": "queue-weight", "target": "queue:research", "from": 2, "to": 3}, dry_run=True
    )
    assert (result.before, result.after, result.applied) == (2, 3, False)
    assert "--dry-run=server" in result.command
    assert kube_api.get(QUEUE, "research")["spec"]["resources"]["gpu"]["overQuotaWeight"] == 2


def test_over_quota_weight_write_is_guarded_by_resource_version(kube_api) -> None:
    KaiAdapter(adapter_config()).apply(
        {"kind": "queue-weight", "target": "queue:research", "to": 3}, dry_run=False
    )
    patches = kube_api.requests_to("PATCH", "/scheduling.run.ai/v2/queues/research")
    assert len(patches) == 1
    assert kube_api.get(QUEUE, "research")["spec"]["resources"]["gpu"]["overQuotaWeight"] == 3


def test_quota_change_writes_the_gpu_quota(kube_api) -> None:
    KaiAdapter(adapter_config()).apply(
        {"kind": "queue-weight", "field": "quota", "target": "queue:inference", "to": 12},
        dry_run=False,
    )
    assert kube_api.get(QUEUE, "inference")["spec"]["resources"]["gpu"]["quota"] == 12


def test_a_stale_resource_version_is_a_conflict(kube_api) -> None:
    stale = kube_api.get(QUEUE, "research")["metadata"]["resourceVersion"]
    queue = kube_api.get(QUEUE, "research")
    queue["spec"]["priority"] = 50
    kube_api.put(queue)  # someone else changed the queue since
    with pytest.raises(SchedulerError, match="changed since the recommendation") as caught:
        KaiAdapter(adapter_config()).apply(
            {
                "kind": "queue-weight",
                "target": "queue:research",
                "to": 3,
                "resource_version": stale,
            },
            dry_run=False,
        )
    assert caught.value.conflict


def test_a_409_from_the_server_is_a_conflict(kube_api, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = KaiAdapter(adapter_config())
    # The queue changes between the adapter's read and its patch: the server answers 409.
    custom = k8s.CustomObjectsApi
    real = custom.get_cluster_custom_object

    def read_and_race(self, *args, **kwargs):
        found = real(self, *args, **kwargs)
        queue = kube_api.get(QUEUE, "research")
        queue["spec"]["priority"] = 7
        kube_api.put(queue)
        return found

    monkeypatch.setattr(custom, "get_cluster_custom_object", read_and_race)
    with pytest.raises(SchedulerError, match="409 Conflict") as caught:
        adapter.apply({"kind": "queue-weight", "target": "queue:research", "to": 3}, dry_run=False)
    assert caught.value.conflict
    assert kube_api.get(QUEUE, "research")["spec"]["resources"]["gpu"]["overQuotaWeight"] == 2


@pytest.mark.parametrize("value", [0, -2, "3", True])
def test_bad_over_quota_weights_are_refused(kube_api, value) -> None:
    with pytest.raises(SchedulerError, match="queue-weight") as caught:
        KaiAdapter(adapter_config()).apply(
            {"kind": "queue-weight", "target": "queue:research", "to": value}, dry_run=True
        )
    assert caught.value.permanent


def test_a_waiting_podgroups_scheduling_condition_is_an_event(kube_api) -> None:
    events = KaiAdapter(adapter_config()).read_events(None).events
    assert [(e["kind"], e["job"], e["reason"], e["time"]) for e in events] == [
        ("failed_scheduling", "research/pg-sweep", "OverLimit", "2026-11-29T07:31:00Z")
    ]
