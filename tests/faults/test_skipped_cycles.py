"""Every failed or skipped cycle is a row with its reason (issue #18, defect 7): a beat-sent cycle
whose fan-out is more than a period old when a worker takes it (no worker was free, or none ran)
leaves a skipped-cycle row, and so do the intervals nothing sent (beat, Redis or every worker
away: the next fan-out finds the gap); a second beat's send in an interval already taken is no
missed cycle (the interval's cycle ran) and is counted where ``/healthz?deep=1`` shows it. The
third kind, a cycle refused for the worker's clock, is a row too: tests/faults/test_cycles.py
(faketime)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis import tasks
from diagnosis.actions.upkeep.health import database_now
from diagnosis.models import ClusterCycle
from tests.faults.conftest import CYCLE_SECONDS, good_cycles, row_counts
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.lab("lab-faults")]


def test_a_cycle_queued_longer_than_a_period_is_a_skipped_row_with_its_reason(
    fault_stack, lab, alice
) -> None:
    tasks.run_cycle(lab.pk)  # the last good data
    before = row_counts(lab)
    fanned_out_at = (database_now() - timedelta(seconds=3 * CYCLE_SECONDS)).isoformat()

    outcome = tasks.run_cycle(lab.pk, fanned_out_at=fanned_out_at)

    assert outcome["outcome"] == "stale"
    skipped = ClusterCycle.objects.get(cluster=lab, ok=False)
    assert skipped.error.startswith("skipped: queued 6 s, more than a cycle period (2 s)")
    assert skipped.as_of == good_cycles(lab)[-1].as_of  # the last good data stays current
    after = row_counts(lab)
    assert after == {**before, "skipped or failed cycles": before["skipped or failed cycles"] + 1}
    api = logged_in_client(alice).get(f"/api/clusters/{lab.pk}/").json()
    assert api["last_attempt_error"].startswith("skipped: queued 6 s")


def test_a_fan_out_after_two_periods_without_a_cycle_records_the_missed_intervals(
    fault_stack, lab
) -> None:
    tasks.run_cycle(lab.pk)
    ClusterCycle.objects.filter(cluster=lab).update(
        ran_at=database_now() - timedelta(seconds=5 * CYCLE_SECONDS)
    )

    assert tasks.run_cycles() == [lab.pk]

    missed = ClusterCycle.objects.get(cluster=lab, ok=False)
    assert missed.error.startswith("skipped: no cycle for 10 s (4 intervals): none was sent")
    assert tasks.run_cycles() == [lab.pk]
    assert ClusterCycle.objects.filter(cluster=lab, ok=False).count() == 1  # said once


def test_a_second_beats_send_in_a_taken_interval_is_counted_in_deep_health(
    fault_stack, lab, alice
) -> None:
    fanned_out_at = database_now().isoformat()
    first = tasks.run_cycle(lab.pk, fanned_out_at=fanned_out_at)
    before = row_counts(lab)

    second = tasks.run_cycle(lab.pk, fanned_out_at=fanned_out_at)  # the second beat's send

    assert (first["outcome"], second["outcome"]) == ("ran", "same-interval")
    assert row_counts(lab) == before  # no cycle missed: no row
    deep = logged_in_client(alice).get("/healthz?deep=1").json()
    assert deep["beat"]["same_interval_skips"] == {str(lab.pk): 1}
