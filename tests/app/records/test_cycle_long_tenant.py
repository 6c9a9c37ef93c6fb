"""Issue #32 item 9: a tenant named with 200 characters reached ``record_cycle`` (a snapshot that
no collection cleaned) and was dropped without a word: no Tenant or Queue row, its jobs without a
tenant, the fairness link a 404. It is now kept, clipped with a hash of its whole name (the same
tenant every cycle, as a collection clips it), and the cycle and the cluster's status say so.

The name's shape: Slurm accounts and YARN queue paths have no short limit; a Kubernetes
namespace has 63 characters, a label value 63, a Volcano queue (an object name) 253."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Cluster, Job, Queue, Tenant, TenantRollup
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db

LONG = "research-" + "x" * 191  # 200 characters


def long_tenant_snapshot(minutes_later: int = 0):
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes_later), cluster="long")
    builder.node("gpu-001").queue("deep", tenant=LONG)
    builder.job("train-1", tenant=LONG, queue="deep", node="gpu-001")
    return builder.build()


def test_a_200_character_tenant_is_kept_with_a_stable_name_and_its_jobs_have_it():
    cluster = Cluster.objects.create(name="long")

    first = record_cycle(cluster, long_tenant_snapshot())
    record_cycle(cluster, long_tenant_snapshot(minutes_later=1))

    tenant = Tenant.objects.get(cluster=cluster)
    assert len(tenant.name) == 128
    assert tenant.name.startswith("research-xxx")
    assert Queue.objects.get(cluster=cluster, name="deep").tenant == tenant
    assert Job.objects.get(cluster=cluster, external_id="train-1").tenant == tenant
    rollups = TenantRollup.objects.filter(cluster=cluster)
    assert rollups.count() == 2  # both cycles: one tenant, not a new one each cycle
    assert set(rollups.values_list("tenant_id", flat=True)) == {tenant.pk}
    assert any("tenant: 200 characters clipped to 128" in p for p in first.source["repaired"])


def test_the_clipped_tenant_is_said_in_the_status_the_admin_reads():
    cluster = Cluster.objects.create(name="long")

    record_cycle(cluster, long_tenant_snapshot())

    cluster.refresh_from_db()
    assert cluster.status == "degraded"
    assert "repaired to be stored" in cluster.status_message
    assert "200 characters clipped to 128" in cluster.status_message


def test_the_clipped_tenants_fairness_page_answers(client, alice):
    cluster = Cluster.objects.create(name="long")
    record_cycle(cluster, long_tenant_snapshot())
    tenant = Tenant.objects.get(cluster=cluster)
    client.force_login(alice)

    answer = client.get(reverse("diagnosis:tenant", args=[cluster.name, tenant.name]))

    assert answer.status_code == 200
    assert tenant.name.encode() in answer.content


def test_a_snapshot_whose_names_fit_is_recorded_as_it_came():
    cluster = Cluster.objects.create(name="long")
    builder = SnapshotBuilder(cluster="long").node("gpu-001").queue("deep", tenant="research")
    builder.job("train-1", tenant="research", queue="deep", node="gpu-001")

    cycle = record_cycle(cluster, builder.build())

    assert "repaired" not in cycle.source
    assert list(Tenant.objects.filter(cluster=cluster).values_list("name", flat=True)) == [
        "research"
    ]
