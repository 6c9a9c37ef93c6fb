"""GPU-hour accounting counts MIG instances by their share of the GPU's compute slices."""

from __future__ import annotations

import pytest

from diagnosis.core.accounting import account
from tests.support.builders import SnapshotBuilder


def h100_split_in_seven() -> SnapshotBuilder:
    builder = SnapshotBuilder(window_s=3600).node("h1", gpus=2, gpu_model="H100 80GB HBM3")
    for gi in range(7):
        builder.mig("h1", 0, gi, uuid=f"MIG-{gi}", util=0.7 if gi == 0 else 0.0)
    return builder


def test_seven_1g_instances_are_one_gpu_of_capacity():
    result = account(h100_split_in_seven().build())
    assert result.cluster.gpus == 2  # GPU 0 (seven instances) + GPU 1
    assert result.cluster.buckets["free-no-demand"] == 2


def test_held_instance_counts_its_fraction():
    builder = h100_split_in_seven()
    builder.job(
        "infer", kind="inference", gpus_per_pod=1, allocation=[("h1", [0])], uuids=[["MIG-0"]]
    )
    result = account(builder.build())
    assert result.cluster.buckets["allocated-busy"] == pytest.approx(1 / 7)
    assert result.cluster.allocated_gpus == pytest.approx(1 / 7)
    assert result.cluster.buckets["free-no-demand"] == pytest.approx(2 - 1 / 7)
    assert result.cluster.gpus == 2
    # activity weighted by compute: 0.7 on 1/7 of a GPU, 0 on 6/7 (GPU 1 has no reading)
    assert result.cluster.activity_utilization == pytest.approx(0.1)
    assert result.cluster.activity_coverage == pytest.approx(0.5)


def test_whole_gpus_stay_whole_numbers():
    result = account(SnapshotBuilder().pool("a100", nodes=1).build())
    assert result.cluster.gpus == 8
    assert isinstance(result.cluster.gpus, int)
