"""The apply step on a real Celery worker consuming only the ``actuate`` queue from Redis: an
approval's dry run and the apply run there, and the same apply message delivered again (as a
broker redelivers after a lost ack) writes nothing twice."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from diagnosis.actions.review import approve_recommendation, request_apply, request_recommendation
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import AuditEntry, Cluster, Recommendation
from diagnosis.tasks import actuate_recommendation
from tests.app.test_celery import celery_worker_process

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def actuate_worker(redis_url: str, tmp_path):
    """A worker process on the ``actuate`` queue only, against the test database."""
    with celery_worker_process("actuate", redis_url, tmp_path) as worker:
        yield worker


def test_a_real_actuate_worker_applies_once_despite_a_redelivery(
    actuate_worker, make_cluster, carol, dave
) -> None:
    cluster = make_cluster(
        "lab-worker",
        scheduler_kind="sim",
        metrics_kind="sim",
        dry_run=False,
        scheduler_config={"scenario": "small", "seed": 1, "clock": "step", "step_s": 900},
    )
    rec = Recommendation.objects.create(
        cluster=cluster, kind="queue-weight", target="queue:team-b", change={"from": 1, "to": 3}
    )
    try:
        request_recommendation(rec, carol)
        approve_recommendation(rec, dave)  # its dry run goes to the worker
        wait_for(
            lambda: Recommendation.objects.get(pk=rec.pk).dry_run_result, "the worker's dry run"
        )

        rec = request_apply(rec, dave)
        applied = wait_for(
            lambda: Recommendation.objects.filter(pk=rec.pk, state="applied").first(),
            "the worker's apply",
        )
        again = actuate_recommendation.apply_async((rec.pk, rec.apply_key)).get(timeout=60)
    finally:
        sim_runtime.forget(cluster.name)

    changes = Cluster.objects.get(pk=cluster.pk).scheduler_config["changes"]
    assert [c["change"]["to"] for c in changes] == [3]
    assert again["outcome"] == "duplicate"
    assert applied.apply_result["after"] == 3
    assert AuditEntry.objects.filter(recommendation=rec, action="apply").count() == 1
