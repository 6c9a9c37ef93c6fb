"""Posting to a receiver that stores a batch for a worker (the Alertmanager webhook, scheduler
events, node topology) in a test: the receiver answers 202 and sends the task that reads the
batch on commit; here that task runs in-process, as in the embedded mode."""

from __future__ import annotations

from typing import Any

from django.test import TestCase

from gpuobs import celery_app


def deliver(client: Any, path: str, body: Any, **options: Any) -> Any:
    """``client.post(path, body, **options)``, with the stored batch read before it returns."""
    conf = celery_app.conf
    saved = conf.task_always_eager
    conf.task_always_eager = True
    try:
        with TestCase.captureOnCommitCallbacks(execute=True):
            return client.post(path, body, **options)
    finally:
        conf.task_always_eager = saved


def deliver_alerts(client: Any, body: Any, path: str = "/api/v1/alertmanager") -> Any:
    """``client.post`` of a webhook body, with the batch read before it returns."""
    return deliver(client, path, body, format="json")
