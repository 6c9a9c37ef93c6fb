"""A hung worker (issue #29, item 6): SIGSTOPped, it takes no task, so its heartbeat ages;
``/healthz?deep=1`` answers 503 naming the worker within three heartbeat periods and 5 s
(50 s at the default 60 s cycle period, 11 s here), and 200 again within one heartbeat period
once it runs again. It took 135 s (two cycle periods and 15 s) before."""

from __future__ import annotations

import os
import signal
import time

import pytest

from diagnosis.actions.upkeep.health import stale_after_s
from tests.faults.conftest import CYCLE_SECONDS, wait_until
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db(transaction=True)]


def deep_status(client) -> tuple[int, dict]:
    response = client.get("/healthz?deep=1")
    return response.status_code, response.json()


def test_a_stopped_worker_turns_deep_health_red_then_green(fault_stack, alice, settings) -> None:
    settings.GPUOBS_HEARTBEAT_SECONDS = CYCLE_SECONDS  # as the processes read it
    worker = fault_stack.start_worker()
    fault_stack.start_beat()
    client = logged_in_client(alice)
    wait_until(lambda: deep_status(client)[0] == 200, "deep health green first", 40)

    pids = [*worker.pool_child_pids(), worker.pid]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        code, body = wait_until(
            lambda: (answer := deep_status(client))[0] == 503 and answer, "deep health red", 60
        )
        red_s = time.monotonic() - stopped
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    resumed = time.monotonic()
    wait_until(lambda: deep_status(client)[0] == 200, "deep health green again", 60)
    green_s = time.monotonic() - resumed
    print(
        f"fault matrix: worker SIGSTOPped: /healthz?deep=1 503 after {red_s:.1f} s "
        f"(threshold {stale_after_s():.0f} s), 200 again {green_s:.1f} s after SIGCONT"
    )

    assert code == 503
    assert body["worker"]["status"] != "ok", body
    assert red_s <= stale_after_s() + 2 * CYCLE_SECONDS
    assert green_s <= 3 * CYCLE_SECONDS + 5  # one heartbeat period, with room for the queue
