"""In the embedded mode impact estimates never run inside a cycle (issue #35): the cycle returns
with its impacts pending and deferred in the process; a long-running process (the demo's loop)
runs them afterwards, bounded by the time it has; a one-shot command says it left them pending
(diagnosis/actions/enqueue.py, docs/operations.md "Impact estimates")."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from io import StringIO

import pytest

from diagnosis.actions import enqueue
from diagnosis.management.deferred_impacts import write_deferred_note
from diagnosis.models import Cluster, Recommendation
from tests.support.records import run_cycles, seed_demo_cluster

pytestmark = pytest.mark.django_db

STEP_S = 600
FIRST_FRAGMENTATION_CYCLE = 3  # the seed scenario's hpo burst is blocked from 0:30


@pytest.fixture
def embedded(settings, celery_eager) -> Iterator[None]:
    """Tasks in-process with the embedded mode's default, and this process's list emptied."""
    settings.GPUOBS_EMBEDDED_IMPACTS = "deferred"
    settings.GPUOBS_IMPACT_REDUCED_FROM_GPUS = 0  # one seed, one hour: a short test
    enqueue._deferred.clear()
    yield
    enqueue._deferred.clear()


@pytest.fixture
def demo(db) -> Iterator[Cluster]:
    with seed_demo_cluster("demo-embedded-impacts", STEP_S) as cluster:
        yield cluster


def methods(cluster: Cluster) -> list[str]:
    return sorted(
        r.impact.get("method", "") for r in Recommendation.objects.filter(cluster=cluster)
    )


def test_a_cycle_returns_before_its_impacts_run_and_they_run_afterwards(
    embedded, demo, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        cycle = run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)

    queued = cycle.recommendations["impact_queued"]
    assert queued >= 1
    assert "simulated" not in methods(demo)  # the cycle ran none of them
    assert enqueue.deferred_impacts() >= queued

    assert enqueue.run_deferred_impacts(until=time.monotonic()) == 0  # no time left: none runs
    left = enqueue.deferred_impacts()
    assert enqueue.run_deferred_impacts() == left  # the idle moment: every one of them
    assert enqueue.deferred_impacts() == 0
    assert "simulated" in methods(demo)


def test_inline_runs_them_where_they_are_sent(
    embedded, settings, demo, django_capture_on_commit_callbacks
) -> None:
    settings.GPUOBS_EMBEDDED_IMPACTS = "inline"
    with django_capture_on_commit_callbacks(execute=True):
        run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    assert enqueue.deferred_impacts() == 0
    assert "simulated" in methods(demo)


def test_the_list_is_bounded_and_a_one_shot_command_says_what_it_left(embedded) -> None:
    for recommendation_id in range(enqueue.DEFERRED_LIMIT + 10):
        enqueue.send_impact(recommendation_id)
        enqueue.send_impact(recommendation_id)  # sent twice, kept once
    assert enqueue.deferred_impacts() == enqueue.DEFERRED_LIMIT

    out = StringIO()
    write_deferred_note(out)
    assert f"{enqueue.DEFERRED_LIMIT} impact estimate(s) left pending" in out.getvalue()
    enqueue._deferred.clear()
    quiet = StringIO()
    write_deferred_note(quiet)
    assert quiet.getvalue() == ""


def test_with_workers_the_estimate_is_sent_not_deferred(settings, monkeypatch) -> None:
    settings.GPUOBS_EMBEDDED_IMPACTS = "deferred"
    sent = []
    monkeypatch.setattr(enqueue, "send_task", lambda name, args: sent.append((name, args)))
    conf = enqueue.current_app.conf
    saved, conf.task_always_eager = conf.task_always_eager, False
    enqueue._deferred.clear()
    try:
        enqueue.send_impact(7)
    finally:
        conf.task_always_eager = saved
    assert sent == [(enqueue.ESTIMATE_IMPACT, (7,))]
    assert enqueue.deferred_impacts() == 0


def test_the_web_process_runs_them_in_a_thread_of_its_own(embedded, monkeypatch) -> None:
    done = threading.Event()
    ran = []

    def estimate(name: str, args: tuple) -> None:
        ran.append((name, args, threading.current_thread().name))
        done.set()

    monkeypatch.setattr(enqueue, "send_task", estimate)
    assert enqueue.run_impacts_in_background()
    try:
        enqueue.send_impact(11)  # what the request's commit does
        assert done.wait(60), "the background thread ran no estimate"
    finally:
        enqueue.stop_impacts_in_background()
    assert ran == [(enqueue.ESTIMATE_IMPACT, (11,), "gpuobs-impacts")]
    assert enqueue.deferred_impacts() == 0


def test_with_workers_no_thread_is_started(settings) -> None:
    settings.GPUOBS_EMBEDDED_IMPACTS = "inline"
    assert not enqueue.run_impacts_in_background()
