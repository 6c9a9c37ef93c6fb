"""The demo cluster's wiring: manage.py demo runs real cycles on the simulator, and the simulated
scheduler takes changes that show in later cycles."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.workflow.simulator import apply_sim_change
from diagnosis.core.rules.registry import all_rules
from diagnosis.core.simulate.scenarios import SEED_LEAVES_OUT
from diagnosis.edge.schedulers.base import ChangeError
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import AuditEntry, Cluster, ClusterCycle, Finding, Snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_simulators():
    yield
    for name in ("demo", "lab"):
        sim_runtime.forget(name)


def latest_snapshot(cluster):
    return Snapshot.objects.filter(cluster=cluster).latest().load_document()


def test_demo_cycles_store_snapshots_rollups_and_findings():
    out = StringIO()
    call_command("demo", cycles=3, step=1200, stdout=out)
    cluster = Cluster.objects.get(name="demo")
    cycles = list(ClusterCycle.objects.filter(cluster=cluster).order_by("as_of"))
    assert len(cycles) == 3
    assert all(c.ok for c in cycles)
    assert cycles[0].gpus == 1024
    assert (cycles[1].as_of - cycles[0].as_of).total_seconds() == 1200
    assert Snapshot.objects.filter(cluster=cluster).count() == 3
    assert "cycle 3: as of" in out.getvalue()
    buckets = cycles[-1].accounting["cluster"]["buckets"]
    assert sum(b["gpus"] for b in buckets.values()) == 1024


def test_every_rule_fires_during_the_demos_first_hours():
    """The seed scenario's injected faults make every rule fire (docs/architecture.md#command-line)
    but those it
    leaves to the rule-showcase scenario (``SEED_LEAVES_OUT``, each with its reason)."""
    call_command("demo", cycles=40, step=600, stdout=StringIO())
    fired = set(Finding.objects.values_list("rule_id", flat=True))
    assert fired == set(all_rules()) - set(SEED_LEAVES_OUT)


def test_a_placement_change_takes_effect_in_a_later_cycle(lab):
    run_cluster_cycle(lab)
    pool = next(iter(latest_snapshot(lab)["scheduler"]["placement"]))
    before = latest_snapshot(lab)["scheduler"]["placement"][pool]
    target = "binpack" if before != "binpack" else "spread"
    entry = apply_sim_change(
        lab, {"kind": "placement-policy", "target": f"pool:{pool}", "to": target}, actor="alice"
    )
    run_cluster_cycle(lab)
    assert latest_snapshot(lab)["scheduler"]["placement"][pool] == target
    assert entry.before == {"value": before}
    assert entry.after == {"value": target}


def test_a_drained_node_shows_drained_or_cordoned_in_the_next_cycle(lab):
    run_cluster_cycle(lab)
    node = latest_snapshot(lab)["nodes"][0]["name"]
    apply_sim_change(lab, {"kind": "drain-node", "target": f"node:{node}"}, actor="bob")
    run_cluster_cycle(lab)
    states = {n["name"]: n["state"] for n in latest_snapshot(lab)["nodes"]}
    assert states[node] in {"cordoned", "drained"}


def test_a_new_process_replays_recorded_changes(lab):
    run_cluster_cycle(lab)
    apply_sim_change(lab, {"kind": "queue-weight", "target": "queue:team-b", "to": 7}, actor="a")
    sim_runtime.forget("lab")
    lab.refresh_from_db()
    run_cluster_cycle(lab)
    queues = {q["name"]: q for q in latest_snapshot(lab)["queues"]}
    assert queues["team-b"]["weight"] == 7


def test_a_bad_change_is_refused_and_records_nothing(lab):
    run_cluster_cycle(lab)
    with pytest.raises(ChangeError):
        apply_sim_change(lab, {"kind": "drain-node", "target": "node:nowhere"}, actor="alice")
    lab.refresh_from_db()
    assert lab.scheduler_config.get("changes", []) == []
    assert not AuditEntry.objects.exists()


def test_a_failing_source_keeps_the_last_good_cycle(lab):
    good = run_cluster_cycle(lab)
    lab.scheduler_config = {**lab.scheduler_config, "scenario": "no-such-scenario"}
    lab.save()
    sim_runtime.forget("lab")
    failed = run_cluster_cycle(lab)
    lab.refresh_from_db()
    assert not failed.ok
    assert "unknown sim scenario 'no-such-scenario'" in failed.error
    assert lab.status == "error"
    assert ClusterCycle.objects.filter(cluster=lab, ok=True).get() == good
    assert Snapshot.objects.filter(cluster=lab).count() == 1
