"""No apply stuck in ``applying`` (issue #18, defect 3): (a) the pool process OOM-killed after
its write committed and before the apply was recorded, (b) Apply pressed while Redis is down.
The stand-in for the OOM killer is SIGKILL to the worker's pool process while it waits to write
the apply's audit row; the sweeper beat sends then re-reads the target, finds the change in
place and records it as applied, without writing it again."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis.actions.workflow.review import request_apply
from diagnosis.models import AuditEntry, Recommendation
from tests.faults.conftest import (
    TASK_TIME_LIMIT,
    approved_recommendation,
    audit_actions,
    row_counts,
    scheduler_changes,
    someone_waits_on_a_row_lock,
    table_locked_for_writes,
    wait_until,
)
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.lab("lab-faults", dry_run=False)]


@pytest.mark.parametrize("killed", ["pool process", "whole worker"])
def test_an_apply_whose_worker_died_after_writing_is_recorded_once(
    fault_stack, lab, carol, dave, killed: str
) -> None:
    """The pool process alone (the OOM killer's choice: the worker sees WorkerLostError and the
    message is rejected back to the queue) or the whole worker (a replacement starts; the
    message stays unacknowledged in Redis until the visibility timeout)."""
    rec = approved_recommendation(lab, carol, dave)
    before = row_counts(lab)
    request_apply(rec, dave)  # queued; no worker yet

    with table_locked_for_writes(AuditEntry):  # the apply's record step waits here
        worker = fault_stack.start_worker()
        wait_until(someone_waits_on_a_row_lock, "the apply to wait to record itself")
        assert [c["change"]["to"] for c in scheduler_changes(lab)] == [3]  # the write committed
        (child,) = worker.pool_child_pids()
        os.kill(child, signal.SIGKILL)  # the OOM killer's stand-in
        if killed == "whole worker":
            os.kill(worker.pid, signal.SIGKILL)
        else:
            wait_until(lambda: "WorkerLostError" in worker.text(), "the worker to see it die")
        killed_at = time.monotonic()
    stuck = Recommendation.objects.get(pk=rec.pk)
    assert stuck.state == "applying"
    assert stuck.apply_claimed_at is not None

    fault_stack.start_beat()  # the sweeper runs every cycle period
    if killed == "whole worker":
        worker = fault_stack.start_worker()
    recovery_limit = TASK_TIME_LIMIT + 5 + 20  # the claim goes stale, then a sweep and an apply
    applied = wait_until(
        lambda: Recommendation.objects.filter(pk=rec.pk, state="applied").first(),
        "the sweeper to record the apply",
        recovery_limit,
    )
    recovered_s = time.monotonic() - killed_at
    print(f"fault matrix: {killed} killed mid-apply; recorded as applied in {recovered_s:.1f} s")

    assert [c["change"]["to"] for c in scheduler_changes(lab)] == [3]  # never written twice
    assert audit_actions(rec) == ["apply-requested", "apply-rechecked", "apply-already-in-place"]
    assert "an earlier attempt" in applied.status_message
    assert applied.verification["status"] == "watching"
    page = logged_in_client(dave).get(f"/clusters/{lab.name}/recommendations/{rec.pk}/")
    assert "an earlier attempt" in page.content.decode()
    after = row_counts(lab)
    assert after["audit rows"] == before["audit rows"] + 3
    assert after["findings"] >= before["findings"]
    assert worker.alive()


def test_apply_pressed_while_redis_is_down_answers_503_and_leaves_it_approved(
    fault_stack, lab, carol, dave
) -> None:
    rec = approved_recommendation(lab, carol, dave)
    fault_stack.redis.stop()

    started = time.monotonic()
    answer = logged_in_client(dave).post(f"/api/recommendations/{rec.pk}/apply/")
    waited = time.monotonic() - started
    print(f"fault matrix: apply with Redis down answered {answer.status_code} in {waited:.1f} s")

    assert answer.status_code == 503
    assert waited < 5  # the person gets the answer at once (it took 19 s of result retries)
    assert "unreachable" in answer.json()["detail"]
    rec.refresh_from_db()
    assert rec.state == "approved"
    assert rec.apply_key == ""
    assert audit_actions(rec) == ["apply-requested", "apply-not-sent"]
    assert scheduler_changes(lab) == []


def test_a_stuck_apply_is_shown_and_re_check_sends_it_again(fault_stack, lab, carol, dave) -> None:
    """The page of an apply stuck past its claim's life (no worker running here) offers
    Re-check; pressing it releases the claim, audits it and sends the same key again."""
    rec = approved_recommendation(lab, carol, dave)
    request_apply(rec, dave)  # queued; no worker takes it
    Recommendation.objects.filter(pk=rec.pk).update(
        apply_claimed_at=timezone.now() - timedelta(seconds=TASK_TIME_LIMIT + 6)
    )
    client = logged_in_client(dave)
    url = f"/clusters/{lab.name}/recommendations/{rec.pk}/"

    page = client.get(url).content.decode()
    answer = client.post(f"{url}re-check/", follow=True)

    assert "stuck in applying since" in page
    assert 'id="action-re-check"' in page
    assert "Apply sent to the scheduler" in answer.content.decode()
    rec.refresh_from_db()
    assert rec.state == "applying"
    assert rec.apply_claimed_at is None
    assert audit_actions(rec) == ["apply-requested", "apply-rechecked"]
    assert "re-checking" in rec.status_message
