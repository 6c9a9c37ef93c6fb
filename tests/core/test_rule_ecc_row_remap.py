"""``ecc-row-remap``: a pending row remap, a remap failure (critical) or rows newly remapped for
uncorrectable errors. Fields as dcgm-exporter names them (etc/default-counters.csv):
DCGM_FI_DEV_ROW_REMAP_PENDING, DCGM_FI_DEV_ROW_REMAP_FAILURE,
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS."""

from __future__ import annotations

from functools import partial

import pytest

from diagnosis.core.recommend.engine import recommend
from diagnosis.core.recommend.merge import one_per_target
from diagnosis.core.rules.builtin.ecc_row_remap import NO_REMAP, RULE
from tests.support.rules import judge_rule, one_busy_gpu

CLEAN = {"pending": 0, "failure": 0, "uncorrectable": 0}


judge = partial(judge_rule, RULE)


def cluster(**remap):
    return one_busy_gpu(nodes=2, row_remap={**CLEAN, **remap})


def test_a_pending_remap_is_a_warning_naming_the_job_and_the_drain():
    (finding,) = judge(cluster(pending=1).build()).findings
    assert finding.subject == "gpu:a100-000/0"
    assert finding.severity == "warning"
    evidence = finding.evidence
    assert evidence["row_remap_pending"] is True
    assert evidence["row_remap_failure"] is False
    assert evidence["job"] == "j"
    assert "drain" in evidence["action"]


def test_a_remap_failure_is_critical():
    (finding,) = judge(cluster(failure=1).build()).findings
    assert finding.severity == "critical"
    assert "RMA" in finding.evidence["action"]


@pytest.mark.parametrize(("rows", "fires"), [(0, False), (1, True)])
def test_new_uncorrectable_remapped_rows(rows, fires):
    judgement = judge(cluster(uncorrectable=rows).build())
    assert bool(judgement.findings) is fires
    if fires:
        assert judgement.findings[0].evidence["uncorrectable_remapped_rows_new"] == 1


def test_a_clean_gpu_is_judged_and_the_unreported_ones_are_not():
    judgement = judge(cluster().build())
    assert judgement.findings == ()
    assert judgement.not_judged[NO_REMAP] == 15


def test_a_remap_finding_gets_drain_advice():
    run = recommend(cluster(pending=1).build())
    (drain,) = [r for r in run.recommendations if r.target == "node:a100-000"]
    assert drain.kind == "drain-node"
    assert drain.change["to"] == "drained"
    assert drain.change["reason"] == "gpuobs: pending row remap on a100-000/0"


def test_a_node_with_a_critical_xid_too_gets_one_drain_when_stored():
    """Both generators draft the same drain (the reason is not part of the change): the store's
    one_per_target keeps one, the Xid's, motivated by both findings."""
    run = recommend(cluster(pending=1).gpu("a100-000", 1, xid=[(79, "2m")]).build())
    stored = one_per_target(run.recommendations)
    (drain,) = [r for r in stored if r.target == "node:a100-000"]
    assert drain.generator == "drain-node"
    assert "Xid 79" in drain.change["reason"]
    assert drain.basis["rules"] == ["xid", "ecc-row-remap"]
    assert "conflicting" not in drain.basis
