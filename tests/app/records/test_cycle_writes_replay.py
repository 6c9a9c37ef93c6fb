"""The stored cycle from outside a schedule (issue #17): ``snapshot import --diagnose`` runs the
whole stored cycle a scheduled one runs, and a failed recommend step is recorded, not lost."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Cluster, ClusterCycle, Finding, TenantRollup
from tests.support.builders import SnapshotBuilder

pytestmark = pytest.mark.django_db


def starved_cluster(name: str = "replay"):
    builder = SnapshotBuilder(cluster=name)
    builder.pool("a100", nodes=2)
    builder.queue("team-a")
    builder.job(
        "starved",
        node="a100-000",
        waited="3h",
        util=0.3,
        util_p10=0.0,
        util_p90=0.8,
        fb_used_frac=0.5,
    )
    builder.job("busy", node="a100-001", waited="3h", util=0.9, fb_used_frac=0.5)
    return builder


def test_import_with_diagnose_records_the_whole_cycle(tmp_path):
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(starved_cluster().document()))
    out = StringIO()
    call_command("snapshot", "import", str(path), "--diagnose", stdout=out)
    cycle = ClusterCycle.objects.get(cluster__name="replay")
    assert cycle.ok
    assert {"diagnose_s", "snapshot_s", "findings_s", "tenancy_s", "recommend_s"} <= set(
        cycle.steps
    )
    assert Finding.objects.filter(cluster=cycle.cluster, subject="job:starved").exists()
    assert TenantRollup.objects.filter(cluster=cycle.cluster, as_of=cycle.as_of).exists()
    assert cycle.recommendations
    assert "error" not in cycle.recommendations
    assert f"cycle {cycle.pk} recorded" in out.getvalue()


def test_a_failed_recommend_step_is_kept_on_the_cycle_and_in_the_status(monkeypatch):
    def duplicate(*args, **kwargs):
        raise IntegrityError('duplicate key value violates "recommendation_one_open_per_target"')

    monkeypatch.setattr("diagnosis.actions.records.cycles.record_recommendations", duplicate)
    cluster = Cluster.objects.create(name="replay")
    cycle = record_cycle(cluster, starved_cluster().build())
    cycle.refresh_from_db()
    cluster.refresh_from_db()
    assert cycle.recommendations["error"].startswith("IntegrityError: duplicate key")
    assert cluster.status == "degraded"
    assert "recommend step failed: IntegrityError" in cluster.status_message
    assert Finding.objects.filter(cluster=cluster, subject="job:starved").exists()
