"""Device-plugin nodes that share their GPUs by time-slicing or MPS (issue 27 item 2), read by the
Volcano adapter through the real ``kubernetes`` client from the loopback API server
(tests/fixtures/kubernetes/shared_gpus.yaml, labelled as GPU Feature Discovery labels them): a
node is its physical GPUs, each pod holds a share of one, and the GPU-hour accounting counts
each physical GPU once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from diagnosis.core import snapshot
from diagnosis.core.accounting import account
from diagnosis.edge.schedulers.kubernetes.volcano import VolcanoAdapter
from tests.support.kube_server import adapter_config, load_fixture, serving

pytestmark = pytest.mark.kubernetes


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with serving(tmp_path, monkeypatch) as server:
        server.load(load_fixture("shared_gpus"))
        yield VolcanoAdapter(adapter_config()).read_state()


def by_name(rows: list[dict[str, Any]], key: str = "name") -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in rows}


def test_a_time_sliced_node_is_its_physical_gpus(state) -> None:
    nodes = by_name(state.nodes)
    assert nodes["t4-ts-1"] == {
        "name": "t4-ts-1",
        "pool": "Tesla-T4-SHARED",
        "gpu_model": "Tesla-T4",
        "gpus": 1,  # nvidia.com/gpu.count, not the 8 replicas it advertises
        "state": "ready",
        "sharing": {"strategy": "time-slicing", "replicas": 8},
    }
    assert (nodes["t4-mps-1"]["gpus"], nodes["t4-mps-1"]["sharing"]) == (
        2,
        {"strategy": "mps", "replicas": 4},
    )


def test_pods_hold_a_share_of_one_gpu_spread_as_the_plugin_spreads_replicas(state) -> None:
    jobs = by_name(state.jobs, "id")
    for i in range(5):
        assert jobs[f"lab/notebook-{i}"]["allocation"] == [
            {"node": "t4-ts-1", "gpus": [0], "share": 0.125, "gpus_guessed": True}
        ]
    # MPS: each replica to the GPU with the fewest taken, in order of binding
    assert [jobs[f"serving/infer-{i}"]["allocation"][0]["gpus"] for i in range(3)] == [
        [0],
        [1],
        [0],
    ]
    assert {jobs[f"serving/infer-{i}"]["allocation"][0]["share"] for i in range(3)} == {0.25}


def test_accounting_counts_each_physical_gpu_once(state) -> None:
    snap = snapshot.load(
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
    assert snap.total_gpus == 3
    breakdown = account(snap).cluster
    assert breakdown.gpus == 3
    assert breakdown.allocated_gpus == 3  # no phantom free GPUs
    assert breakdown.buckets["free-no-demand"] == 0
