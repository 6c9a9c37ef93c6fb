"""An Alertmanager webhook burst (issue #29, item 1): gunicorn with three workers, as the image
runs it, takes a burst of 100-alert batches from one sender while a reader loads the overview.
The receiver only validates and stores each batch (202), a Celery worker reads them into
incidents; the overview stays quick, and once the worker is through every alert is one incident.

Scaled for the shared 2-core machine (BURST_RATE posts a second for BURST_S seconds); the
environment may set the issue's full size, ``GPUOBS_BURST_RATE=10 GPUOBS_BURST_S=30`` (with
``GPUOBS_BURST_WORKERS=2``, as the issue ran it, ``GPUOBS_BURST_DRAIN_S``, how long the
workers may take to read every batch, and ``GPUOBS_BURST_WORKER_NICE``, the workers' CPU
niceness where they share the web's cores), whose measured figures are in docs/operations.md's
matrix."""

from __future__ import annotations

import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import requests
from django.conf import settings

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import InboundAlertBatch, InboundState, Incident, Snapshot
from tests.faults.conftest import row_counts, wait_until
from tests.support.world import create_machine_user, logged_in_client, sender_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.lab("lab-burst")]

BURST_RATE = int(os.environ.get("GPUOBS_BURST_RATE", "3"))  # posts a second (the issue's: 10)
BURST_S = int(os.environ.get("GPUOBS_BURST_S", "10"))  # seconds (the issue's: 30)
WORKERS = int(os.environ.get("GPUOBS_BURST_WORKERS", "1"))
DRAIN_S = int(os.environ.get("GPUOBS_BURST_DRAIN_S", "240"))
WORKER_NICE = int(os.environ.get("GPUOBS_BURST_WORKER_NICE", "0"))
ALERTS_PER_POST = 100
DISTINCT = 200  # fingerprints the burst draws its alerts from: Alertmanager re-sends groups
# Wall-clock bounds that hold on a loaded, shared 2-core machine (one post of 30 once took 2.14 s
# there, p50 75 ms): the typical post and overview load stay quick, and none comes near
# gunicorn's 30 s worker timeout. That the request itself reads no alert (posts took 11-27 s
# inside it) is asserted by counting its queries, tests/app/oncall/test_alert_batches.py.
POST_P50_S = 1.0  # the median post (p50 75-146 ms measured; 11-27 s before)
OVERVIEW_P50_S = 1.0  # the bound, on the median load (p95 0.15-0.22 s measured)
ANSWER_MAX_S = 15.0  # any one post or overview load: half gunicorn's worker timeout


def batch(number: int, nodes: list[str], starts: datetime) -> dict:
    alerts = []
    for i in range(ALERTS_PER_POST):
        k = (number * 37 + i) % DISTINCT
        alerts.append(
            {
                "status": "firing",
                "labels": {
                    "alertname": "GPUXidError",
                    "cluster": "lab-burst",
                    "Hostname": nodes[k % len(nodes)],
                    "gpu": str(k % 8),
                    "err_code": "79",
                    "burst": str(k),
                },
                "annotations": {"summary": "Xid 79"},
                "startsAt": (starts + timedelta(seconds=k)).isoformat(),
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "",
                "fingerprint": f"burst{k:011d}",
            }
        )
    return {
        "version": "4",
        "status": "firing",
        "receiver": "gpuobs",
        "groupKey": "{}",
        "alerts": alerts,
    }


@pytest.mark.timeout(BURST_S + DRAIN_S + 120)
def test_a_webhook_burst_leaves_the_overview_quick_and_stores_every_alert_once(
    fault_stack, lab, alice
) -> None:
    run_cluster_cycle(lab)  # a snapshot, its jobs and an overview to show
    document = Snapshot.objects.filter(cluster=lab).latest("as_of").load_document()
    nodes = sorted(node["name"] for node in document["nodes"])
    token = sender_token(create_machine_user("alertmanager"), "alerts", lab)
    cookie = logged_in_client(alice).cookies[settings.SESSION_COOKIE_NAME].value
    web = fault_stack.start_web()
    fault_stack.start_workers(
        WORKERS, prefix=["nice", "-n", str(WORKER_NICE)] if WORKER_NICE else None
    )
    overview = f"{web.url}/clusters/{lab.name}/"
    reader = requests.Session()
    reader.cookies.set(settings.SESSION_COOKIE_NAME, cookie)
    assert reader.get(overview, timeout=10).status_code == 200
    before = row_counts(lab)

    stop = threading.Event()
    overview_s: list[float] = []
    overview_codes: list[int] = []

    def read_overview() -> None:
        while not stop.is_set():
            started = time.monotonic()
            code = reader.get(overview, timeout=30).status_code
            overview_s.append(time.monotonic() - started)
            overview_codes.append(code)

    starts = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    bodies = [batch(n, nodes, starts) for n in range(BURST_RATE * BURST_S)]

    def post(number: int) -> tuple[int, float]:
        time.sleep(max(0.0, begun + number / BURST_RATE - time.monotonic()))  # the burst's pace
        started = time.monotonic()
        response = requests.post(
            f"{web.url}/api/v1/alertmanager",
            json=bodies[number],
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        return response.status_code, time.monotonic() - started

    reading = threading.Thread(target=read_overview, daemon=True)
    reading.start()
    begun = time.monotonic()
    with ThreadPoolExecutor(max_workers=BURST_RATE * 2) as pool:
        posts = list(pool.map(post, range(len(bodies))))
    burst_s = time.monotonic() - begun
    stop.set()
    reading.join(timeout=30)

    stored = InboundAlertBatch.objects.count()
    p95 = statistics.quantiles(overview_s, n=20)[18] if len(overview_s) > 1 else overview_s[0]
    post_s = sorted(s for _, s in posts)
    print(
        f"fault matrix: webhook burst {len(bodies)} posts x {ALERTS_PER_POST} alerts in "
        f"{burst_s:.1f} s: posts p50 {statistics.median(post_s) * 1000:.0f} ms, max "
        f"{post_s[-1] * 1000:.0f} ms; overview p50 {statistics.median(overview_s):.2f} s, p95 "
        f"{p95:.2f} s over {len(overview_s)} loads; {stored} batches stored",
        flush=True,
    )
    drained = wait_until(
        lambda: not InboundAlertBatch.objects.exclude(state=InboundState.DONE).exists(),
        f"{WORKERS} worker(s) to read every stored batch",
        DRAIN_S,
    )
    drained_s = time.monotonic() - begun
    print(
        f"fault matrix: every batch read {drained_s:.1f} s after the burst began by {WORKERS} "
        f"worker(s) at nice {WORKER_NICE}; rows before {before}, after {row_counts(lab)}",
        flush=True,
    )

    # what was stored first, then how quickly: a slow machine still checks every alert once
    assert drained
    assert {code for code, _ in posts} == {202}
    assert stored == len(bodies)
    incidents = Incident.objects.filter(cluster=lab, source="alertmanager")
    assert incidents.count() == DISTINCT  # every alert once, however often it was delivered
    deliveries = sum(i.details["deliveries"] for i in incidents)
    assert deliveries == len(bodies) * ALERTS_PER_POST
    assert set(overview_codes) == {200}
    assert statistics.median(post_s) < POST_P50_S
    assert statistics.median(overview_s) < OVERVIEW_P50_S
    assert max(post_s[-1], max(overview_s)) < ANSWER_MAX_S  # the web kept answering
