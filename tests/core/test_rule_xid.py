"""``xid``: a GPU that reported an Xid in [as_of - window_s, as_of]."""

from __future__ import annotations

from functools import partial

import pytest

from diagnosis.core.rules.builtin.xid import RULE
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

judge = partial(judge_rule, RULE)


def gpu_with(xids, *, window_s=900, job=True):
    builder = SnapshotBuilder(window_s=window_s).pool("a100", nodes=1)
    if job:
        builder.job("j1", node="a100-000", tenant="team-a")
    return builder.gpu("a100-000", 3, xid=xids).build()


def test_critical_xid_on_a_busy_gpu():
    (finding,) = judge(gpu_with([(79, "5m")])).findings
    assert finding.rule == "xid"
    assert finding.subject == "gpu:a100-000/3"
    assert finding.severity == "critical"
    evidence = finding.evidence
    (code,) = evidence["codes"]
    assert code["code"] == 79
    assert code["name"] == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert "fallen off the bus" in code["meaning"]
    assert code["action"] == "reboot-node"
    assert code["nvidia_immediate"] == "RESTART_BM"
    assert code["count"] == 1
    assert evidence["jobs"][0]["id"] == "j1"
    assert evidence["job_ids"] == ["j1"]
    assert evidence["names"] == ["ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"]
    assert evidence["meaning"] == code["meaning"]
    assert evidence["tenants"] == ["team-a"]
    assert evidence["gpu_free"] is False
    assert "j1" in finding.summary


@pytest.mark.parametrize("code", [48, 62, 64, 74, 79, 95, 119, 120])
def test_design_critical_codes(code):
    (finding,) = judge(gpu_with([(code, "1m")])).findings
    assert finding.severity == "critical"


@pytest.mark.parametrize("code", [13, 31, 43])
def test_application_xids_are_warnings(code):
    (finding,) = judge(gpu_with([(code, "1m")])).findings
    assert finding.severity == "warning"
    assert finding.evidence["codes"][0]["app_level"] is True


def test_one_critical_code_makes_the_gpu_critical_and_leads_the_action():
    (finding,) = judge(gpu_with([(13, "3m"), (48, "2m"), (13, "1m")])).findings
    assert finding.severity == "critical"
    assert [c["code"] for c in finding.evidence["codes"]] == [13, 48]
    assert finding.evidence["critical_codes"] == [48]
    assert finding.evidence["action"] == "reset-gpu"
    assert finding.evidence["xid_count"] == 3


def test_repeats_are_counted_with_first_and_last_time():
    (finding,) = judge(gpu_with([(79, "10m"), (79, "2m")])).findings
    (code,) = finding.evidence["codes"]
    assert code["count"] == 2
    assert code["first"] == "2026-11-29T07:50:00Z"
    assert code["last"] == "2026-11-29T07:58:00Z"


@pytest.mark.parametrize(
    ("ago", "fires"),
    [
        (901, False),  # just before the window
        (900, True),  # exactly at its start
        (0, True),  # exactly at as_of
        (-1, False),  # after as_of
    ],
)
def test_window_edges_are_inclusive(ago, fires):
    assert bool(judge(gpu_with([(79, ago)])).findings) is fires


def test_window_follows_the_snapshot():
    assert not judge(gpu_with([(79, "2m")], window_s=60)).findings
    assert judge(gpu_with([(79, "2m")], window_s=120)).findings


def test_xid_outside_the_window_is_ignored_next_to_one_inside():
    (finding,) = judge(gpu_with([(79, "1h"), (13, "1m")])).findings
    assert [c["code"] for c in finding.evidence["codes"]] == [13]
    assert finding.severity == "warning"


def test_free_gpu_says_no_job_holds_it():
    (finding,) = judge(gpu_with([(79, "1m")], job=False)).findings
    assert finding.evidence["jobs"] == []
    assert finding.evidence["tenants"] == []
    assert finding.evidence["gpu_free"] is True
    assert "no job holds it" in finding.summary


def test_partial_gang_holding_the_gpu_is_named():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .job("g1", state="pending", pods=2, bound=1, node="a100-000", tenant="team-b")
        .gpu("a100-000", 0, xid=[(95, "1m")])
        .build()
    )
    (finding,) = judge(snap).findings
    assert finding.evidence["jobs"][0]["state"] == "pending"
    assert finding.evidence["tenants"] == ["team-b"]


def test_unknown_code_is_a_warning_pointing_at_nvidia_docs():
    (finding,) = judge(gpu_with([(999, "1m")])).findings
    assert finding.severity == "warning"
    assert finding.evidence["codes"][0]["known"] is False
    assert "unknown Xid" in finding.evidence["codes"][0]["meaning"]


def test_one_finding_per_gpu():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .gpu("a100-000", 0, xid=[(79, "1m")])
        .gpu("a100-000", 1, xid=[(79, "1m"), (79, "2m")])
        .gpu("a100-001", 0, xid=[(13, "1m")])
        .build()
    )
    subjects = sorted(f.subject for f in judge(snap).findings)
    assert subjects == ["gpu:a100-000/0", "gpu:a100-000/1", "gpu:a100-001/0"]


def test_unhealthy_gpu_on_a_drained_node_keeps_its_xid_finding():
    snap = (
        SnapshotBuilder()
        .node("n1", state="drained")
        .gpu("n1", 2, health="unhealthy", xid=[(79, "1m")])
        .build()
    )
    (finding,) = judge(snap).findings
    assert finding.evidence["node_state"] == "drained"
    assert finding.evidence["gpu_health"] == "unhealthy"


def test_no_xids_no_findings():
    snap = SnapshotBuilder().pool("a100", nodes=1).job("j1", node="a100-000").build()
    assert judge(snap).findings == ()


def test_holder_without_kind_or_tenant_stays_plain_json():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1)
        .job("j1", node="a100-000", tenant=None, kind=None)
        .gpu("a100-000", 0, xid=[(79, "1m")])
        .build()
    )
    (finding,) = judge(snap).findings  # judge() dumps the evidence with allow_nan=False
    assert finding.evidence["jobs"][0]["kind"] is None
    assert finding.evidence["tenants"] == []
