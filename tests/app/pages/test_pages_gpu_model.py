"""A GPU's page and a job's efficiency report name the GPU's own model on a node with two GPU
models (``gpus[].gpu_model``, issue #27 item 5; a Slurm node ``Gres=gpu:a100:4,gpu:h100:4``)."""

from __future__ import annotations

import re
from html import unescape

import pytest

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.pages.support import snapshots
from tests.core.test_snapshot_gpu_model import A100, H100, mixed

pytestmark = pytest.mark.django_db


@pytest.fixture
def cycled(make_cluster):
    snapshots.forget_cached()
    cluster = make_cluster("mixed", enabled=False)
    record_cycle(cluster, mixed(util=0.9, tflops=140.0).build())
    yield cluster
    snapshots.forget_cached()


def model_shown(client, cluster, index: int) -> str:
    html = client.get(f"/clusters/{cluster.name}/nodes/mix-0/gpus/{index}/").content.decode()
    text = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))
    found = re.search(r"Model (\S+)", text)
    assert found, text[:500]
    return found.group(1)


def test_the_gpu_page_shows_the_gpus_own_model(cycled, bob_client) -> None:
    assert model_shown(bob_client, cycled, 5) == H100
    assert model_shown(bob_client, cycled, 1) == A100  # no model of its own: its node's
