"""Redis restarted under a worker (issue #18, defect 1): kombu 5.7.0's Redis transport raised
``AttributeError("'NoneType' object has no attribute 'hostname'")`` in ``_connparams`` while
restoring a channel's unacknowledged messages after the connection was lost, and the worker
exited (upstream: celery/kombu#582, #970; the workaround: gpuobs/broker.py). The worker must
ride it out: the apply in flight finishes once, and cycles go on after the restart."""

from __future__ import annotations

import time

import pytest
from django.test import Client
from kombu import Connection, Exchange, Queue
from kombu.transport import redis as kombu_redis

from diagnosis.actions.workflow.review import request_apply
from diagnosis.models import Cluster, Recommendation
from gpuobs.broker import RedisTransport
from tests.faults.conftest import (
    approved_recommendation,
    audit_actions,
    good_cycles,
    row_locked,
    scheduler_changes,
    someone_waits_on_a_row_lock,
    wait_until,
)
from tests.support.world import logged_in_client

RECOVERY_S = 30  # what the suite promises: the worker takes tasks again within this


def close_after_connection_loss(transport: type, redis_url: str) -> int:
    """kombu's path on a lost broker connection, step by step: a channel holding one delivered,
    unacknowledged message, its pool dropped (its PING failed while Redis was away), the
    transport detached from the closed connection, then the channel closed (which restores the
    message). Returns the messages back on the queue."""
    connection = Connection(redis_url, transport=transport)
    channel = connection.channel()
    queue = Queue("fault-restore", Exchange("fault-restore"), "fault-restore", channel=channel)
    queue.declare()
    queue.purge()
    connection.Producer(channel).publish(
        {"n": 1}, exchange="fault-restore", routing_key="fault-restore"
    )
    assert queue.get(no_ack=False) is not None  # delivered, not acked
    channel._disconnect_pools()
    connection._do_close_transport()
    channel.close()
    with Connection(redis_url, transport=transport) as fresh:
        return Queue("fault-restore", Exchange("fault-restore"), "fault-restore")(fresh).purge()


def test_kombus_own_transport_dies_restoring_messages_after_a_lost_connection(fault_stack) -> None:
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'hostname'"):
        close_after_connection_loss(kombu_redis.Transport, fault_stack.redis.url)


def test_gpuobs_transport_restores_the_unacked_message_after_a_lost_connection(fault_stack) -> None:
    assert close_after_connection_loss(RedisTransport, fault_stack.redis.url) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.lab("lab-faults", dry_run=False)
def test_a_redis_restart_mid_task_leaves_worker_and_beat_running_and_applies_once(
    fault_stack, lab, carol, dave, alice
) -> None:
    rec = approved_recommendation(lab, carol, dave)
    request_apply(rec, dave)  # queued before the worker starts

    with row_locked(Cluster, lab.pk):  # the worker's task (the apply or a cycle) waits here
        worker = fault_stack.start_worker()
        beat = fault_stack.start_beat()
        wait_until(someone_waits_on_a_row_lock, "a task in flight, waiting on the cluster's row")
        cycles_before = len(good_cycles(lab))
        down = time.monotonic()
        fault_stack.redis.stop()
    time.sleep(3)  # the fault itself: Redis is away this long, as in a container restart
    fault_stack.redis.start()
    down_s = time.monotonic() - down
    restarted = time.monotonic()

    wait_until(
        lambda: Recommendation.objects.filter(pk=rec.pk, state="applied").exists(),
        "the apply",
        RECOVERY_S,
    )
    after_restart = len(good_cycles(lab))
    wait_until(lambda: len(good_cycles(lab)) > after_restart, "beat's next cycle", RECOVERY_S)
    recovered_s = time.monotonic() - restarted
    deep = wait_until(
        lambda: (
            (answer := logged_in_client(alice).get("/healthz?deep=1")).status_code == 200 and answer
        ),
        "the deep health check to pass again",
        RECOVERY_S,
    )
    print(
        f"fault matrix: redis down {down_s:.1f} s with a task in flight; the apply and the next "
        f"cycle done {recovered_s:.1f} s after it came back; cycles before {cycles_before}"
    )

    assert worker.alive(), "the worker exited on the broker restart"
    assert beat.alive(), "beat exited on the broker restart"
    assert "Unrecoverable error" not in worker.text()
    assert [c["change"]["to"] for c in scheduler_changes(lab)] == [3]  # written once
    assert audit_actions(rec) == ["apply-requested", "apply"]
    assert deep.json()["worker"]["status"] == "ok"
    assert deep.json()["beat"]["status"] == "ok"
    assert "pid" in deep.json()["worker"]["detail"]  # alice is staff
    anonymous = Client().get("/healthz?deep=1").json()
    assert anonymous["worker"]["status"] == "ok"
    assert "pid" not in anonymous["worker"]["detail"]  # no host names for anyone
