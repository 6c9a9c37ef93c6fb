"""The little world of the outbound tests (/metrics, Grafana, Alertmanager, owner notices): cycles
of one cluster recorded at wall-clock snapshot times, so findings fire and resolve as they would in
production, and the machine users that scrape or receive.

    record_cycles(cluster, ["idle", "idle"])   # the idle job's idle-allocation fires at cycle 2

Each state names what the cluster looks like in that cycle (10 minutes apart, the last one
``end``): ``idle`` -- job ``idle-1`` of tenant team-a holds 8 GPUs at 1% util beside the busy
``train-2`` of team-b, and GPU a100-001/3 reports Xid 79 (a critical ``xid`` finding); ``busy``
-- ``idle-1`` works again (its finding goes; after ``keep_firing_for`` it resolves); ``gone`` --
``idle-1`` finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from rest_framework.authtoken.models import Token

from diagnosis.actions.oncall.alerts import open_or_update_incident_from_alert
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.edge.sources import alertmanager as am
from diagnosis.models import Cluster, ClusterCycle, Incident, Snapshot
from tests.support.builders import SnapshotBuilder, rfc3339
from tests.support.world import create_user

STEP = timedelta(minutes=10)
IDLE_JOB = "idle-1"


def snapshot(cluster: str, as_of: datetime, state: str):
    builder = SnapshotBuilder(as_of=as_of, cluster=cluster).pool("a100", nodes=3)
    builder.queue("team-a", tenant="team-a", weight=1).queue("team-b", tenant="team-b", weight=1)
    if state != "gone":
        util = 0.01 if state == "idle" else 0.9
        builder.job(IDLE_JOB, node="a100-000", tenant="team-a", queue="team-a", ran="3h", util=util)
    builder.job("train-2", node="a100-001", tenant="team-b", queue="team-b", ran="3h", util=0.9)
    if state == "idle":
        builder.gpu("a100-001", 3, xid=[(79, "2m")])
    builder.job("wait-3", state="pending", tenant="team-a", queue="team-a", pods=2, waited="1h")
    return builder.build()


def record_cycles(
    cluster: Cluster, states: Sequence[str], *, end: datetime | None = None
) -> ClusterCycle:
    """Record one cycle per state, ``STEP`` apart, the last at ``end`` (default now)."""
    end = end or datetime.now(UTC).replace(microsecond=0)
    cycle = None
    for i, state in enumerate(states):
        as_of = end - STEP * (len(states) - 1 - i)
        cycle = record_cycle(
            Cluster.objects.get(pk=cluster.pk),
            snapshot(cluster.name, as_of, state),
            collection={"coverage": 1.0, "judgeable": True},
        )
        assert cycle.ok, cycle.error
    return cycle


SCRAPER_PASSWORD = "scrape-Secret-42"


def open_xid_incident(cluster: Cluster, *, node: str = "a100-001", gpu: int = 3) -> Incident:
    """An Xid 79 incident, opened the way Alertmanager's webhook opens one."""
    starts = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    raw = {
        "status": "firing",
        "labels": {
            "alertname": "GPUXidError",
            "cluster": cluster.name,
            "Hostname": node,
            "gpu": str(gpu),
            "err_code": "79",
        },
        "annotations": {"summary": f"Xid 79 on {node}"},
        "startsAt": rfc3339(starts),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus.example:9090/graph",
        "fingerprint": f"xid-{node}-{gpu}",
    }
    payload = {
        "version": "4",
        "groupKey": "{}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "gpuobs",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": [raw],
    }
    (alert,) = am.parse_webhook(payload).alerts
    gpu_alert = am.classify(alert, am.AlertRules())
    document = Snapshot.objects.filter(cluster=cluster).latest().load_document()
    open_or_update_incident_from_alert(cluster, alert, gpu_alert, snapshot_document=document)
    return Incident.objects.get(cluster=cluster, fingerprint__endswith=f"xid-{node}-{gpu}")


def scraper(username: str = "prometheus", password: str = SCRAPER_PASSWORD) -> tuple[str, str]:
    """A viewer machine user for Prometheus; returns (token, password)."""
    user = create_user(username, roles=("viewer",))
    user.set_password(password)
    user.save()
    return Token.objects.create(user=user).key, password
