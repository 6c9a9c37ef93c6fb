"""``preemption-thrash``: a job preempted >= min_preemptions [3] times within window [6 h],
counted from its ``preempted`` events in the window, and from its own counter when the whole
job lies inside the window."""

from __future__ import annotations

from functools import partial

import pytest

from diagnosis.core.rules.builtin.preemption_thrash import RULE, UNDATED
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

judge = partial(judge_rule, RULE)


def preempted(times, *, waited="1d", counter=None):
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("j", state="pending", waited=waited)
    if counter is not None:
        builder.doc["jobs"][-1]["preemptions"] = counter
    for ago in times:
        builder.event("preempted", ago=ago, job="j", reason="Preempted", message="by prod/hi-pri")
    return builder


def test_three_preemptions_in_the_window_are_reported_with_their_times():
    (finding,) = judge(preempted(["5h", "3h", "1h"]).build()).findings
    assert finding.subject == "job:j"
    assert finding.severity == "warning"
    evidence = finding.evidence
    assert evidence["preemptions_in_window"] == 3
    assert [e["time"] for e in evidence["preemptions"]] == [
        "2026-11-29T03:00:00Z",
        "2026-11-29T05:00:00Z",
        "2026-11-29T07:00:00Z",
    ]
    assert evidence["preempted_by"] == ["Preempted"]
    assert evidence["preemptions"][0]["message"] == "by prod/hi-pri"


@pytest.mark.parametrize(("count", "fires"), [(2, False), (3, True)])
def test_min_preemptions(count, fires):
    times = ["1h", "2h", "3h"][:count]
    assert bool(judge(preempted(times).build()).findings) is fires


@pytest.mark.parametrize(("oldest", "fires"), [("6h", True), ("21601s", False)])
def test_window_includes_its_start(oldest, fires):
    assert bool(judge(preempted([oldest, "2h", "1h"]).build()).findings) is fires


def test_a_job_inside_the_window_counts_its_own_counter():
    (finding,) = judge(preempted([], waited="2h", counter=4).build()).findings
    assert finding.evidence["preemptions_in_window"] == 4
    assert finding.evidence["preemptions"] == []


def test_an_old_jobs_counter_alone_is_not_judged():
    judgement = judge(preempted([], waited="1d", counter=5).build())
    assert judgement.findings == ()
    assert judgement.not_judged[UNDATED] == 1


def test_other_event_kinds_do_not_count():
    builder = preempted(["1h", "2h"])
    builder.event("evicted", ago="30m", job="j")
    assert judge(builder.build()).findings == ()
