"""Notices to job owners: off by default; none before the grace period; one per job, rule and day;
the email names the job, the evidence, the GPU-hours at stake and what to do; the finding page
previews it, the cluster page shows the channel's state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from diagnosis.actions.notify import owner_notices
from diagnosis.actions.notify.alertmanager import deliver_to_alertmanager
from diagnosis.actions.notify.owner_notices import preview_notice, send_owner_notices
from diagnosis.models import (
    Cluster,
    DeliveryState,
    Finding,
    OwnerNotice,
    OwnerNoticePolicy,
    Tenant,
)
from tests.support.notify_world import record_cycles

pytestmark = pytest.mark.django_db

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def cluster(make_cluster) -> Cluster:
    return make_cluster("owners")


def turn_on(cluster: Cluster, **fields) -> OwnerNoticePolicy:
    defaults = {"enabled": True, "grace_s": 3600, "owners": {"team-a": "ana@example.org"}}
    return OwnerNoticePolicy.objects.create(cluster=cluster, **{**defaults, **fields})


def idle_finding(cluster: Cluster) -> Finding:
    return Finding.objects.get(cluster=cluster, rule_id="idle-allocation")


def test_off_by_default(cluster, mailoutbox) -> None:
    record_cycles(cluster, ["idle"] * 9, end=NOW)  # fired for 70 minutes
    assert send_owner_notices(cluster, now=NOW) is None
    assert mailoutbox == []
    preview = preview_notice(idle_finding(cluster), now=NOW)
    assert not preview.would_send
    assert preview.reason == "owner notices are off for this cluster"


def test_none_before_the_grace_period(cluster, mailoutbox) -> None:
    turn_on(cluster)
    record_cycles(cluster, ["idle"] * 4, end=NOW)  # firing since the second cycle: 20 minutes
    finding = idle_finding(cluster)
    assert finding.state == "firing"
    assert send_owner_notices(cluster, now=NOW) == 0
    assert mailoutbox == []
    assert preview_notice(finding, now=NOW).reason.startswith("within the grace period")


def test_one_notice_per_job_rule_and_day(cluster, mailoutbox) -> None:
    turn_on(cluster)
    record_cycles(cluster, ["idle"] * 9, end=NOW)
    assert send_owner_notices(cluster, now=NOW) == 1
    assert send_owner_notices(cluster, now=NOW + timedelta(minutes=10)) == 0
    assert len(mailoutbox) == 1
    assert preview_notice(idle_finding(cluster), now=NOW).reason == "already notified today"

    tomorrow = NOW + timedelta(days=1)
    record_cycles(cluster, ["idle"], end=tomorrow)
    assert send_owner_notices(cluster, now=tomorrow) == 1
    assert len(mailoutbox) == 2
    assert OwnerNotice.objects.filter(cluster=cluster, job_external_id="idle-1").count() == 2
    state = DeliveryState.objects.get(cluster=cluster, channel="owner-email")
    assert (state.deliveries_total, state.alerts_sent_total) == (2, 2)


def test_the_email_names_the_job_the_evidence_and_the_gpu_hours(cluster, mailoutbox) -> None:
    turn_on(cluster)
    record_cycles(cluster, ["idle"] * 9, end=NOW)
    send_owner_notices(cluster, now=NOW)
    (mail,) = mailoutbox
    finding = idle_finding(cluster)
    assert mail.to == ["ana@example.org"]
    assert "idle-1" in mail.subject
    assert "job idle-1" in mail.body
    assert finding.summary in mail.body
    assert "Evidence" in mail.body
    # 8 GPUs held since the finding fired, an hour and more before the last cycle
    hours = 8 * (finding.last_seen - finding.firing_since).total_seconds() / 3600
    assert hours > 8
    assert f"holds 8 GPUs; {hours:.1f} GPU-hours so far" in mail.body
    assert "192 GPU-hours for every further day" in mail.body
    assert "What to do" in mail.body
    assert f"/clusters/owners/findings/{finding.pk}/" in mail.body


def test_an_owner_without_an_address_gets_nothing(cluster, mailoutbox) -> None:
    turn_on(cluster, owners={})
    record_cycles(cluster, ["idle"] * 9, end=NOW)
    assert send_owner_notices(cluster, now=NOW) == 0
    assert preview_notice(idle_finding(cluster), now=NOW).reason == (
        "no email address for owner team-a"
    )
    OwnerNoticePolicy.objects.filter(cluster=cluster).update(email_domain="corp.example")
    assert send_owner_notices(cluster, now=NOW) == 1
    assert mailoutbox[0].to == ["team-a@corp.example"]


def test_the_finding_page_previews_the_notice(cluster, bob_client) -> None:
    record_cycles(cluster, ["idle"] * 3, end=NOW)
    finding = idle_finding(cluster)
    text = bob_client.get(f"/clusters/owners/findings/{finding.pk}/").content.decode()
    assert "Notice to the job&#x27;s owner" in text or "Notice to the job's owner" in text
    assert "owner notices are off for this cluster" in text
    assert "your job idle-1 on owners" in text


def test_the_cluster_page_shows_failing_notifications(cluster, bob_client, settings) -> None:
    settings.GPUOBS_ALERTMANAGER_URL = "http://127.0.0.1:9"
    record_cycles(cluster, ["idle"], end=NOW)
    deliver_to_alertmanager(cluster)
    text = bob_client.get("/clusters/owners/").content.decode()
    assert 'id="notifications"' in text
    assert "failing" in text
    assert "127.0.0.1:9" not in text  # the URL is for admins


# -- addresses that are no plain address (issue #28, item 4) ------------------------------------


@pytest.mark.parametrize(
    "owner", ["attacker@evil.example(", "a,b", "x\nBcc: y", "ana (admin)"], ids=repr
)
def test_an_owner_whose_address_is_no_plain_address_is_refused_and_named(
    cluster, mailoutbox, owner
) -> None:
    turn_on(cluster, owners={}, email_domain="corp.example")
    cycle = record_cycles(cluster, ["idle"] * 9, end=NOW)
    Tenant.objects.filter(cluster=cluster, name="team-a").update(name=owner)

    assert send_owner_notices(cluster, now=NOW) == 0

    assert mailoutbox == []
    assert not OwnerNotice.objects.exists()
    assert preview_notice(idle_finding(cluster), now=NOW).reason.endswith(
        "is not one plain email address: refused"
    )
    cycle.refresh_from_db()
    assert any(repr(owner[:80]) in note for note in cycle.source["notes"])


def test_a_mapped_address_with_a_comment_is_refused(cluster, mailoutbox) -> None:
    turn_on(cluster, owners={"team-a": "ana@example.org(x)"})
    record_cycles(cluster, ["idle"] * 9, end=NOW)
    assert send_owner_notices(cluster, now=NOW) == 0
    assert mailoutbox == []


def test_one_notice_that_fails_never_stops_the_others(cluster, mailoutbox, monkeypatch) -> None:
    turn_on(cluster)
    record_cycles(cluster, ["idle"] * 9, end=NOW)
    second = idle_finding(cluster)
    second.pk, second.subject = None, "job:idle-9"
    second.save()
    real_send = owner_notices._send
    calls: list[str] = []

    def first_fails(policy, preview, finding):
        calls.append(finding.subject)
        if len(calls) == 1:
            raise ValueError("Invalid address; only a@b could be parsed from 'a,b'")
        real_send(policy, preview, finding)

    monkeypatch.setattr(owner_notices, "_send", first_fails)

    assert send_owner_notices(cluster, now=NOW) == 1
    assert len(calls) == 2
    assert len(mailoutbox) == 1
    assert OwnerNotice.objects.count() == 1  # the failed one rolled back, tried next cycle
