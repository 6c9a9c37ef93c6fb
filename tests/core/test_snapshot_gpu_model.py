"""A GPU's own model (``gpus[].gpu_model``, issue #27 item 5): a node with two GPU types (a Slurm
node ``Gres=gpu:a100:4,gpu:h100:4``) has each GPU judged by its own model -- peak TFLOP/s for MFU,
TDP for the power checks -- and a GPU without one has its node's."""

from __future__ import annotations

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.builtin.low_mfu import RULE as LOW_MFU
from diagnosis.core.rules.facts import SnapshotFacts
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

A100, H100 = "A100-SXM4-80GB", "H100-SXM5-80GB"


def mixed(**job_fields) -> SnapshotBuilder:
    builder = SnapshotBuilder().node("mix-0", gpus=8, gpu_model=A100)
    for index in range(4, 8):
        builder.gpu("mix-0", index, gpu_model=H100)
    return builder.job(
        "j1", node="mix-0", gpus_per_pod=4, allocation=[("mix-0", [4, 5, 6, 7])], **job_fields
    )


def test_each_gpu_has_its_own_model_or_its_nodes() -> None:
    snap = mixed().build()
    assert list(snap.gpus.sort_values("index")["gpu_model"]) == [A100] * 4 + [H100] * 4


def test_a_gpus_own_model_round_trips_and_only_where_it_differs() -> None:
    builder = mixed()
    builder.gpu("mix-0", 0, gpu_model=A100)  # the node's own: not written back
    snap = builder.build()
    dumped = snapshot_format.dump(snap)
    assert {g["index"]: g.get("gpu_model") for g in dumped["gpus"]} == {
        0: None,
        4: H100,
        5: H100,
        6: H100,
        7: H100,
    }
    assert snapshot_format.load(dumped).gpus.equals(snap.gpus)


def test_peak_and_tdp_follow_each_gpus_model() -> None:
    facts = SnapshotFacts(mixed().build())
    assert list(facts.peak_tflops_per_gpu()) == [312.0] * 4 + [989.0] * 4
    assert list(facts.power_limit_per_gpu) == [400.0] * 4 + [700.0] * 4


def test_mfu_of_a_job_on_the_h100s_of_a_mixed_node_uses_their_peak() -> None:
    # 140 TFLOP/s is 45% of an A100's peak but 14% of an H100's: low only by the GPUs' own model
    (finding,) = judge_rule(LOW_MFU, mixed(util=0.9, tflops=140.0).build()).findings
    assert finding.evidence["peak_tflops"] == 989.0
    assert finding.evidence["gpu_model"] == H100
    assert finding.evidence["mfu"] == pytest.approx(140 / 989)
