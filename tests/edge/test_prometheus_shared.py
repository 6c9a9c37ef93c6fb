"""Shared GPUs (issue 27 item 1) against a real Prometheus, in both shapes dcgm-exporter writes
(tests/support/dcgm_shared.py says where each comes from): one physical GPU, its util and
framebuffer the device's, never multiplied by the pods' series; an idle shared GPU is idle to
the rules as an unshared one is; and a cardinality bomb (issue 29 item 3) is read as copies and
reported."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.accounting import account
from diagnosis.core.rules.builtin.idle_held import RULE as IDLE_HELD
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.edge.sources.prometheus import PrometheusConfig, collect_document
from diagnosis.edge.sources.prometheus import metrics as prometheus_metrics
from tests.support.dcgm_shared import (
    BOMB,
    BOMB_COPIES,
    BOMB_UTIL,
    COPIES,
    COPIES_GPU,
    IDLE,
    PER_PROCESS,
    PER_PROCESS_GPU,
    T4,
    T4_FB_MIB,
)

pytestmark = pytest.mark.prometheus


def scheduler_doc(nodes, jobs=()) -> dict[str, Any]:
    return {
        "format": snapshot_format.FORMAT,
        "cluster": "test",
        "as_of": "2026-01-01T00:00:00Z",
        "nodes": [
            {"name": n, "pool": "t4", "gpu_model": T4, "gpus": c, "state": "ready"}
            for n, c in nodes
        ],
        "gpus": [],
        "jobs": list(jobs),
        "queues": [],
        "events": [],
    }


def collect(prometheus, planted, cluster: str, scheduler: dict[str, Any]) -> dict[str, Any]:
    config = PrometheusConfig.parse({"url": prometheus.url, "matchers": {"cluster": cluster}})
    return collect_document(config, scheduler, as_of=planted.as_of)


@pytest.mark.parametrize(
    ("cluster", "host", "gpu"),
    [(COPIES, "tc-0", COPIES_GPU), (PER_PROCESS, "tp-0", PER_PROCESS_GPU)],
    ids=["copies-before-4.5.3", "per-process-4.5.3"],
)
def test_a_shared_gpu_reads_the_devices_util_and_framebuffer(
    prometheus, planted_history, cluster, host, gpu
):
    document = collect(prometheus, planted_history, cluster, scheduler_doc([(host, 2)]))
    profiled, plain = document["gpus"]  # GPU 1 has no profiling fields: DCGM_FI_DEV_GPU_UTIL
    for entry in (profiled, plain):
        assert entry["util"]["mean"] == pytest.approx(gpu.util)
        assert entry["util"]["p90"] == pytest.approx(gpu.util)  # not above the mean
        assert entry["fb_used_frac"]["mean"] == pytest.approx(gpu.fb_frac)
        assert entry["power_w"]["mean"] == pytest.approx(gpu.power_w)  # a copy, not 2 x
        assert entry["workload"] == "team-z/pod-a/main, team-z/pod-b/main"
    assert document["collection"]["util_sources"] == {"prof": 1, "dev": 1}
    assert document["collection"]["degraded"] == []


def test_copies_labelled_with_pod_uid_are_still_copies(prometheus, planted_history):
    """``--kubernetes-enable-pod-uid`` before 4.5.3: every copy has ``pod_uid``, none is the
    device-level series; the fallback reads the copies' mean, and no pod gets them as its own."""
    document = collect(prometheus, planted_history, COPIES, scheduler_doc([("tc-1", 1)]))
    (entry,) = document["gpus"]
    assert entry["util"]["mean"] == pytest.approx(COPIES_GPU.util)
    assert entry["fb_used_frac"]["mean"] == pytest.approx(COPIES_GPU.fb_frac)
    assert "holders" not in entry
    assert document["collection"]["families"]["memory-fallback"]["queries"] == 1


def test_per_process_series_say_each_pods_own_part(prometheus, planted_history, monkeypatch):
    monkeypatch.setattr(prometheus_metrics, "PER_POD_BATCH", 1)  # one query per shared GPU
    document = collect(prometheus, planted_history, PER_PROCESS, scheduler_doc([("tp-0", 2)]))
    expected = [
        {
            "workload": f"team-z/{pod}/main",
            "util": {"mean": util / 100},
            "fb_used_frac": {"mean": pytest.approx(used / T4_FB_MIB, abs=1e-6)},
        }
        for pod, util, used in PER_PROCESS_GPU.pods
    ]
    assert [entry["holders"] for entry in document["gpus"]] == [expected, expected]
    assert document["collection"]["families"]["process"]["queries"] == 2
    copies = collect(prometheus, planted_history, COPIES, scheduler_doc([("tc-0", 2)]))
    assert not any("holders" in entry for entry in copies["gpus"])  # copies are no one's own


def idle_job(job_id: str, node: str, share: float | None, started: str) -> dict[str, Any]:
    allocation: dict[str, Any] = {"node": node, "gpus": [0]}
    if share is not None:
        allocation["share"] = share
    return {
        "id": job_id,
        "name": job_id,
        "tenant": "team-z",
        "kind": "notebook",
        "state": "running",
        "submitted": started,
        "started": started,
        "gpus_per_pod": 1,
        "allocation": [allocation],
    }


def test_an_idle_shared_gpu_is_idle_held_as_an_unshared_one_is(prometheus, planted_history):
    started = (planted_history.as_of - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    jobs = [
        idle_job("copies-a", "ti-0", 0.5, started),
        idle_job("copies-b", "ti-0", 0.5, started),
        idle_job("process-a", "ti-1", 0.5, started),
        idle_job("process-b", "ti-1", 0.5, started),
        idle_job("solo", "ti-2", None, started),
        idle_job("solo-process", "ti-3", None, started),
    ]
    nodes = [("ti-0", 1), ("ti-1", 1), ("ti-2", 1), ("ti-3", 1)]
    document = collect(prometheus, planted_history, IDLE, scheduler_doc(nodes, jobs))
    assert [round(g["util"]["mean"], 6) for g in document["gpus"]] == [0.03] * 4
    # one pod beside 4.5.3's device-level series (no pod labels): the pod is the workload
    assert document["gpus"][3]["workload"] == "team-z/note-c/main"
    snap = snapshot_format.load(document)
    facts = SnapshotFacts(snap)
    judgement = IDLE_HELD.evaluate(snap, IDLE_HELD.resolve(), facts)
    held = ("copies-a", "copies-b", "process-a", "process-b", "solo", "solo-process")
    assert sorted(f.subject for f in judgement.findings) == [f"job:{j}" for j in held]
    breakdown = account(snap, judgement.findings, facts).cluster
    assert breakdown.gpus == 4  # each physical GPU once, whatever its holders
    assert breakdown.buckets["allocated-idle"] == 4


def test_a_cardinality_bomb_is_read_as_copies_and_degrades_the_collection(
    prometheus, planted_history
):
    document = collect(prometheus, planted_history, BOMB, scheduler_doc([("bomb-0", 4)]))
    utils = [entry["util"]["mean"] for entry in document["gpus"]]
    assert utils == pytest.approx(BOMB_UTIL)  # not 50 x each, clipped to 1
    assert sum(utils) / len(utils) == pytest.approx(0.243, abs=1e-3)
    collection = document["collection"]
    assert (collection["crowded_gpus"], collection["crowded_series"]) == (4, 4 * BOMB_COPIES)
    (reason,) = collection["degraded"]
    assert reason.startswith("4 GPU(s) have more than 32 series in one scrape (200 in all")
    assert collection["families"]["inventory"]["series"] <= 4 * 34 + 1
    assert all("," not in entry["workload"] for entry in document["gpus"])  # pods not listed
