"""POST /api/v1/clusters/{cluster}/nodes/{node}/topology: token auth and permission, the real
``nvidia-smi topo -m`` text parsed in the request and answered 202, stored by the worker's task
(replacing the node's previous upload; run in-process here), 400 for text that is no matrix
(nothing stored), and the stored topology merged into the snapshots of the cluster (GPU count
checked)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from diagnosis.actions.records.inbound import record_cluster_batch, record_pending_cluster_batches
from diagnosis.actions.records.topology import merge_stored_topology, record_node_topology
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.builtin.topology_misplacement import NVLINK_UNKNOWN, RULE
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.models import Cluster, InboundClusterBatch, InboundState, NodeTopology
from tests.edge.test_topology_nvidia_smi import matrix, real_file
from tests.support.alert_delivery import deliver
from tests.support.builders import SnapshotBuilder
from tests.support.world import create_machine_user, sender_client, token_client

pytestmark = pytest.mark.django_db

DGX = "dgx_a100_sxm4_80gb_topo_m__DeepEP_issue13.txt"


@pytest.fixture
def cluster(make_cluster) -> Cluster:
    return make_cluster("dgx-pod", scheduler_kind="slurm")


@pytest.fixture
def uploader(db: None) -> User:
    return create_machine_user("topology-uploader")


def upload(client: APIClient, text: str | bytes, node: str = "dgx-01", cluster: str = "dgx-pod"):
    """A post whose stored batch the worker's task reads before this returns."""
    body = text.encode() if isinstance(text, str) else text
    return deliver(
        client, f"/api/v1/clusters/{cluster}/nodes/{node}/topology", body, content_type="text/plain"
    )


def test_real_upload_is_parsed_and_stored(cluster, uploader):
    response = upload(sender_client(uploader, "topology", cluster), real_file(DGX).read_bytes())
    assert response.status_code == 202
    answer = response.json()
    assert answer == {
        "cluster": "dgx-pod",
        "node": "dgx-01",
        "gpus": 8,
        "nvlink_domains": [[0, 1, 2, 3, 4, 5, 6, 7]],
        "numa": [0, 0, 0, 0, 1, 1, 1, 1],
        "batch": answer["batch"],
        "state": "pending",
    }
    batch = InboundClusterBatch.objects.get(pk=answer["batch"])
    assert (batch.state, batch.result["topology"], batch.sender) == ("done", "created", uploader)
    row = NodeTopology.objects.get(cluster=cluster, node="dgx-01")
    assert row.uploaded_by == uploader
    assert "NV12" in row.raw_text


def test_a_second_upload_replaces_the_first(cluster, uploader):
    client = sender_client(uploader, "topology", cluster, keyword="Bearer")
    upload(client, real_file(DGX).read_bytes())
    islands = [["X" if a == b else ("NV4" if a // 2 == b // 2 else "SYS") for b in range(4)]
               for a in range(4)]  # fmt: skip
    response = upload(client, matrix(islands))
    assert response.status_code == 202
    assert response.json()["nvlink_domains"] == [[0, 1], [2, 3]]
    assert NodeTopology.objects.get(cluster=cluster).nvlink_domains == [[0, 1], [2, 3]]
    assert NodeTopology.objects.filter(cluster=cluster).count() == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "no `nvidia-smi topo -m` matrix found"),
        (b"\tGPU0\tGPU1\nGPU0\tX\tQPI\n", "unknown link 'QPI'"),
        (b"x" * 300_000, "at most"),
    ],
)
def test_bad_text_is_refused_and_stores_nothing(cluster, uploader, body, message):
    response = upload(sender_client(uploader, "topology", cluster), body)
    assert response.status_code == 400
    assert message in response.json()["errors"]["body"][0]
    assert not NodeTopology.objects.exists()


def test_bad_node_name_is_refused(cluster, uploader):
    response = upload(
        sender_client(uploader, "topology", cluster), real_file(DGX).read_bytes(), node="-bad-"
    )
    assert response.status_code == 400


@pytest.mark.parametrize("who", ["anonymous", "no-permission", "permission-only", "staff"])
def test_uploads_need_a_token_scoped_to_topology(cluster, make_user, alice, who):
    user = {
        "anonymous": None,
        "no-permission": make_user("plain"),
        "permission-only": create_machine_user("old-uploader", "add_nodetopology"),
        "staff": alice,
    }[who]
    response = upload(token_client(user), real_file(DGX).read_bytes())
    assert response.status_code in (401, 403)
    assert not NodeTopology.objects.exists()


def test_a_token_for_another_cluster_is_404(cluster, make_cluster, uploader):
    other = make_cluster("other-pod", scheduler_kind="slurm")
    response = upload(sender_client(uploader, "topology", other), real_file(DGX).read_bytes())
    assert response.status_code == 404
    assert not NodeTopology.objects.exists()


def test_unknown_cluster_is_404(cluster, uploader):
    response = upload(
        sender_client(uploader, "topology", cluster), real_file(DGX).read_bytes(), cluster="nope"
    )
    assert response.status_code == 404


# -- merged into the cluster's snapshots ---------------------------------------------------------


def tp8_document() -> dict:
    return (
        SnapshotBuilder()
        .node("dgx-01", gpus=8)
        .node("dgx-02", gpus=4)
        .job("j1", gpus_per_pod=8, tp=8, node="dgx-01")
        .document()
    )


def judge(document):
    snap = snapshot_format.load(document)
    return RULE.evaluate(snap, RULE.resolve(), SnapshotFacts(snap))


def test_stored_topology_turns_not_judged_into_judged(cluster):
    before = judge(tp8_document())
    assert before.not_judged[NVLINK_UNKNOWN] == 1
    record_node_topology(cluster, "dgx-01", real_file(DGX).read_text())
    merged = merge_stored_topology(cluster, tp8_document())
    assert merged["nodes"][0]["topology"] == {
        "nvlink_domains": [[0, 1, 2, 3, 4, 5, 6, 7]],
        "numa": [0, 0, 0, 0, 1, 1, 1, 1],
    }
    after = judge(merged)
    assert not after.findings
    assert after.not_judged[NVLINK_UNKNOWN] == 0


def test_stored_topology_of_another_gpu_count_is_not_used(cluster):
    record_node_topology(cluster, "dgx-02", real_file(DGX).read_text())  # 8 GPUs, node has 4
    merged = merge_stored_topology(cluster, tp8_document())
    assert "topology" not in merged["nodes"][1]
    assert "lists 8 GPUs, the scheduler 4: not used" in merged["collection"]["notes"][0]


def test_nothing_stored_leaves_the_document_alone(cluster):
    document = tp8_document()
    assert merge_stored_topology(cluster, document) == document


# -- hostile bodies and names (issue #28, item 1) -------------------------------------------------


def eight_gpus(numa: list[str]) -> str:
    return matrix([["X" if a == b else "NV12" for b in range(8)] for a in range(8)], numa=numa)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (eight_gpus(["0"] * 7 + ["9" * 4000]), "row GPU7: NUMA node '999999999999' is above 4095"),
        (eight_gpus(["0"] * 8).replace("Legend:", "# a comment \x00\nLegend:"), "control char"),
        (matrix([["X", "NV9999"], ["NV9999", "X"]]), "more than 64 links"),
    ],
    ids=["numa-4000-nines", "nul-in-a-comment", "nvlink-count"],
)
def test_hostile_text_is_a_400_and_stores_nothing(cluster, uploader, body, message):
    response = upload(sender_client(uploader, "topology", cluster), body)
    assert response.status_code == 400
    assert message in response.json()["errors"]["body"][0]
    assert not NodeTopology.objects.exists()


def test_a_numa_cell_of_superscript_two_is_unknown_not_a_500(cluster, uploader):
    response = upload(sender_client(uploader, "topology", cluster), eight_gpus(["0"] * 7 + ["²"]))
    assert response.status_code == 202
    assert response.json()["numa"] == [0] * 7 + [None]


def test_a_node_name_ending_in_a_line_feed_is_refused(cluster, uploader):
    response = upload(
        sender_client(uploader, "topology", cluster), real_file(DGX).read_bytes(), node="gpu-121%0A"
    )
    assert response.status_code == 400
    assert not NodeTopology.objects.exists()


def test_one_node_more_than_the_clusters_bound_is_refused(cluster, uploader, settings):
    settings.GPUOBS_TOPOLOGY_MAX_NODES = 1
    client = sender_client(uploader, "topology", cluster)
    assert upload(client, real_file(DGX).read_bytes(), node="dgx-01").status_code == 202
    assert upload(client, real_file(DGX).read_bytes(), node="dgx-01").status_code == 202
    response = upload(client, real_file(DGX).read_bytes(), node="dgx-02")
    assert response.status_code == 400
    assert "GPUOBS_TOPOLOGY_MAX_NODES" in response.json()["errors"]["body"][0]
    assert list(NodeTopology.objects.values_list("node", flat=True)) == ["dgx-01"]


# -- received in the request, stored by the worker (issue #29, item 1) ---------------------------


def test_the_answer_comes_before_the_store_and_the_batch_says_how_it_went(cluster, uploader):
    client = sender_client(uploader, "topology", cluster)
    response = client.post(  # no task run: what the receiver itself did
        "/api/v1/clusters/dgx-pod/nodes/dgx-01/topology",
        real_file(DGX).read_bytes(),
        content_type="text/plain",
    )
    assert response.status_code == 202
    assert not NodeTopology.objects.exists()
    status_url = f"/api/v1/clusters/dgx-pod/inbound/{response.json()['batch']}"
    assert client.get(status_url).json()["state"] == "pending"

    assert record_cluster_batch(response.json()["batch"])["outcome"] == "recorded"
    assert record_cluster_batch(response.json()["batch"])["outcome"] == "taken"  # redelivered

    shown = client.get(status_url).json()
    assert (shown["state"], shown["kind"], shown["node"]) == ("done", "topology", "dgx-01")
    assert shown["result"]["gpus"] == 8
    assert NodeTopology.objects.get(cluster=cluster).gpus == 8


def test_an_older_upload_read_after_a_newer_one_leaves_the_newer(cluster, uploader):
    client = sender_client(uploader, "topology", cluster)
    path = "/api/v1/clusters/dgx-pod/nodes/dgx-01/topology"
    older = client.post(path, real_file(DGX).read_bytes(), content_type="text/plain").json()
    islands = [["X" if a == b else ("NV4" if a // 2 == b // 2 else "SYS") for b in range(4)]
               for a in range(4)]  # fmt: skip
    newer = client.post(path, matrix(islands).encode(), content_type="text/plain").json()

    record_cluster_batch(newer["batch"])
    assert record_cluster_batch(older["batch"])["outcome"] == "recorded"

    assert InboundClusterBatch.objects.get(pk=older["batch"]).result == {"topology": "superseded"}
    assert NodeTopology.objects.get(cluster=cluster).gpus == 4


def test_a_batch_refused_by_the_store_is_failed_with_its_reason(cluster, uploader, settings):
    client = sender_client(uploader, "topology", cluster)
    path = "/api/v1/clusters/dgx-pod/nodes/{}/topology"
    first = client.post(
        path.format("dgx-01"), real_file(DGX).read_bytes(), content_type="text/plain"
    )
    second = client.post(
        path.format("dgx-02"), real_file(DGX).read_bytes(), content_type="text/plain"
    )
    settings.GPUOBS_TOPOLOGY_MAX_NODES = 1  # lowered after both were received

    record_cluster_batch(first.json()["batch"])
    assert record_cluster_batch(second.json()["batch"])["outcome"] == "refused"

    shown = client.get(f"/api/v1/clusters/dgx-pod/inbound/{second.json()['batch']}").json()
    assert shown["state"] == InboundState.FAILED
    assert "GPUOBS_TOPOLOGY_MAX_NODES" in shown["error"]


def test_a_lost_send_is_stored_by_the_sweep(cluster, uploader):
    client = sender_client(uploader, "topology", cluster)
    response = client.post(
        "/api/v1/clusters/dgx-pod/nodes/dgx-01/topology",
        real_file(DGX).read_bytes(),
        content_type="text/plain",
    )
    batch = response.json()["batch"]
    assert record_pending_cluster_batches() == []  # fresh: left to its own task
    InboundClusterBatch.objects.filter(pk=batch).update(
        received_at=timezone.now() - timedelta(minutes=1)
    )
    assert record_pending_cluster_batches() == [batch]
    assert NodeTopology.objects.filter(cluster=cluster).exists()


def test_a_batch_is_shown_only_to_a_token_that_may_send_it(cluster, make_cluster, uploader):
    response = upload(sender_client(uploader, "topology", cluster), real_file(DGX).read_bytes())
    url = f"/api/v1/clusters/dgx-pod/inbound/{response.json()['batch']}"
    other = make_cluster("other-pod", scheduler_kind="slurm")
    assert sender_client(uploader, "topology", other).get(url).status_code == 404
    assert sender_client(uploader, "events", cluster).get(url).status_code == 404
    assert APIClient().get(url).status_code in (401, 403)
