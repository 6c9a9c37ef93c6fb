"""A small recorded cluster for the fairness report's tests: tenants ``alpha`` and ``bravo``
through three real diagnosis cycles (``record_cycle``), with numbers small enough to check by
hand (see :func:`record_two_tenant_cycles`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Cluster
from tests.support.builders import SnapshotBuilder

START = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
STEP = timedelta(seconds=60)
CYCLES = 3
# A period covering the three cycles and the jobs' starts (an hour before the first cycle).
PERIOD = {"from": "2026-11-29T06:00:00Z", "to": "2026-11-29T08:02:00Z"}


def two_tenant_snapshot(as_of: datetime, *, with_b1: bool = True, idle: bool = False):
    """16 usable GPUs (24 with ``idle``: a third node). alpha deserves 12 and runs alpha-1 (8
    GPUs, waited 1 h); bravo deserves 4, runs bravo-1 (4 GPUs, waited 2 h) and waits for
    bravo-2 (8 GPUs). With ``idle``, alpha-idle and bravo-idle hold 4 GPUs each at util 0.01
    (idle-allocation findings, one per tenant)."""
    builder = (
        SnapshotBuilder(as_of=as_of, window_s=60, cluster="acme")
        .pool("a100", nodes=3 if idle else 2, gpus=8)
        .queue("alpha", deserved_gpus=12)
        .queue("bravo", deserved_gpus=4)
        .job(
            "alpha-1",
            tenant="alpha",
            gpus_per_pod=8,
            node="a100-000",
            waited="2h",
            ran="1h",
            util=0.9,
        )
        .job("bravo-2", tenant="bravo", state="pending", gpus_per_pod=8, waited="1h")
    )
    if with_b1:
        builder.job(
            "bravo-1", tenant="bravo", gpus_per_pod=4, node="a100-001", waited="3h", ran="1h"
        )
        builder.gpu("a100-001", 0, util=0.5)
    if idle:
        builder.job("alpha-idle", tenant="alpha", gpus_per_pod=4, node="a100-002", ran="2h")
        builder.job("bravo-idle", tenant="bravo", gpus_per_pod=4, node="a100-002", ran="2h")
        for index in range(8):
            builder.gpu("a100-002", index, util=0.01, fb_used_frac=0.05)
    return builder.build()


def record_two_tenant_cycles(name: str = "acme", *, idle: bool = False) -> Cluster:
    """Three cycles a minute apart. Each: usable 16 (without ``idle``); demand alpha 8, bravo
    12; deserved 12:4, so water-filling caps alpha at 8 and gives bravo the other 8. Per cycle
    alpha holds 8 GPUs (fair 8), bravo 4 (fair 8): usage 0.5 and 0.25, fair share 0.5 each,
    ratios 1 and 0.5, Jain's index 0.9."""
    cluster = Cluster.objects.create(name=name, enabled=False)
    for number in range(CYCLES):
        record_cycle(cluster, two_tenant_snapshot(START + number * STEP, idle=idle))
    return cluster
