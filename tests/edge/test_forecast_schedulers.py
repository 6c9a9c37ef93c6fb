"""Start-time forecasts on the states real scheduler adapters read: Slurm from recorded
``squeue``/``sinfo``/``sshare`` output (tests/fixtures/slurm, see its README) and Kueue from
the fixture objects served by the loopback Kubernetes API server (tests/fixtures/kubernetes/
kueue.yaml, shaped after Kueue's API reference), read with the real ``kubernetes`` client."""

from __future__ import annotations

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.forecast.starts import ForecastSettings, forecast_starts
from diagnosis.edge.schedulers.kubernetes.kueue import KueueAdapter
from diagnosis.edge.schedulers.slurm.adapter import scheduler_state
from tests.edge.test_slurm_parse import SETTINGS, loaded, reads
from tests.support.kube_server import (
    adapter_config,
    kube_api_fixture,
)

QUICK = ForecastSettings(seeds=(0, 1), horizon_s=6 * 3600.0)
CAUSES = {"partial-gang", "quota", "too-big", "fragmentation", "partial-gangs", "capacity", "order"}


def test_every_pending_slurm_job_gets_a_forecast_and_a_cause() -> None:
    snap = loaded(scheduler_state(reads(), SETTINGS))
    pending = set(snap.jobs.index[snap.jobs["state"] == "pending"])
    assert pending  # the recorded squeue holds pending jobs (and array tasks)
    forecast = forecast_starts(snap, settings=QUICK)
    assert {f.job for f in forecast.jobs} == pending
    for job in forecast.jobs:
        assert job.cause.kind in CAUSES
        assert job.seeds == 2
        if job.start_s is not None:
            assert job.low_s <= job.start_s
            assert job.high_s is None or job.start_s <= job.high_s
    by_job = forecast.by_job()
    # job 4 asks 5 GPUs of team-b's 4-GPU GrpTRES limit: Slurm says AssocGrpGRES, we say quota
    assert snap.jobs.loc["4", "pending_reason"] == "AssocGrpGRES"
    assert by_job["4"].cause.kind == "quota"
    assert by_job["4"].cause.figures["grow_by_gpus"] == 1
    assert by_job["4"].start_s is None  # the capability never grows in the replay


kube_api = kube_api_fixture("nodes", "kueue")


@pytest.mark.kubernetes
def test_every_pending_kueue_workload_gets_a_forecast_and_a_cause(kube_api) -> None:
    state = KueueAdapter(adapter_config()).read_state()
    snap = snapshot_format.load(
        {
            "format": snapshot_format.FORMAT,
            "cluster": "kueue",
            "as_of": "2026-11-29T08:00:00Z",
            "scheduler": state.scheduler,
            "nodes": state.nodes,
            "gpus": state.gpus,
            "queues": state.queues,
            "jobs": state.jobs,
        }
    )
    pending = set(snap.jobs.index[snap.jobs["state"] == "pending"])
    assert pending
    forecast = forecast_starts(snap, settings=QUICK)
    assert {f.job for f in forecast.jobs} == pending
    assert all(f.cause.kind in CAUSES for f in forecast.jobs)
