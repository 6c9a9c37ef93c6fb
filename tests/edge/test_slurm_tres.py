"""The ``slurm_tres`` metrics source's parsing: ``sstat -n -P`` rows with the ``gres/gpuutil``
and ``gres/gpumem`` TRES (as a real NVML-backed Slurm prints them: ``gres/gpumem=21794M``,
``gres/gpuutil=99``), and the per-GPU values they give a job."""

from __future__ import annotations

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.collection import collect_snapshot
from diagnosis.edge.errors import CollectError
from diagnosis.edge.schedulers.slurm.parse import tres as slurm_parse_tres
from diagnosis.edge.sources import slurm_tres
from diagnosis.edge.sources.registry import SOURCES

# sstat -a -n -P -j 41,42 --format=JobID,NTasks,TRESUsageInAve,TRESUsageInMax
SSTAT = """\
41.extern|2|cpu=00:00:00,energy=0,fs/disk=2332,mem=0,pages=0,vmem=0|cpu=00:00:00,mem=0
41.batch|1|cpu=00:00:01,energy=0,fs/disk=5273,gres/gpumem=0,gres/gpuutil=0,mem=1772K,pages=0,vmem=0|cpu=00:00:01
41.0|2|cpu=00:10:02,energy=0,fs/disk=1,gres/gpumem=21794M,gres/gpuutil=150,mem=9G,pages=0,vmem=0|cpu=00:10:02,gres/gpuutil=160
42.batch|1|cpu=00:00:01,energy=0,fs/disk=5273,mem=1772K,pages=0,vmem=0|cpu=00:00:01
"""


def job(ident: str, allocation: list[tuple[str, list[int]]]) -> dict:
    return {
        "id": ident,
        "state": "running",
        "allocation": [{"node": n, "gpus": g} for n, g in allocation],
    }


def test_sstat_rows_sum_a_jobs_tasks_and_skip_extern() -> None:
    usage = slurm_parse_tres.parse_sstat(SSTAT)

    assert usage == {"41": {"gpuutil": 300.0, "gpumem": 2 * 21794 * 2**20}}  # 42: no GPU TRES


def test_a_jobs_utilization_is_spread_over_its_gpus() -> None:
    jobs = [job("41", [("n1", [0, 1]), ("n2", [0, 1])]), job("42", [("n1", [2])])]

    gpus = slurm_tres.gpu_metrics(jobs, slurm_parse_tres.parse_sstat(SSTAT))

    assert [(g["node"], g["index"], g["util"]["mean"]) for g in gpus] == [
        ("n1", 0, 0.75),
        ("n1", 1, 0.75),
        ("n2", 0, 0.75),
        ("n2", 1, 0.75),
    ]
    assert gpus[0]["fb_used_bytes"] == {"mean": round(2 * 21794 * 2**20 / 4)}


def test_the_values_load_as_snapshot_gpu_metrics() -> None:
    gpus = slurm_tres.gpu_metrics(
        [job("41", [("n1", [0, 1, 2, 3])])], slurm_parse_tres.parse_sstat(SSTAT)
    )
    snap = snapshot_format.load(
        {
            "format": snapshot_format.FORMAT,
            "cluster": "c",
            "as_of": "2026-11-29T09:20:00Z",
            "nodes": [{"name": "n1", "pool": "gpu", "gpus": 4, "state": "ready"}],
            "gpus": gpus,
            "jobs": [],
        }
    )

    assert snap.gpus["util_mean"].tolist() == [0.75] * 4


@pytest.mark.parametrize(
    ("text", "amounts"),
    [
        ("gres/gpumem=1.5G,gres/gpuutil=7", {"gres/gpumem": 1.5 * 2**30, "gres/gpuutil": 7.0}),
        ("gres/gpu=4,cpu=1", {"gres/gpu": 4.0}),
        ("gres/gpuutil=lots,gres/gpumem=", {}),
        ("", {}),
    ],
)
def test_tres_amounts(text, amounts) -> None:
    assert slurm_parse_tres.tres_amounts(text) == amounts


class _Cluster:
    name = "c"
    scheduler_kind = "kueue"
    scheduler_config: dict = {}
    metrics_kind = "slurm_tres"
    metrics_config: dict = {}


def test_it_needs_slurm_and_declares_its_settings() -> None:
    with pytest.raises(CollectError, match="needs scheduler_kind slurm") as caught:
        collect_snapshot(_Cluster())

    assert caught.value.permanent
    assert SOURCES["slurm_tres"].config_spec() is slurm_tres.CONFIG
    assert slurm_tres.CONFIG.parse({}) == {"max_jobs": 2000, "min_coverage": 0.5}
