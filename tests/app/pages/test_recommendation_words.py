"""Issue #32 item 12 on a recommendation's page: no raw internals. A gang release's static
impact showed every key of its stored impact ("Generator", "Preselect", "Basis", "Gpus
released"); the audit trail showed its before/after as JSON; the impact's metric names and
verdicts stayed English on a Chinese page. The static impact's shape is the gang-release
generator's (diagnosis/core/recommend/builtin/gang_release.py ``_impact`` and
``Draft.stored_fields``)."""

from __future__ import annotations

import pytest

from diagnosis.actions.workflow.review import request_recommendation
from diagnosis.models import Recommendation
from tests.app.pages.test_recommendation_pages import IMPACT
from tests.support.records import make_recommendation
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

STATIC_IMPACT = {
    "method": "static",
    "verdict": "not simulated",
    "headline": "releases 16 idle GPUs and unblocks 48 GPUs of the other gang(s)",
    "gpus_released": 16,
    "gpus_unblocked": 48,
    "idle_gpu_hours_at_most": 5.33,
    "gpus_involved": 64,
    "generator": "gang-release",
    "preselect": False,
    "basis": {"candidates": []},
    "summary": "Release gang sweep-gang-a",
}


def page(rec: Recommendation, user, **headers) -> str:
    url = f"/clusters/{rec.cluster.name}/recommendations/{rec.pk}/"
    return logged_in_client(user).get(url, **headers).content.decode()


def test_a_static_impact_shows_its_figures_labelled_and_no_internal_keys(make_cluster, bob):
    rec = make_recommendation(
        make_cluster("words"),
        "gang-release",
        "job:sweep-gang-a",
        {"to": "requeued"},
        impact=STATIC_IMPACT,
    )

    figures = page(rec, bob).split('id="impact-figures"')[1].split("</table>")[0]

    assert "GPUs released" in figures
    assert "GPU-hours held idle so far (at most)" in figures
    for raw in ("Generator", "Preselect", "Basis", "Gpus released", "Method"):
        assert raw not in figures


def test_the_audit_trail_reads_as_words_and_labelled_values(make_cluster, carol):
    rec = make_recommendation(make_cluster("words"), impact=IMPACT)
    request_recommendation(rec, carol)

    audit = page(rec, carol).split('id="audit"')[1].split("</section>")[0]

    assert 'title="request">Asked for approval</span>' in audit
    assert "{&quot;" not in audit  # no JSON
    assert '<th scope="row" title="change">Change</th>' in audit  # the after, as a table


def test_the_impact_metrics_and_verdicts_are_chinese_on_a_chinese_page(make_cluster, bob):
    rec = make_recommendation(make_cluster("words"), impact=IMPACT)

    text = page(rec, bob, HTTP_ACCEPT_LANGUAGE="zh-Hans")
    table = text.split('id="impact-table"')[1].split("</table>")[0]

    assert "等待时间 p95" in table
    assert "改善" in table
    assert "wait p95" not in table
