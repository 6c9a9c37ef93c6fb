"""The Celery app of gpuobs: configuration from Django settings (``CELERY_*``), queues and routes.

Queues (docs/operations.md): ``collect`` (reading schedulers and metrics), ``diagnose`` (cycles,
rules, accounting), ``actuate`` (changes to schedulers), ``impact`` (recommendations' impact
replays), and ``celery`` for everything else. A task is routed by the start of its function
name, so a new task needs no routing entry of its own.
"""

import os

from celery import Celery
from django.conf import settings
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")

DEFAULT_QUEUE = "celery"

# (start of the task's function name, queue), first match wins.
QUEUE_BY_TASK_PREFIX: tuple[tuple[str, str], ...] = (
    ("collect_", "collect"),
    ("run_cycle", "diagnose"),  # run_cycles (the beat fan-out) and run_cycle (one cluster)
    ("diagnose_", "diagnose"),
    ("actuate_", "actuate"),
    ("estimate_", "impact"),  # impact estimates, apart from the cycle (issue #17)
)
QUEUES: tuple[str, ...] = (DEFAULT_QUEUE, "collect", "diagnose", "actuate", "impact")


def queue_for_task(task_name: str) -> str:
    """The queue a task goes to, from the start of its function name (the last dotted part)."""
    function_name = task_name.rpartition(".")[2]
    for prefix, queue in QUEUE_BY_TASK_PREFIX:
        if function_name.startswith(prefix):
            return queue
    return DEFAULT_QUEUE


def route_task(name: str, args, kwargs, options, task=None, **kw) -> dict[str, str]:
    """Celery router (``task_routes``) that applies :func:`queue_for_task`."""
    return {"queue": queue_for_task(name)}


app = Celery("gpuobs")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_queues=[Queue(name, routing_key=name) for name in QUEUES],
    task_default_queue=DEFAULT_QUEUE,
    task_routes=(route_task,),
)
app.autodiscover_tasks()


@app.on_after_configure.connect
def schedule_diagnosis_cycles(sender: Celery, **kwargs) -> None:
    """Beat runs ``diagnosis.tasks.run_cycles`` every GPUOBS_CYCLE_SECONDS (one beat only)."""

    seconds = settings.GPUOBS_CYCLE_SECONDS
    sender.add_periodic_task(
        seconds,
        sender.signature("diagnosis.tasks.run_cycles"),
        name="diagnosis cycles",
        expires=seconds,  # a fan-out that waited a whole period is stale: the next one replaces it
    )


@app.on_after_configure.connect
def schedule_report_subscriptions(sender: Celery, **kwargs) -> None:
    """Beat checks hourly for fairness reports due by email (weekly or monthly subscriptions)."""
    sender.add_periodic_task(
        3600,
        sender.signature("diagnosis.tasks.send_report_subscriptions"),
        name="fairness report subscriptions",
        expires=3600,
    )
