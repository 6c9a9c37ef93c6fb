"""``gang-release`` through the Kubernetes adapters, against the loopback API server of
tests/support/kube_server.py: Volcano and KAI evict the PodGroup's pods (the Eviction API, so
PodDisruptionBudgets hold; the job controller recreates them), Kueue deactivates the Workload
(v1beta2 ``spec.active: false``: "Changing active from true to false will evict any running
workloads", Kueue's workload_types.go). Dry runs store nothing; a gang that is no longer partial
is a conflict."""

from __future__ import annotations

import copy

import pytest

from diagnosis.edge.schedulers.base import SchedulerError
from diagnosis.edge.schedulers.kubernetes.kai import KaiAdapter
from diagnosis.edge.schedulers.kubernetes.kueue import KueueAdapter
from diagnosis.edge.schedulers.kubernetes.volcano import VolcanoAdapter
from tests.support.kube_server import (
    KubeApiServer,
    adapter_config,
    kube_api_fixture,
    load_fixture,
)

pytestmark = pytest.mark.kubernetes


kube_api = kube_api_fixture("nodes", versions=("v1beta2",))


def release(target: str, **extra) -> dict:
    return {"kind": "gang-release", "target": f"job:{target}", "to": "requeued", **extra}


def pods_of(kube_api: KubeApiServer, namespace: str, annotation: str, group: str) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in kube_api.store["pods"].values()
        if p["metadata"].get("namespace") == namespace
        and (p["metadata"].get("annotations") or {}).get(annotation) == group
    )


# -- Volcano -------------------------------------------------------------------------------------


def test_volcano_dry_run_reads_the_partial_gang_and_evicts_nothing(kube_api) -> None:
    kube_api.load(load_fixture("volcano"))

    result = VolcanoAdapter(adapter_config()).apply(
        release("team-b/finetune", **{"from": "partial"}), dry_run=True
    )

    assert (result.before, result.after, result.applied) == ("partial", "requeued", False)
    assert "pods/finetune-0/eviction" in result.command
    assert pods_of(kube_api, "team-b", "scheduling.k8s.io/group-name", "finetune") == [
        "finetune-0",
        "finetune-1",
    ]


def test_volcano_release_evicts_every_pod_of_the_podgroup(kube_api) -> None:
    kube_api.load(load_fixture("volcano"))

    result = VolcanoAdapter(adapter_config()).apply(
        release("team-b/finetune", **{"from": "partial"}), dry_run=False
    )

    assert result.applied
    assert "evicted 2 pod(s)" in result.message
    assert pods_of(kube_api, "team-b", "scheduling.k8s.io/group-name", "finetune") == []
    assert pods_of(kube_api, "team-a", "scheduling.k8s.io/group-name", "llm-pretrain")


def test_volcano_refuses_to_release_a_gang_that_started(kube_api) -> None:
    kube_api.load(load_fixture("volcano"))

    with pytest.raises(SchedulerError, match="it is running, expected partial") as raised:
        VolcanoAdapter(adapter_config()).apply(
            release("team-a/llm-pretrain", **{"from": "partial"}), dry_run=False
        )

    assert raised.value.conflict
    assert len(pods_of(kube_api, "team-a", "scheduling.k8s.io/group-name", "llm-pretrain")) == 2


# -- KAI -----------------------------------------------------------------------------------------


def test_kai_release_evicts_the_pods_of_its_podgroup(kube_api) -> None:
    kube_api.load(load_fixture("kai"))
    bound = copy.deepcopy(kube_api.get("Pod", "sweep-0", "research"))
    bound["spec"]["nodeName"] = "gpu-h-1"  # one of its two pods bound: a partial gang
    kube_api.put(bound)

    result = KaiAdapter(adapter_config()).apply(
        release("research/pg-sweep", **{"from": "partial"}), dry_run=False
    )

    assert result.before == "partial"
    assert pods_of(kube_api, "research", "pod-group-name", "pg-sweep") == []
    assert pods_of(kube_api, "research", "pod-group-name", "pg-llm-train") == [
        "llm-train-0",
        "llm-train-1",
    ]


# -- Kueue ---------------------------------------------------------------------------------------


def admitted_not_ready(kube_api: KubeApiServer, name: str) -> None:
    """The Workload with its quota reserved and its pods not all ready (a partial hold)."""
    workload = copy.deepcopy(kube_api.get("Workload", name, "research"))
    workload["status"] = {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "Quota reserved in ClusterQueue research",
                "lastTransitionTime": "2026-11-29T07:20:00Z",
            },
            {
                "type": "PodsReady",
                "status": "False",
                "reason": "WaitForPodsReady",
                "message": "Not all pods are ready or succeeded",
                "lastTransitionTime": "2026-11-29T07:20:00Z",
            },
        ]
    }
    kube_api.put(workload)


def test_kueue_release_deactivates_the_workload(kube_api) -> None:
    kube_api.load(load_fixture("kueue"))
    admitted_not_ready(kube_api, "job-sweep-9a1b3")
    adapter = KueueAdapter(adapter_config())

    dry = adapter.apply(release("research/job-sweep-9a1b3", **{"from": "partial"}), dry_run=True)
    still = kube_api.get("Workload", "job-sweep-9a1b3", "research")["spec"].get("active")
    done = adapter.apply(release("research/job-sweep-9a1b3", **{"from": "partial"}), dry_run=False)

    assert (dry.before, still) == ("partial", True)
    assert '"active":false' in done.command
    assert kube_api.get("Workload", "job-sweep-9a1b3", "research")["spec"]["active"] is False
    assert done.after == "inactive"


def test_kueue_refuses_a_workload_that_is_not_partial(kube_api) -> None:
    kube_api.load(load_fixture("kueue"))  # job-sweep-9a1b3 waits for quota: pending

    with pytest.raises(SchedulerError, match="it is pending, expected partial"):
        KueueAdapter(adapter_config()).apply(
            release("research/job-sweep-9a1b3", **{"from": "partial"}), dry_run=False
        )
