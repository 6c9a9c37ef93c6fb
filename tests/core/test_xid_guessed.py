"""Issue #13: a finding on a GPU whose holder or index an adapter guessed says so. The Kubernetes
device-plugin path without the plugin's annotation guesses a pod's GPU indexes ("lowest free",
``allocation[].gpus_guessed``); the DRA path guesses the NVML index (``gpus[].index_guessed``)."""

from __future__ import annotations

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.builtin.xid import RULE
from diagnosis.core.rules.facts import SnapshotFacts
from tests.support.builders import SnapshotBuilder


def xid_on_gpu_3(*, holder_guessed: bool = False, index_guessed: bool = False):
    builder = SnapshotBuilder().node("n1", gpus=8)
    builder.job("j1", allocation=[("n1", [3])], gpus_per_pod=1, tenant="team-a")
    if holder_guessed:
        builder.doc["jobs"][-1]["allocation"][0]["gpus_guessed"] = True
    builder.gpu("n1", 3, xid=[(79, "2m")], index_guessed=index_guessed)
    snap = builder.build()
    (finding,) = RULE.evaluate(snap, RULE.resolve(), SnapshotFacts(snap)).findings
    return finding


def test_a_finding_on_a_gpu_held_by_a_guessed_allocation_says_so():
    finding = xid_on_gpu_3(holder_guessed=True)
    assert finding.evidence["holder_guessed"] is True
    assert "j1 (team-a) is on it (a guess" in finding.summary


def test_an_exact_allocation_is_not_called_a_guess():
    finding = xid_on_gpu_3()
    assert finding.evidence["holder_guessed"] is False
    assert finding.evidence["index_guessed"] is False
    assert "guess" not in finding.summary


def test_a_guessed_gpu_index_is_named_in_the_evidence():
    finding = xid_on_gpu_3(index_guessed=True)
    assert finding.evidence["index_guessed"] is True
    assert "index is a guess" in finding.summary


def test_the_guess_survives_dump_and_load():
    builder = SnapshotBuilder().node("n1", gpus=8)
    builder.job("j1", allocation=[("n1", [3])], gpus_per_pod=1)
    builder.doc["jobs"][-1]["allocation"][0]["gpus_guessed"] = True
    snap = builder.build()
    again = snapshot_format.load(snapshot_format.dump(snap))
    assert again.allocations["guessed"].tolist() == [True]
    assert snapshot_format.dump(again)["jobs"][0]["allocation"][0]["gpus_guessed"] is True
