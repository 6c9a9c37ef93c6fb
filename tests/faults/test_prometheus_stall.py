"""A Prometheus that stops answering under a Prometheus-backed cluster whose cycles a real worker
and beat run (issue #18: "during a 100 s Prometheus stall the overview said OK / Fresh"). The
stand-in for the stall is SIGSTOP to the test's own Prometheus: connections are accepted, nothing
answers. Each cycle then gives up at its deadline, well inside its lock's life, and is a failed
row saying so; the API calls the data stale and the cluster in error; nothing is resolved; once
Prometheus answers again the next cycle is good (and judges afresh: the simulator's step clock
has moved on by then, so what it resolves is no loss).

The rest of the Prometheus faults run the same cycle path in-process, against a real Prometheus:
killed (tests/app/records/test_prometheus_cycle.py::
test_prometheus_down_fails_the_cycle_and_keeps_the_last_good_data and
test_the_page_and_the_api_say_the_collection_failed), part of the GPUs silent
(test_missing_metrics_are_named_on_the_page_not_shown_as_healthy, and per subject
tests/app/test_not_judged.py), 5xx, refused queries and warnings
(tests/app/records/test_prometheus_failures.py)."""

from __future__ import annotations

import time

import pytest

from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import ClusterCycle, Finding
from tests.faults.conftest import good_cycles, row_counts, wait_until
from tests.support.prometheus_fixtures import sim_cluster
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db(transaction=True)]

STALL_S = 6  # three cycle periods without an answer
RECOVERY_S = 30


@pytest.fixture
def prometheus_cluster(make_cluster, make_prometheus, planted_history):
    """The simulator's small scenario, its GPU metrics from a Prometheus of the test's own that
    gives up on a query after 1 s and on a collection after 2 s."""
    server = make_prometheus()
    spec = sim_cluster(planted_history.t0, name="stallprom", url=server.url)
    cluster = make_cluster(
        spec.name,
        scheduler_kind="sim",
        scheduler_config=spec.scheduler_config,
        metrics_kind="prometheus",
        metrics_config={
            **spec.metrics_config,
            "timeout_s": 1,
            "retries": 0,
            "backoff_s": 0,
            "deadline_s": 2,
        },
    )
    yield server, cluster
    sim_runtime.forget(spec.name)


def test_a_stalled_prometheus_fails_each_cycle_visibly_and_the_next_good_one_follows(
    fault_stack, prometheus_cluster, alice
) -> None:
    server, cluster = prometheus_cluster
    worker = fault_stack.start_worker()
    fault_stack.start_beat()
    wait_until(lambda: good_cycles(cluster), "a good cycle before the stall", 40)
    findings = set(Finding.objects.filter(cluster=cluster).values_list("id", "state"))
    before = row_counts(cluster)
    client = logged_in_client(alice)

    server.pause()
    stalled = time.monotonic()
    try:
        failed = wait_until(
            lambda: ClusterCycle.objects.filter(
                cluster=cluster, ok=False, error__contains="did not answer"
            ).first(),
            "a failed cycle naming the stall",
            15,
        )
        seen_s = time.monotonic() - stalled
        api = wait_until(
            lambda: (
                (answer := client.get(f"/api/clusters/{cluster.pk}/").json())["stale"] and answer
            ),
            "the API to call the data stale",
            15,
        )
        page = client.get(f"/clusters/{cluster.name}/").content.decode()
        time.sleep(max(0.0, STALL_S - (time.monotonic() - stalled)))  # the fault: it stays stalled
        during = row_counts(cluster)
        findings_during = set(Finding.objects.filter(cluster=cluster).values_list("id", "state"))
    finally:
        server.resume()
    resumed = time.monotonic()
    wait_until(
        lambda: len(good_cycles(cluster)) > during["cycles"], "a good cycle after", RECOVERY_S
    )
    recovered_s = time.monotonic() - resumed
    print(
        f"fault matrix: prometheus stalled {resumed - stalled:.1f} s: a failed cycle after "
        f"{seen_s:.1f} s ({failed.error[:80]!r}), API {api['status']} / stale; a good cycle "
        f"{recovered_s:.1f} s after it answered; rows before {before}, during {during}"
    )

    assert failed.seconds < 5  # gave up at its deadline, well inside the lock's life
    assert api["status"] == "error"
    assert api["status_message"].startswith("metrics source (prometheus) failed")
    assert "The last collection failed" in page
    assert during["cycles"] == before["cycles"]  # no cycle passed off stalled data as good
    assert during["skipped or failed cycles"] > before["skipped or failed cycles"]
    assert findings_during == findings  # nothing resolved (or opened) while it was stalled
    assert "gone at release" not in worker.text()  # no cycle outlived its lock
    assert worker.alive()
