"""Fixtures of the tests against a real Slurm (``@pytest.mark.slurm``).

``slurm_cluster`` starts one cluster per test session: munge, slurmctld, three slurmd (n1 and
n2 in partition ``gpu`` with 8 fake H100s each, s1 in ``small`` with 4 fake A100s) and slurmdbd
on its own MariaDB, with accounts ``team-a`` (fairshare 4) and ``team-b`` (fairshare 1, at most
4 GPUs) and QOS ``gpu2`` (at most 2 GPUs per user). ``slurm`` hands it to one test and
afterwards cancels its jobs, resumes its nodes and waits until the cluster is idle again.
Without the programs, or not as root, the tests fail under CI=true and skip elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from diagnosis.edge.schedulers.slurm.adapter import CONF_DIR_ENV, SlurmAdapter
from tests.conftest import require_binary, running_in_ci
from tests.support.slurm_cluster import (
    ACCOUNTING_BINARIES,
    BINARIES,
    INSTALL_HINT,
    SlurmCluster,
)

GPU_MODELS = {"h100": "H100-SXM5-80GB", "a100": "A100-SXM4-80GB"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One parallel worker takes every test here: they share one session's Slurm cluster."""
    for item in items:
        if "tests/edge/slurm/" in str(item.fspath):
            item.add_marker(pytest.mark.xdist_group("slurm"))


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    for name in (*BINARIES, *ACCOUNTING_BINARIES):
        require_binary(name, INSTALL_HINT)
    if os.geteuid() != 0:
        message = "a test Slurm cluster needs root (slurmd starts jobs as their owner)"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), accounting=True)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    # the test cluster's slurm.conf lives in its own folder: the deployment's conf folder here
    monkeypatch.setenv(CONF_DIR_ENV, str(slurm_cluster.base))
    try:
        yield slurm_cluster
    finally:
        slurm_cluster.reset()


@pytest.fixture
def slurm_config(slurm: SlurmCluster) -> dict:
    """A cluster's ``scheduler_config`` for the test cluster."""
    return {"slurm_conf": str(slurm.conf), "accounting": True, "gpu_models": GPU_MODELS}


@pytest.fixture
def adapter(slurm_config: dict) -> Callable[..., SlurmAdapter]:
    """A fresh adapter (one per read, as one per cycle); keyword arguments override config."""

    def build(**overrides) -> SlurmAdapter:
        return SlurmAdapter({**slurm_config, **overrides})

    return build
