"""A Slurm node with two GPU types gets each GPU its own model (issue #27, item 5), in the order
Slurm numbers them; gres.conf ``Links=`` reorders them only with ``AutoDetect``.

Shapes: the recorded slurmrestd v0.0.42 ``/nodes`` answer (Slurm 24.11, tests/fixtures/slurm,
shaped by SchedMD's OpenAPI schema) with node ``n1``'s GRES set to a two-type string as
slurm.conf(5) writes one (``Gres=gpu:h100:2,gpu:h200:4``), with a socket suffix per type as the
recorded 24.11 answer has one (``gpu:h100:8(S:0-1)``), served by the loopback REST server, read
through ``snapshot read`` and loaded as a snapshot. Without ``AutoDetect`` the order is the one
a real Slurm 22.05 gives (tests/edge/slurm/test_slurm_gpu_types.py); with it, SchedMD's
``_merge_system_gres_conf`` (``src/plugins/gres/gpu/gres_gpu.c``) and its testsuite's test39.18:
test 2.28 (types alternating by device file), test 2.42 (GPUs with a valid ``Links=`` first, in
the order of their own ``-1``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.schedulers.slurm import topology as slurm_topology
from diagnosis.edge.schedulers.slurm.adapter import CONF_DIR_ENV
from tests.edge.test_slurmrestd import TOKEN, TOKEN_ENV, fixture, routes
from tests.support.rest_server import serving

VERSION = "v0.0.42"
MIXED = "gpu:h100:2(S:0),gpu:h200:4(S:1)"


def read_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gres: str) -> Any:
    monkeypatch.setenv(CONF_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv("GPUOBS_SECRET_BINDINGS", f"{TOKEN_ENV}=slurm")
    nodes = fixture(VERSION, "scontrol_show_nodes.json")
    for node in nodes["nodes"]:
        if node["name"] == "n1":
            node["gres"] = gres
    config = {
        "transport": "slurmrestd",
        "rest_token_env": TOKEN_ENV,
        "rest_version": VERSION,
        "slurm_conf": str(tmp_path / "slurm.conf"),
        "gpu_models": {"h100": "H100-SXM5-80GB", "h200": "H200-SXM-141GB"},
    }
    out = io.StringIO()
    with serving({**routes(VERSION), f"/slurm/{VERSION}/nodes": (200, nodes)}) as server:
        path = tmp_path / "scheduler.json"
        path.write_text(json.dumps({**config, "rest_url": server.url}))
        call_command("snapshot", "read", "--scheduler", "slurm", "--config", str(path), stdout=out)
    return snapshot_format.load(json.loads(out.getvalue()))


def models_of(snap: Any, node: str) -> list[str]:
    gpus = snap.gpus[snap.gpus["node"] == node].sort_values("index")
    return list(gpus["gpu_model"])


H100, H200 = "H100-SXM5-80GB", "H200-SXM-141GB"


@pytest.mark.django_db
def test_each_gpu_of_a_two_type_node_gets_its_model(tmp_path, monkeypatch) -> None:
    snap = read_snapshot(tmp_path, monkeypatch, MIXED)

    assert snap.nodes.loc["n1", "gpus"] == 6
    assert snap.nodes.loc["n1", "gpu_model"] == H200  # the type most of its GPUs have
    assert models_of(snap, "n1") == [H100, H100, H200, H200, H200, H200]
    assert set(models_of(snap, "n2")) == {H100}  # one type: the node's, no GPU entries needed
    assert snapshot_format.load(snapshot_format.dump(snap)).gpus.equals(snap.gpus)


INTERLEAVED = (
    "NodeName=n1 Name=gpu Type=h200 File=/dev/nvidia[1,3]\n"
    "NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia[0,2]\n"
    "NodeName=n1 Name=gpu Type=h200 File=/dev/nvidia[4-5]\n"
)


@pytest.mark.django_db
def test_without_autodetect_types_keep_the_order_of_the_nodes_gres(tmp_path, monkeypatch) -> None:
    # Slurm 22.05 numbers the h100s first (Gres= lists them first), whatever their files
    (tmp_path / "gres.conf").write_text(INTERLEAVED)
    snap = read_snapshot(tmp_path, monkeypatch, MIXED)
    assert models_of(snap, "n1") == [H100, H100, H200, H200, H200, H200]


@pytest.mark.django_db
def test_with_autodetect_types_interleave_as_their_device_files(tmp_path, monkeypatch) -> None:
    # test39.18 2.28: the detected GPUs are sorted by device file
    (tmp_path / "gres.conf").write_text("AutoDetect=nvml\n" + INTERLEAVED)
    snap = read_snapshot(tmp_path, monkeypatch, MIXED)
    assert models_of(snap, "n1") == [H100, H200, H100, H200, H200, H200]


# dev3 and dev0 are NVLink peers, and dev2 and dev1; Links= puts dev3 at index 0, dev0 at 1,
# dev2 at 2, dev1 at 3 (the position of each line's -1).
LINKED = (
    "NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia0 Links=4,-1,0,0\n"
    "NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia1 Links=0,0,4,-1\n"
    "NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia2 Links=0,0,-1,4\n"
    "NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia3 Links=-1,4,0,0\n"
)


def test_with_autodetect_gpu_order_follows_links() -> None:
    conf = slurm_topology.parse_gres_conf("NodeName=n1 AutoDetect=nvml\n" + LINKED)
    lines = conf.gpus_of("n1")
    assert conf.autodetects("n1")

    ordered = slurm_topology.slurm_order(lines, autodetect=True)

    assert [line.device for line in ordered] == [3, 0, 2, 1]
    topology = slurm_topology.node_topology(lines, None, autodetect=True)
    assert topology == {"nvlink_domains": [[0, 1], [2, 3]]}


def test_without_autodetect_links_do_not_reorder() -> None:
    # Slurm 22.05's slurmd -G keeps these by device file, and each Links= is read in that order
    conf = slurm_topology.parse_gres_conf(LINKED)
    assert not conf.autodetects("n1")
    lines = conf.gpus_of("n1")
    assert [line.device for line in slurm_topology.slurm_order(lines, ["h100"])] == [0, 1, 2, 3]
    assert slurm_topology.node_topology(lines, None) == {"nvlink_domains": [[0], [1, 2, 3]]}


def test_gpus_without_a_valid_links_come_after_those_with_one() -> None:
    # test39.18 2.42: Links=0-1 and 0-2 are no valid Links (ranges do not work): those GPUs
    # follow the ones whose Links= is valid, each group by device file
    lines = [
        slurm_topology.GpuLine(1, None, [0]),
        slurm_topology.GpuLine(2, [0, -1], [0]),
        slurm_topology.GpuLine(3, None, [0]),
        slurm_topology.GpuLine(4, [0, -1, 2], [0]),
    ]
    ordered = slurm_topology.slurm_order(lines, autodetect=True)
    assert [line.device for line in ordered] == [2, 4, 1, 3]
