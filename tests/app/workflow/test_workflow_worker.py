"""The apply step on a real Celery worker consuming only the ``actuate`` queue from Redis: an
approval's dry run and the apply run there, and the same apply message delivered again (as a
broker redelivers after a lost ack) writes nothing twice."""

from __future__ import annotations

import pytest

from diagnosis.actions.workflow.review import (
    approve_recommendation,
    request_apply,
    request_recommendation,
)
from diagnosis.models import AuditEntry, Cluster, Recommendation
from diagnosis.tasks import actuate_recommendation
from tests.support.celery_worker import celery_worker_process
from tests.support.processes import wait_until
from tests.support.records import make_recommendation

pytestmark = [
    pytest.mark.celery_worker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.lab("lab-worker", dry_run=False),
]


@pytest.fixture
def actuate_worker(redis_url: str, tmp_path):
    """A worker process on the ``actuate`` queue only, against the test database."""
    with celery_worker_process("actuate", redis_url, tmp_path) as worker:
        yield worker


def test_a_real_actuate_worker_applies_once_despite_a_redelivery(
    actuate_worker, lab, carol, dave
) -> None:
    rec = make_recommendation(lab, "queue-weight", "queue:team-b", {"from": 1, "to": 3})
    request_recommendation(rec, carol)
    approve_recommendation(rec, dave)  # its dry run goes to the worker
    wait_until(
        lambda: Recommendation.objects.get(pk=rec.pk).dry_run_result,
        "the worker's dry run",
        timeout=60,
    )

    rec = request_apply(rec, dave)
    applied = wait_until(
        lambda: Recommendation.objects.filter(pk=rec.pk, state="applied").first(),
        "the worker's apply",
        timeout=60,
    )
    again = actuate_recommendation.apply_async((rec.pk, rec.apply_key)).get(timeout=60)

    changes = Cluster.objects.get(pk=lab.pk).scheduler_config["changes"]
    assert [c["change"]["to"] for c in changes] == [3]
    assert again["outcome"] == "duplicate"
    assert applied.apply_result["after"] == 3
    assert AuditEntry.objects.filter(recommendation=rec, action="apply").count() == 1
