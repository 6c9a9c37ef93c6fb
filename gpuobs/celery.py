"""The Celery app of gpuobs: configuration from Django settings (``CELERY_*``), queues and routes.

Queues (docs/operations.md): ``collect`` (reading schedulers and metrics), ``diagnose`` (cycles,
rules, accounting), ``actuate`` (changes to schedulers), ``impact`` (recommendations' impact
replays), and ``celery`` for everything else. A task is routed by the start of its function
name, so a new task needs no routing entry of its own. The cycles of a cluster whose scheduler
adapter keeps a list/watch mirror (Kubernetes) go to a mirror queue instead
(:func:`cycle_queue`).
"""

import os

from celery import Celery, signals
from django.conf import settings
from kombu import Queue

from gpuobs import tracing
from gpuobs.logs import configure_celery

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


MIRROR_QUEUE_PREFIX = "mirror-"


def mirror_queue(cluster_id: int, queue_count: int) -> str:
    """The mirror queue of a cluster: ``mirror-<cluster id mod queue_count>``. Each is consumed
    by one single-process worker (``--concurrency 1``), the one process that keeps the mirrors
    of its clusters: one LIST per resource per cluster and worker start."""
    return f"{MIRROR_QUEUE_PREFIX}{cluster_id % queue_count}"


def mirror_queues(queue_count: int) -> tuple[str, ...]:
    """Every mirror queue (``mirror-0`` ... ``mirror-<queue_count - 1>``)."""
    return tuple(f"{MIRROR_QUEUE_PREFIX}{index}" for index in range(queue_count))


def cycle_queue(cluster_id: int, *, mirrored: bool, mirror_queue_count: int) -> str:
    """The queue of a cluster's ``run_cycle``: its mirror queue when its adapter keeps a mirror
    and mirror queues are on (``GPUOBS_MIRROR_QUEUES`` > 0), else ``diagnose``."""
    if mirrored and mirror_queue_count > 0:
        return mirror_queue(cluster_id, mirror_queue_count)
    return queue_for_task("run_cycle")


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
# The worker and beat log as the web does (gpuobs/logs.py): Django's LOGGING, not Celery's own
# format; the request id travels in the task headers.
signals.setup_logging.connect(configure_celery)


@app.on_after_configure.connect
def schedule_diagnosis_cycles(sender: Celery, **kwargs) -> None:
    """Beat runs ``diagnosis.tasks.run_cycles`` every GPUOBS_CYCLE_SECONDS, and with it the worker
    heartbeat, the stuck-apply sweep and the sweeps of stored alert, event and topology batches no
    task took. No absolute ``expires``: a worker whose clock runs fast would drop every message;
    the cycle itself drops a stale fan-out by the database's clock.
    A second beat is harmless: a cluster's cycle starts at most once per interval."""

    seconds = settings.GPUOBS_CYCLE_SECONDS
    for name, task in (
        ("diagnosis cycles", "diagnosis.tasks.run_cycles"),
        ("stuck apply sweep", "diagnosis.tasks.sweep_stuck_applies"),
        ("alert batch sweep", "diagnosis.tasks.sweep_alert_batches"),
        ("event and topology batch sweep", "diagnosis.tasks.sweep_cluster_batches"),
    ):
        sender.add_periodic_task(seconds, sender.signature(task), name=name)
    # every GPUOBS_HEARTBEAT_SECONDS (at most 15 s): a dead worker or beat shows within 50 s
    sender.add_periodic_task(
        settings.GPUOBS_HEARTBEAT_SECONDS,
        sender.signature("diagnosis.tasks.record_worker_heartbeat"),
        name="worker heartbeat",
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


@signals.worker_init.connect
def start_tracing(sender=None, **kwargs) -> None:
    """Spans of the tasks this worker runs and sends, when GPUOBS_OTLP_ENDPOINT is set
    (gpuobs/tracing.py); nothing is imported when it is not."""
    tracing.configure("worker")


@signals.worker_init.connect
def build_registries(sender=None, **kwargs) -> None:
    """A duplicate rule or generator id stops the worker at its start (diagnosis/apps.py)."""
    from diagnosis.apps import build_plugin_registries  # noqa: PLC0415 -- Django is ready

    build_plugin_registries()


# -- beat's heartbeat (diagnosis/actions/upkeep/health.py) -----------------------------------------

_in_beat = False


@signals.beat_init.connect
def mark_beat_process(sender=None, **kwargs) -> None:
    global _in_beat
    _in_beat = True


@signals.after_task_publish.connect
def beat_heartbeat(sender=None, **kwargs) -> None:
    """In the beat process, every task sent is a heartbeat of beat (``/healthz?deep=1``)."""
    if _in_beat:
        from diagnosis.actions.upkeep.health import write_heartbeat  # noqa: PLC0415 -- Django is ready

        write_heartbeat("beat", task=sender)


@app.on_after_configure.connect
def schedule_retention(sender: Celery, **kwargs) -> None:
    """Beat prunes what retention no longer keeps every GPUOBS_RETENTION_SECONDS (issue #17)."""
    seconds = settings.GPUOBS_RETENTION_SECONDS
    sender.add_periodic_task(
        seconds, sender.signature("diagnosis.tasks.prune_retention"), name="retention"
    )
