"""``manage.py recommend SNAPSHOT.json [--json]``, run as a user would."""

from __future__ import annotations

import json

import pytest

from tests.app.deploy.test_commands import manage
from tests.core.test_recommend import scattered_pool
from tests.support.builders import SnapshotBuilder

FIELDS = {"kind", "target", "change", "findings", "impact", "preselect", "harm", "summary"}


@pytest.fixture
def troubled_snapshot(tmp_path):
    """A fragmented pool under spread and a GPU with Xid 79."""
    builder = scattered_pool()
    builder.gpu("a100-005", 7, xid=[(79, "5m")])
    path = tmp_path / "troubled.json"
    path.write_text(json.dumps(builder.document()))
    return path


def test_recommend_json_prints_every_recommendation_with_its_impact(troubled_snapshot):
    result = manage("recommend", str(troubled_snapshot), "--json")
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    by_kind = {r["kind"]: r for r in report["recommendations"]}
    assert set(by_kind) == {"drain-node", "placement-policy"}
    for recommendation in report["recommendations"]:
        assert recommendation.keys() >= FIELDS
        assert recommendation["impact"]["verdict"]
    assert by_kind["placement-policy"]["change"] == {"from": "spread", "to": "binpack"}
    assert by_kind["placement-policy"]["impact"]["method"] == "simulated"
    assert by_kind["drain-node"]["target"] == "node:a100-005"


def test_recommend_text_lists_the_changes(troubled_snapshot):
    result = manage("recommend", str(troubled_snapshot), "--seeds", "0", "--horizon", "1h")
    assert result.returncode == 0, result.stderr.decode()
    text = result.stdout.decode()
    assert "placement-policy pool:a100: spread -> binpack" in text
    assert "drain-node node:a100-005: ready -> drained" in text


def test_recommend_reads_stdin_and_prints_nothing_for_a_healthy_cluster():
    builder = SnapshotBuilder().pool("a100", nodes=2)
    builder.job("busy", node="a100-000", util=0.9, fb_used_frac=0.5, tflops=150.0)
    result = manage("recommend", "-", "--json", stdin=json.dumps(builder.document()).encode())
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["recommendations"] == []


def test_recommend_exits_2_on_a_bad_snapshot_with_the_errors_on_stderr(tmp_path):
    document = scattered_pool().document()
    document["jobs"][0]["state"] = "sleeping"
    document["nodes"][0]["state"] = "asleep"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    result = manage("recommend", str(path), "--json")
    assert result.returncode == 2
    assert result.stdout == b""
    stderr = result.stderr.decode()
    assert "jobs[0].state" in stderr
    assert "nodes[0].state" in stderr


def test_recommend_exits_2_on_bad_seeds(troubled_snapshot):
    result = manage("recommend", str(troubled_snapshot), "--seeds", "one,two")
    assert result.returncode == 2
    assert "--seeds" in result.stderr.decode()
