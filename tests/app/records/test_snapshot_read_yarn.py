"""``manage.py snapshot read --scheduler yarn``: one read of a ResourceManager (the loopback
server serving answers shaped like Hadoop's REST docs, tests/fixtures/yarn) into a valid
``gpuobs.snapshot/v1`` document."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from diagnosis.core import snapshot
from tests.edge.test_yarn import routes
from tests.support.rest_server import serving


def read(config: dict, tmp_path: Path) -> dict:
    path = tmp_path / "yarn.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    out = io.StringIO()
    call_command("snapshot", "read", "--scheduler", "yarn", "--config", str(path), stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.parametrize("scheduler", ["scheduler_capacity.json", "scheduler_fair.json"])
def test_snapshot_read_yarn_is_a_valid_snapshot(scheduler: str, tmp_path: Path) -> None:
    with serving(routes(scheduler)) as server:
        document = read(
            {"url": server.url, "gpu_models": {"gpu": "A100-SXM4-80GB"}, "read_node_gpus": False},
            tmp_path,
        )

    snap = snapshot.load(document)
    assert (document["cluster"], document["scheduler"]["kind"]) == ("yarn", "yarn")
    assert snap.total_gpus == 32
    assert len(snap.nodes) == 5
    assert {j["id"][-4:] for j in document["jobs"]} == {"0001", "0002", "0003", "0004"}
    kinds = {e["kind"] for e in document["events"]}
    assert {"failed_scheduling", "completed", "failed"} <= kinds


def test_snapshot_read_yarn_says_why_it_cannot_read(tmp_path: Path) -> None:
    with serving(routes()) as server:
        url = server.url
    with pytest.raises(CommandError, match="unreachable") as caught:
        read({"url": url, "timeout_s": 2, "read_node_gpus": False}, tmp_path)

    assert caught.value.returncode == 2
