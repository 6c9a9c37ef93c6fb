"""POST /api/v1/clusters/{cluster}/nodes/{node}/topology: token auth and permission, the real
``nvidia-smi topo -m`` text parsed and stored (replacing the node's previous upload), 400 for
text that is no matrix (nothing stored), and the stored topology merged into the snapshots of
the cluster (GPU count checked)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from diagnosis.actions.records.topology import merge_stored_topology, record_node_topology
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.builtin.topology_misplacement import NVLINK_UNKNOWN, RULE
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.models import Cluster, NodeTopology
from tests.edge.test_topology_nvidia_smi import matrix, real_file
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
    body = text.encode() if isinstance(text, str) else text
    return client.post(
        f"/api/v1/clusters/{cluster}/nodes/{node}/topology", body, content_type="text/plain"
    )


def test_real_upload_is_parsed_and_stored(cluster, uploader):
    response = upload(sender_client(uploader, "topology", cluster), real_file(DGX).read_bytes())
    assert response.status_code == 201
    assert response.json() == {
        "cluster": "dgx-pod",
        "node": "dgx-01",
        "gpus": 8,
        "nvlink_domains": [[0, 1, 2, 3, 4, 5, 6, 7]],
        "numa": [0, 0, 0, 0, 1, 1, 1, 1],
        "created": True,
    }
    row = NodeTopology.objects.get(cluster=cluster, node="dgx-01")
    assert row.uploaded_by == uploader
    assert "NV12" in row.raw_text


def test_a_second_upload_replaces_the_first(cluster, uploader):
    client = sender_client(uploader, "topology", cluster, keyword="Bearer")
    upload(client, real_file(DGX).read_bytes())
    islands = [["X" if a == b else ("NV4" if a // 2 == b // 2 else "SYS") for b in range(4)]
               for a in range(4)]  # fmt: skip
    response = upload(client, matrix(islands))
    assert response.status_code == 200
    assert response.json()["nvlink_domains"] == [[0, 1], [2, 3]]
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
    assert response.status_code == 201
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
    assert upload(client, real_file(DGX).read_bytes(), node="dgx-01").status_code == 201
    assert upload(client, real_file(DGX).read_bytes(), node="dgx-01").status_code == 200
    response = upload(client, real_file(DGX).read_bytes(), node="dgx-02")
    assert response.status_code == 400
    assert "GPUOBS_TOPOLOGY_MAX_NODES" in response.json()["errors"]["body"][0]
    assert list(NodeTopology.objects.values_list("node", flat=True)) == ["dgx-01"]
