"""Issue 14 against a real Prometheus (tests/support/prometheus_fixtures.py): the real H100 MIG
label sets give one GPU unit per MIG instance, attributed to the right pod, and the pod running
its 1g.10gb slice at 30% is not idle; the dcgm-exporter label eras (``hostname``/``Hostname``,
``Hostname=localhost`` with the scrape target's node, DRA labels) map onto the snapshot."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.builtin.idle_allocation import RULE as IDLE
from diagnosis.core.rules.builtin.topology_misplacement import RULE as TOPOLOGY
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.edge.sources.prometheus import PrometheusConfig, collect_document
from tests.support.prometheus_fixtures import (
    DRA_MIG_UUID,
    ERAS_CLUSTER,
    H100_BUSY_CLUSTER,
    NVL_CLIQUE_ID,
    NVL_CLUSTER,
    NVL_FABRIC_UUID,
    require_dcgm_data,
)

pytestmark = pytest.mark.prometheus

H100_NODE = "gsrh100-074"
PARENT = "GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77"
EMBEDDING = "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl"
TTS = "tts-predictor-00011-deployment-5554f75554-8j8pl"
# MIG device UUIDs as the Kubernetes adapter reads them (DRA ResourceSlices / the device plugin);
# dcgm-exporter's series carry only the parent's UUID and GPU_I_ID.
MIG_UUID = {gi: f"MIG-0b9c6e4a-58e8-5d1f-a000-00000000000{gi}" for gi in (7, 8, 9)}


def scheduler_doc(nodes, *, gpus=(), jobs=()) -> dict[str, Any]:
    return {
        "format": snapshot_format.FORMAT,
        "cluster": "test",
        "as_of": "2026-01-01T00:00:00Z",
        "nodes": [
            {"name": n, "pool": "h100", "gpu_model": "H100 80GB HBM3", "gpus": c, "state": "ready"}
            for n, c in nodes
        ],
        "gpus": list(gpus),
        "jobs": list(jobs),
        "queues": [],
        "events": [],
    }


def collect(prometheus, planted, cluster: str, scheduler: dict[str, Any]) -> dict[str, Any]:
    config = PrometheusConfig.parse({"url": prometheus.url, "matchers": {"cluster": cluster}})
    return collect_document(config, scheduler, as_of=planted.as_of)


def pod_job(job_id: str, gi: int, started: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "name": job_id,
        "tenant": "model-playground-stg",
        "kind": "inference",
        "state": "running",
        "submitted": started,
        "started": started,
        "gpus_per_pod": 1,
        "allocation": [{"node": H100_NODE, "gpus": [0], "uuids": [MIG_UUID[gi]]}],
    }


@pytest.fixture
def h100_snapshot(prometheus, planted_history):
    require_dcgm_data()
    as_of = planted_history.as_of
    started = (as_of - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    gpus = [
        {
            "node": H100_NODE,
            "index": 0,
            "uuid": MIG_UUID[gi],
            "mig": {"instance": gi, "profile": "1g.10gb", "parent_uuid": PARENT},
        }
        for gi in (7, 8, 9)
    ]
    jobs = [pod_job(EMBEDDING, 7, started), pod_job(TTS, 9, started)]
    document = collect(
        prometheus,
        planted_history,
        H100_BUSY_CLUSTER,
        scheduler_doc([(H100_NODE, 1)], gpus=gpus, jobs=jobs),
    )
    return document, snapshot_format.load(document)


def test_one_unit_per_mig_instance_attributed_to_its_pod(h100_snapshot):
    document, snap = h100_snapshot
    entries = {g["mig"]["instance"]: g for g in document["gpus"]}
    assert sorted(entries) == [7, 8, 9]
    assert EMBEDDING in entries[7]["workload"]
    assert TTS in entries[9]["workload"]
    assert "workload" not in entries[8]
    assert {e["uuid"] for e in entries.values()} == set(MIG_UUID.values())
    units = snap.gpus[snap.gpus["node"] == H100_NODE]
    assert units["mig_instance"].tolist() == [7, 8, 9]
    assert units["capacity"].tolist() == pytest.approx([1 / 7] * 3)
    alloc = snap.allocations.set_index("job")
    assert alloc.loc[EMBEDDING, "mig_instance"] == 7
    assert alloc.loc[TTS, "mig_instance"] == 9


def test_the_30_percent_slice_is_not_idle_and_the_idle_one_is(h100_snapshot):
    _, snap = h100_snapshot
    util = dict(zip(snap.gpus["mig_instance"], snap.gpus["util_mean"], strict=True))
    assert util[7] == pytest.approx(0.30)  # its own util, not 0.30 / 7
    assert util[9] == pytest.approx(0.0)
    judgement = IDLE.evaluate(snap, IDLE.resolve(), SnapshotFacts(snap))
    assert [f.subject for f in judgement.findings] == [f"job:{TTS}"]
    (finding,) = judgement.findings
    (row,) = finding.evidence["per_gpu"]
    assert row["mig"] == {"instance": 9, "profile": "1g.10gb", "uuid": MIG_UUID[9]}


def test_without_the_schedulers_mig_list_the_units_still_come_apart(prometheus, planted_history):
    require_dcgm_data()
    document = collect(
        prometheus, planted_history, H100_BUSY_CLUSTER, scheduler_doc([(H100_NODE, 1)])
    )
    snap = snapshot_format.load(document)
    units = snap.gpus[snap.gpus["node"] == H100_NODE]
    assert units["mig_instance"].tolist() == [7, 8, 9]
    assert units["mig_parent_uuid"].tolist() == [PARENT] * 3
    assert units["util_mean"].tolist() == pytest.approx([0.30, 0.0, 0.0])


# -- label eras ----------------------------------------------------------------------------------


@pytest.fixture
def eras(prometheus, planted_history):
    nodes = [("er-0", 1), ("er-1", 2), ("er-2", 1)]
    return collect(prometheus, planted_history, ERAS_CLUSTER, scheduler_doc(nodes))


def entry(document, node, index):
    return next(g for g in document["gpus"] if g["node"] == node and g["index"] == index)


def test_localhost_falls_back_to_the_scrape_targets_node_label(eras):
    assert entry(eras, "er-0", 0)["util"]["mean"] == pytest.approx(0.41)


def test_localhost_falls_back_to_the_scrape_targets_instance(eras):
    assert entry(eras, "er-1", 1)["util"]["mean"] == pytest.approx(0.42)
    assert eras["collection"]["unmatched_gpus"] == 0


def test_dra_labels_name_the_mig_instance_and_its_claim(eras):
    mig = entry(eras, "er-2", 0)
    assert mig["uuid"] == DRA_MIG_UUID
    assert mig["mig"]["instance"] == 3
    assert mig["mig"]["profile"] == "2g.20gb"  # from dra_mig_profile
    assert mig["mig"]["compute_fraction"] == pytest.approx(2 / 7, abs=1e-6)
    assert mig["workload"] == "claim:team-y/infer-gpu"
    assert mig["util"]["mean"] == pytest.approx(0.43)
    snapshot_format.load(eras)


# -- NVLink fabric cliques and the topology textfile metric ---------------------------------------


@pytest.fixture
def nvl72(prometheus, planted_history):
    nodes = [("nvl-0", 4), ("nvl-1", 4)]
    return collect(prometheus, planted_history, NVL_CLUSTER, scheduler_doc(nodes))


def test_fabric_fields_give_every_gpu_its_clique(nvl72):
    clique = f"{NVL_FABRIC_UUID}.{NVL_CLIQUE_ID}"
    assert [g.get("nvlink_clique") for g in nvl72["gpus"]] == [clique] * 8


def test_the_textfile_metric_gives_the_node_its_topology(nvl72):
    nodes = {n["name"]: n for n in nvl72["nodes"]}
    assert nodes["nvl-0"]["topology"] == {"nvlink_domains": [[0, 1, 2, 3]], "numa": [0, 0, 1, 1]}
    assert "topology" not in nodes["nvl-1"]  # no textfile there: unknown


def test_tp8_over_the_two_trays_is_judged_one_nvlink_domain(nvl72):
    document = dict(nvl72)
    document["jobs"] = [
        {
            "id": "tp8",
            "state": "running",
            "submitted": "2026-01-01T00:00:00Z",
            "started": "2026-01-01T00:00:00Z",
            "pods": 2,
            "gpus_per_pod": 4,
            "parallelism": {"tp": 8},
            "allocation": [
                {"node": "nvl-0", "gpus": [0, 1, 2, 3]},
                {"node": "nvl-1", "gpus": [0, 1, 2, 3]},
            ],
        }
    ]
    snap = snapshot_format.load(document)
    judgement = TOPOLOGY.evaluate(snap, TOPOLOGY.resolve(), SnapshotFacts(snap))
    assert not judgement.findings
