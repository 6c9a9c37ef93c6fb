"""How a real Slurm (Debian 12's 22.05) numbers the GPUs of a node with two GPU types, and the
adapter giving each GPU its model in that order (issue #27, item 5).

Its own small cluster (no accounting): node ``n1`` with ``Gres=gpu:h200:2,gpu:h100:2`` in
slurm.conf and, in gres.conf, the h100s on device files 0 and 2 and the h200s on 1 and 3 (the
h100 line first), each with a ``Links=`` that would put the GPUs in another order. Slurm numbers
the h200s 0-1 and the h100s 2-3: types in the order of the node's ``Gres=``, each by device
file, neither gres.conf's line order nor ``Links=`` (without ``AutoDetect``) changing it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.collection import collect_snapshot
from diagnosis.edge.schedulers.slurm.adapter import CONF_DIR_ENV
from tests.conftest import require_binary
from tests.edge.slurm.test_slurm_tres import Cluster
from tests.support.slurm_cluster import BINARIES, INSTALL_HINT, NodeSpec, SlurmCluster

pytestmark = pytest.mark.slurm

GRES_LINES = (
    "Type=h100 File={dev}0 Links=0,0,0,-1",
    "Type=h200 File={dev}1 Links=0,0,-1,0",
    "Type=h100 File={dev}2 Links=0,-1,0,0",
    "Type=h200 File={dev}3 Links=-1,0,0,0",
)


@pytest.fixture(scope="module")
def two_types(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    for name in BINARIES:
        require_binary(name, INSTALL_HINT)
    if os.geteuid() != 0:
        pytest.skip("a test Slurm cluster needs root")
    node = NodeSpec(
        "n1", "gpu", gpus=4, cpus=4, gres="gpu:h200:2,gpu:h100:2", gres_lines=GRES_LINES
    )
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm-types"), nodes=(node,))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_slurm_numbers_the_types_in_the_order_of_the_nodes_gres(two_types) -> None:
    # by device file the first h100 would be index 0 (nvidia0), the first h200 index 1
    h100 = two_types.submit("--gres=gpu:h100:1")
    h200 = two_types.submit("--gres=gpu:h200:1")
    two_types.wait_job(h100, "RUNNING")
    two_types.wait_job(h200, "RUNNING")
    try:
        assert two_types.job_gpus(h100) == {"n1": [2]}
        assert two_types.job_gpus(h200) == {"n1": [0]}
    finally:
        two_types.cancel([h100, h200])


def test_links_do_not_reorder_without_autodetect(two_types) -> None:
    printed = subprocess.run(
        ["slurmd", "-G", "-N", "n1", "-f", str(two_types.conf)],
        env=two_types.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    files = [
        word.rsplit("nvidia", 1)[1]
        for line in (printed.stdout + printed.stderr).splitlines()
        for word in line.split()
        if word.startswith("File=")
    ]
    assert files == ["1", "3", "0", "2"]  # h200 by file, then h100 by file


def test_each_gpu_gets_its_model_in_slurms_order(two_types, monkeypatch) -> None:
    monkeypatch.setenv(CONF_DIR_ENV, str(two_types.base))
    job = two_types.submit("--gres=gpu:h100:1")
    two_types.wait_job(job, "RUNNING")
    try:
        config = {"slurm_conf": str(two_types.conf), "gpu_models": {"h100": "H100", "h200": "H200"}}
        snap = snapshot_format.load(collect_snapshot(Cluster(config, metrics_kind="none")))
    finally:
        two_types.cancel([job])

    gpus = snap.gpus.sort_values("index")
    assert list(gpus["gpu_model"]) == ["H200", "H200", "H100", "H100"]
    held = snap.allocations.merge(snap.gpus, on=["node", "index", "mig_instance"])
    assert list(held["gpu_model"]) == ["H100"]  # the h100 job holds an H100
