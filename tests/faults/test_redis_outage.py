"""Redis down for a while with cycles scheduled (issue #18): while it is away no cycle can be
sent, and the API and ``/healthz?deep=1`` say so (the data stale, Redis unreachable); once it is
back, worker and beat go on by themselves: cycles resume, one per interval, no row lost or
written twice, and the intervals nothing could send are one skipped-cycle row saying so."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta

import pytest

from diagnosis.models import ClusterCycle
from tests.faults.conftest import CYCLE_SECONDS, good_cycles, row_counts, wait_until
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.lab("lab-faults")]

DOWN_S = 6  # three cycle periods without a broker (the API calls data stale after two)
RECOVERY_S = 30  # what the suite promises: a good cycle within this once Redis is back


def test_cycles_resume_by_themselves_after_redis_was_down_for_three_periods(
    fault_stack, lab, alice
) -> None:
    worker = fault_stack.start_worker()
    beat = fault_stack.start_beat()
    wait_until(lambda: len(good_cycles(lab)) >= 2, "two cycles before the outage", 40)
    before = row_counts(lab)
    client = logged_in_client(alice)

    fault_stack.redis.stop()
    down = time.monotonic()
    stale = wait_until(
        lambda: client.get(f"/api/clusters/{lab.pk}/").json()["stale"],
        "the API to call the data stale",
        DOWN_S,
    )
    deep = client.get("/healthz?deep=1")
    stale_after_s = time.monotonic() - down
    time.sleep(max(0.0, DOWN_S - stale_after_s))  # the fault itself: Redis stays away this long
    during = row_counts(lab)
    fault_stack.redis.start()
    back = time.monotonic()
    wait_until(
        lambda: len(good_cycles(lab)) > during["cycles"], "a good cycle after Redis", RECOVERY_S
    )
    recovered_s = time.monotonic() - back
    fresh = wait_until(
        lambda: not (answer := client.get(f"/api/clusters/{lab.pk}/").json())["stale"] and answer,
        "the API to call the data fresh again",
        RECOVERY_S,
    )
    print(
        f"fault matrix: redis down {back - down:.1f} s with cycles scheduled: API stale after "
        f"{stale_after_s:.1f} s, healthz {deep.status_code}; a good cycle {recovered_s:.1f} s "
        f"after it came back; rows before {before}, during {during}, after {row_counts(lab)}"
    )

    assert stale is True
    assert deep.status_code == 503
    assert deep.json()["redis"]["status"] == "error"
    assert fresh["status"] == "ok"
    assert worker.alive()
    assert beat.alive()
    assert "Unrecoverable error" not in worker.text()
    after = row_counts(lab)
    assert after["findings"] >= before["findings"]
    assert after["finding events"] >= before["finding events"]
    cycles = good_cycles(lab)
    starts = [c.ran_at - timedelta(seconds=c.seconds) for c in cycles]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.75 * CYCLE_SECONDS - 0.25, gaps  # no interval ran twice on the way back
    assert not ClusterCycle.objects.filter(cluster=lab, ok=False, error="").exists()
    missed = ClusterCycle.objects.get(cluster=lab, ok=False, error__contains="no cycle for")
    assert "none was sent or taken (beat, Redis or every worker away)" in missed.error
