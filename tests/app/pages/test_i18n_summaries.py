"""Rule-written summaries in the reader's language (issue #32, docs/ui.md "Language"): a
finding stores its summary's template and values, the pages translate the template and fill in
the values, a manager reads another tenant's job in them as the placeholder, and a finding
stored without a template (an old row) reads as its English summary."""

from __future__ import annotations

import re

import pytest

from diagnosis.access import HIDDEN_JOB
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.core.text import SUMMARY_TEXT_KEY, Text
from diagnosis.models import Finding, Job, Tenant
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}


@pytest.fixture
def thrashed(make_cluster):
    """Job j of team-a preempted three times in the window: a preemption-thrash finding."""
    cluster = make_cluster("shanghai")
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("j", state="pending", waited="1d")
    for ago in ("5h", "3h", "1h"):
        builder.event("preempted", ago=ago, job="j", reason="Preempted", message="by prod/hi")
    record_cycle(cluster, builder.build())
    return Finding.objects.get(cluster=cluster, rule_id="preemption-thrash")


def test_the_finding_stores_its_summary_template_and_values(thrashed) -> None:
    stored = Text.from_json(thrashed.evidence[SUMMARY_TEXT_KEY])
    assert stored is not None
    assert stored.render() == thrashed.summary
    assert thrashed.summary.startswith("Job j (team-a) was preempted 3 times in the last 6 h")


def test_the_summary_reads_in_chinese_on_the_list_and_the_finding_page(thrashed, bob) -> None:
    client = logged_in_client(bob)
    chinese = "作业 j（team-a）在最近 6 小时内被抢占 3 次"

    listed = client.get("/clusters/shanghai/findings/", **ZH).content.decode()
    page = client.get(f"/clusters/shanghai/findings/{thrashed.pk}/", **ZH).content.decode()

    assert chinese in listed
    assert "was preempted" not in listed
    lead = re.search(r'<p class="summary lead">(.*?)</p>', page, re.S)[1]
    assert chinese in lead
    assert "was preempted" not in lead  # the owner notice's preview stays the notice's English
    assert SUMMARY_TEXT_KEY not in page  # no evidence row
    english = client.get(f"/clusters/shanghai/findings/{thrashed.pk}/").content.decode()
    assert "Job j (team-a) was preempted 3 times" in english


def test_a_finding_without_a_template_reads_as_its_english_summary(thrashed, bob) -> None:
    del thrashed.evidence[SUMMARY_TEXT_KEY]
    thrashed.save()

    page = logged_in_client(bob).get(f"/clusters/shanghai/findings/{thrashed.pk}/", **ZH)

    assert "Job j (team-a) was preempted 3 times" in page.content.decode()


def test_a_manager_reads_another_tenants_job_as_the_placeholder_in_chinese(
    make_cluster, mallory
) -> None:
    cluster = make_cluster("shanghai")
    hpo = Tenant.objects.create(cluster=cluster, name="hpo")
    vision = Tenant.objects.create(cluster=cluster, name="vision")
    hpo.managers.add(mallory)
    for job, tenant in (("victim", hpo), ("latecomer", vision)):
        Job.objects.create(
            cluster=cluster, external_id=job, name=job, tenant=tenant, submitted_at=AS_OF
        )
    text = Text(
        "%(count)s partial gangs in %(where)s (%(members)s) hold %(held)s GPUs and each waits "
        "for GPUs the others hold; %(free)s GPUs are free (held for up to %(minutes)s min).",
        {
            "count": 2,
            "where": Text("pool %(pool)s", {"pool": "a100"}),
            "members": "victim, latecomer",
            "held": 8,
            "free": 0,
            "minutes": "12",
        },
    )
    finding = Finding.objects.create(
        cluster=cluster,
        rule_id="gang-deadlock",
        subject="jobs:latecomer+victim",
        tenant=hpo,
        summary=text.render(),
        evidence={"pool": "a100", SUMMARY_TEXT_KEY: text.as_json()},
        first_seen=AS_OF,
        last_seen=AS_OF,
    )
    client = logged_in_client(mallory)

    for url in ("/clusters/shanghai/findings/", f"/clusters/shanghai/findings/{finding.pk}/"):
        html = client.get(url, **ZH).content.decode()
        assert "资源池 a100 中的 2 个部分就位的 Gang" in html, url
        assert "latecomer" not in html, url
        assert "victim, (another tenant&#x27;s job)" in html, url
        assert HIDDEN_JOB.replace("'", "&#x27;") in html
