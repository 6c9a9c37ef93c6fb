"""The recommendation workflow against the loopback Kubernetes API server
(tests/support/kube_server.py), through the real ``kubernetes`` client: Volcano queue weights, the
binpack arguments in the scheduler ConfigMap and node drains; Kueue fair-sharing weights. Every
custom object written is validated by the server against the real CRD schema
(../shared/data/crds); dry runs carry ``dryRun=All`` and store nothing; a stale resourceVersion
gets ``409 Conflict`` and stops the apply; a value changed by hand stops it before writing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from diagnosis.actions.workflow.apply import perform_apply
from diagnosis.actions.workflow.base import TransientApplyError
from diagnosis.actions.workflow.review import request_apply
from diagnosis.models import AuditEntry, Cluster
from tests.support import kube_server
from tests.support.kube_server import (
    KubeApiServer,
    adapter_config,
    kube_api_fixture,
    load_fixture,
)
from tests.support.records import make_recommendation

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]

A100 = "pool:NVIDIA-A100-SXM4-80GB"
CONFIGMAP = ("volcano-scheduler-configmap", "volcano-system")


kube_api = kube_api_fixture(crds_required=True)


@pytest.fixture
def make_kube_cluster(kube_api: KubeApiServer, make_cluster) -> Callable[..., Cluster]:
    def build(kind: str, *, writes: bool = True) -> Cluster:
        kube_api.load(load_fixture("nodes"))
        kube_api.load(load_fixture(kind))
        return make_cluster(
            f"{kind}-workflow",
            scheduler_kind=kind,
            scheduler_config=adapter_config(),
            metrics_kind="none",
            dry_run=not writes,
        )

    return build


def writes(kube_api: KubeApiServer, path_part: str) -> list[dict[str, list[str]]]:
    """The PATCH requests to a path that were real writes (no ``dryRun``)."""
    return [q for q in kube_api.requests_to("PATCH", path_part) if "dryRun" not in q]


def binpack_gpu_weight(kube_api: KubeApiServer) -> Any:
    conf = yaml.safe_load(kube_api.get("ConfigMap", *CONFIGMAP)["data"]["volcano-scheduler.conf"])
    plugins = [p for tier in conf["tiers"] for p in tier["plugins"] if p["name"] == "binpack"]
    return (plugins[0].get("arguments") or {}).get("binpack.resources.nvidia.com/gpu")


# -- Volcano -------------------------------------------------------------------------------------


def test_a_queue_weight_is_dry_run_at_approval_then_patched_once(
    kube_api, make_kube_cluster, approve, dave, run_tasks
) -> None:
    cluster = make_kube_cluster("volcano")
    rec = approve(cluster, "queue-weight", "queue:team-b", {"from": 2, "to": 4})
    assert rec.dry_run_result["before"] == 2
    assert kube_api.requests_to("PATCH", "/queues/team-b") == [{"dryRun": ["All"]}]
    assert kube_api.get("Queue", "team-b")["spec"]["weight"] == 2

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "applied", rec.status_message
    assert kube_api.get("Queue", "team-b")["spec"]["weight"] == 4
    assert len(writes(kube_api, "/queues/team-b")) == 1
    entry = AuditEntry.objects.get(recommendation=rec, action="apply")
    assert entry.after["command"].startswith("kubectl patch queues.scheduling.volcano.sh team-b")
    assert '"resourceVersion"' in entry.after["command"]
    assert (entry.before, entry.after["value"]) == (2, 4)


def test_binpack_updates_the_scheduler_configmap(
    kube_api, make_kube_cluster, approve, dave, run_tasks
) -> None:
    cluster = make_kube_cluster("volcano")
    rec = approve(cluster, "placement-policy", A100, {"from": "spread", "to": "binpack"})
    assert binpack_gpu_weight(kube_api) is None  # the dry run stored nothing

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "applied", rec.status_message
    assert binpack_gpu_weight(kube_api) == 10
    assert rec.apply_result["command"].startswith(
        "kubectl -n volcano-system patch configmap volcano-scheduler-configmap"
    )


def test_oncall_drains_a_node_cordon_and_evict(
    kube_api, make_kube_cluster, approve, erin, run_tasks
) -> None:
    cluster = make_kube_cluster("volcano")
    reason = "gpuobs: Xid 79 (GPU has fallen off the bus) on gpu-a-1/3"
    rec = approve(
        cluster, "drain-node", "node:gpu-a-1", {"from": "ready", "to": "drained", "reason": reason}
    )
    assert not kube_api.get("Node", "gpu-a-1")["spec"].get("unschedulable")

    rec = run_tasks(request_apply, rec, erin)

    assert rec.state == "applied", rec.status_message
    node = kube_api.get("Node", "gpu-a-1")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["gpuobs.io/drain-reason"] == reason
    with pytest.raises(KeyError):
        kube_api.get("Pod", "llm-pretrain-worker-0", "team-a")  # evicted
    assert "evicted" in rec.apply_result["message"]


def test_a_cluster_in_dry_run_sends_only_dry_runs(
    kube_api, make_kube_cluster, approve, dave, run_tasks
) -> None:
    cluster = make_kube_cluster("volcano", writes=False)
    rec = approve(cluster, "queue-weight", "queue:team-b", {"from": 2, "to": 4})

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "approved"
    assert "dry run only" in rec.status_message
    assert kube_api.get("Queue", "team-b")["spec"]["weight"] == 2
    assert writes(kube_api, "/queues/") == []
    assert len(kube_api.requests_to("PATCH", "/queues/team-b")) == 2  # approval and apply


def test_a_stale_resource_version_gets_409_and_stops_the_apply(
    kube_api, make_kube_cluster, approve, dave, run_tasks, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = make_kube_cluster("volcano")
    rec = approve(cluster, "queue-weight", "queue:team-b", {"from": 2, "to": 4})
    original = kube_server._Handler._patch

    def someone_else_writes_first(self, kind, namespace, name, query):
        if name == "team-b" and "dryRun" not in query:  # a label edit lands just before ours
            queue = kube_api.get("Queue", "team-b")
            queue["metadata"].setdefault("labels", {})["owner"] = "someone-else"
            kube_api.put(queue)
        return original(self, kind, namespace, name, query)

    monkeypatch.setattr(kube_server._Handler, "_patch", someone_else_writes_first)

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "proposed"
    assert "409 Conflict" in rec.status_message
    assert kube_api.get("Queue", "team-b")["spec"]["weight"] == 2
    assert kube_api.get("Queue", "team-b")["metadata"]["labels"]["owner"] == "someone-else"


def test_a_weight_changed_by_hand_stops_the_apply_before_writing(
    kube_api, make_kube_cluster, approve, dave, run_tasks
) -> None:
    cluster = make_kube_cluster("volcano")
    rec = approve(cluster, "queue-weight", "queue:team-b", {"from": 2, "to": 4})
    queue = kube_api.get("Queue", "team-b")
    queue["spec"]["weight"] = 3
    kube_api.put(queue)

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "proposed"
    assert "it is now 3.0, the recommendation expected 2" in rec.status_message
    assert writes(kube_api, "/queues/") == []


def test_an_unreachable_api_server_is_retried_then_fails(kube_api, make_kube_cluster) -> None:
    cluster = make_kube_cluster("volcano")
    rec = make_recommendation(
        cluster, change={"from": 2, "to": 4}, state="applying", apply_key="k1"
    )
    kube_api.stop()

    with pytest.raises(TransientApplyError):
        perform_apply(rec.pk, "k1", final_attempt=False)
    outcome = perform_apply(rec.pk, "k1", final_attempt=True)

    rec.refresh_from_db()
    assert (outcome.outcome, rec.state) == ("failed", "failed")
    assert "the dry run failed" in rec.status_message


# -- Kueue ---------------------------------------------------------------------------------------


def test_a_kueue_fair_sharing_weight_is_patched(
    kube_api, make_kube_cluster, approve, dave, run_tasks
) -> None:
    cluster = make_kube_cluster("kueue")
    rec = approve(cluster, "queue-weight", "queue:cq-research", {"from": 2, "to": 4})
    assert kube_api.get("ClusterQueue", "cq-research")["spec"]["fairSharing"]["weight"] == "2"

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "applied", rec.status_message
    assert kube_api.get("ClusterQueue", "cq-research")["spec"]["fairSharing"]["weight"] == "4"
    assert rec.apply_result["command"].startswith(
        "kubectl patch clusterqueues.kueue.x-k8s.io cq-research"
    )


def test_kueue_refuses_a_placement_change_and_it_fails_with_the_reason(
    kube_api, make_kube_cluster, approve, dave, run_tasks
) -> None:
    cluster = make_kube_cluster("kueue")
    rec = approve(cluster, "placement-policy", A100, {"from": None, "to": "binpack"})
    assert "MostAllocated" in rec.dry_run_result["error"]

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "failed"
    assert "MostAllocated" in rec.status_message


# -- Volcano's capacity plugin and the KAI scheduler ---------------------------------------------


def test_a_deserved_change_is_dry_run_then_patched_into_spec_deserved(
    kube_api, make_kube_cluster, approve, dave, run_tasks
) -> None:
    cluster = make_kube_cluster("volcano")
    change = {"field": "deserved", "from": 8, "to": 12}
    rec = approve(cluster, "queue-weight", "queue:team-b", change)
    assert rec.dry_run_result["before"] == 8
    assert kube_api.get("Queue", "team-b")["spec"]["deserved"] == {"nvidia.com/gpu": "8"}

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "applied", rec.status_message
    assert kube_api.get("Queue", "team-b")["spec"]["deserved"] == {"nvidia.com/gpu": "12"}
    assert kube_api.get("Queue", "team-b")["spec"]["weight"] == 2  # the weight is not the knob


KAI_QUEUE = "Queue.scheduling.run.ai"


def test_a_kai_over_quota_weight_is_dry_run_then_patched_once(
    kube_api, make_kube_cluster, approve, dave, run_tasks
) -> None:
    cluster = make_kube_cluster("kai")
    rec = approve(cluster, "queue-weight", "queue:research", {"from": 2, "to": 4})
    assert rec.dry_run_result["before"] == 2
    assert kube_api.get(KAI_QUEUE, "research")["spec"]["resources"]["gpu"]["overQuotaWeight"] == 2

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "applied", rec.status_message
    assert kube_api.get(KAI_QUEUE, "research")["spec"]["resources"]["gpu"]["overQuotaWeight"] == 4
    assert len(writes(kube_api, "/scheduling.run.ai/v2/queues/research")) == 1
    entry = AuditEntry.objects.get(recommendation=rec, action="apply")
    assert entry.after["command"].startswith("kubectl patch queues.scheduling.run.ai research")


def test_a_kai_queue_changed_in_between_gets_409_and_stops_the_apply(
    kube_api, make_kube_cluster, approve, dave, run_tasks, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = make_kube_cluster("kai")
    rec = approve(cluster, "queue-weight", "queue:research", {"from": 2, "to": 4})
    original = kube_server._Handler._patch

    def someone_else_writes_first(self, kind, namespace, name, query):
        if name == "research" and "dryRun" not in query:
            queue = kube_api.get(KAI_QUEUE, "research")
            queue["spec"]["priority"] = 7
            kube_api.put(queue)
        return original(self, kind, namespace, name, query)

    monkeypatch.setattr(kube_server._Handler, "_patch", someone_else_writes_first)

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "proposed"
    assert "409 Conflict" in rec.status_message
    assert kube_api.get(KAI_QUEUE, "research")["spec"]["resources"]["gpu"]["overQuotaWeight"] == 2
