"""One Slurm job record that does not fit the nodes read with it (issue #27, item 4) is left out
and named, the rest of the cluster is read, and the cycle is degraded, not failed -- through
the scheduled cycle (``run_cluster_cycle``) and ``snapshot read`` alike.

The answers are the recorded slurmrestd v0.0.42 documents (Slurm 24.11; tests/fixtures/slurm,
shaped by SchedMD's OpenAPI schema) served by the loopback REST server, with node ``n2``
missing from ``/nodes`` as a dynamic or cloud node deleted between the two reads leaves it:
job 2 still runs on ``n1`` and ``n2``."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.choices import DataSourceStatus
from diagnosis.edge.schedulers.slurm.adapter import CONF_DIR_ENV
from diagnosis.models import Snapshot
from tests.edge.test_slurmrestd import TOKEN, TOKEN_ENV, fixture, routes
from tests.support.rest_server import serving

VERSION = "v0.0.42"


@pytest.fixture
def slurmrestd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(CONF_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv("GPUOBS_SECRET_BINDINGS", f"{TOKEN_ENV}=slurm")
    nodes = fixture(VERSION, "scontrol_show_nodes.json")
    nodes["nodes"] = [n for n in nodes["nodes"] if n["name"] != "n2"]
    with serving({**routes(VERSION), f"/slurm/{VERSION}/nodes": (200, nodes)}) as server:
        yield server


def config(url: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "transport": "slurmrestd",
        "rest_url": url,
        "rest_token_env": TOKEN_ENV,
        "rest_version": VERSION,
        "slurm_conf": str(tmp_path / "slurm.conf"),
    }


@pytest.mark.django_db
def test_a_job_on_an_unknown_node_degrades_the_cycle_and_is_named(
    slurmrestd, tmp_path: Path, make_cluster
) -> None:
    cluster = make_cluster(
        "dyn", scheduler_kind="slurm", scheduler_config=config(slurmrestd.url, tmp_path)
    )
    cluster.metrics_kind = "none"
    cluster.save()

    cycle = run_cluster_cycle(cluster)

    assert cycle.ok, cycle.error
    cluster.refresh_from_db()
    assert cluster.status == DataSourceStatus.DEGRADED
    assert "1 scheduler record(s) left out: job 2: allocated on node 'n2'" in (
        cluster.status_message
    )
    document = Snapshot.objects.get(cluster=cluster).load_document()
    jobs = {j["id"] for j in document["jobs"]}
    assert jobs == {"1", "3_0", "3_1", "3_2", "3_3", "3_4", "3_5", "6", "7", "8"}
    assert {n["name"] for n in document["nodes"]} == {"n1", "s1"}
    assert cycle.source["refused"] == [
        "job 2: allocated on node 'n2', which the nodes read does not list"
    ]
    assert cycle.allocated_gpus == 4  # job 1's two on n1, array tasks 3_0 and 3_1 on s1


def test_snapshot_read_names_the_record_and_writes_the_rest(slurmrestd, tmp_path: Path) -> None:
    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps(config(slurmrestd.url, tmp_path)))
    out, err = io.StringIO(), io.StringIO()

    call_command(
        "snapshot", "read", "--scheduler", "slurm", "--config", str(path), stdout=out, stderr=err
    )

    document = json.loads(out.getvalue())
    assert "2" not in {j["id"] for j in document["jobs"]}
    assert "1" in {j["id"] for j in document["jobs"]}
    assert document["collection"]["refused"] == [
        "job 2: allocated on node 'n2', which the nodes read does not list"
    ]
    assert "slurm: left out: job 2: allocated on node 'n2'" in err.getvalue()
