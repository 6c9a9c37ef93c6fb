"""Tasks that actions start, sent once the surrounding transaction commits.

This module holds the only import of :mod:`diagnosis.tasks` from the actions, and it is lazy:
tasks are thin wrappers that import the actions, so the actions may not import them at load
time (that would be an import cycle).
"""

from __future__ import annotations

from functools import partial

from django.db import transaction


def dry_run_on_commit(recommendation_id: int) -> None:
    """Ask the scheduler, on the ``actuate`` queue, what a recommendation's change would do."""
    from diagnosis.tasks import actuate_dry_run  # noqa: PLC0415 -- the tasks import the actions

    actuate_dry_run.delay_on_commit(recommendation_id)


def apply_on_commit(recommendation_id: int, apply_key: str) -> None:
    """Apply an approved recommendation once, on the ``actuate`` queue (``apply_key`` makes a
    redelivered message a no-op). Sent on commit as ``delay_on_commit`` does; a send the broker
    refuses puts the recommendation back to approved (``apply.publish_apply``, answered 503)."""
    from diagnosis.actions.workflow.apply import publish_apply  # noqa: PLC0415 -- apply imports this module

    transaction.on_commit(partial(publish_apply, recommendation_id, apply_key))


# A person waits for the answer: one quick retry, not Celery's default publish retries, and no
# subscription to the result (the apply records its outcome itself; subscribing retries the
# Redis result backend 20 times, a second apart, before a refused send could be answered).
APPLY_PUBLISH_RETRY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}


def send_apply(recommendation_id: int, apply_key: str) -> None:
    """Send the apply task now (raises when the broker refuses it)."""
    from diagnosis.tasks import actuate_recommendation  # noqa: PLC0415 -- as above

    actuate_recommendation.apply_async(
        (recommendation_id, apply_key), retry_policy=APPLY_PUBLISH_RETRY, ignore_result=True
    )


def notify_on_commit(cluster_id: int) -> None:
    """Send a cluster's notifications (Alertmanager, owner notices) after its cycle commits, on
    the default queue: the cycle never waits for them."""
    from diagnosis.tasks import notify_cluster  # noqa: PLC0415 -- as above

    notify_cluster.delay_on_commit(cluster_id)


def impact_on_commit(recommendation_id: int) -> None:
    """Estimate a recommendation's pending impact on the ``impact`` queue, apart from the cycle
    (issue #17). A send that fails (the broker down) is logged, never raised into the cycle:
    the impact stays pending and a later cycle sends it again."""
    from diagnosis.tasks import estimate_impact  # noqa: PLC0415 -- as above

    def send() -> None:
        estimate_impact.delay(recommendation_id)

    transaction.on_commit(send, robust=True)
