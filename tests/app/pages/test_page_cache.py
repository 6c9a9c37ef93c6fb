"""The pages' cache of rendered fragments (diagnosis/pages/support/page_cache.py, issue #17): a
reader
never gets a fragment rendered for another scope, a second request is answered from the cache,
and whatever changes what a page shows (a new cycle, an incident opened between cycles) shows.

The world: cluster ``cached`` with tenants ``hpo`` and ``vision``, each running one job on a GPU
that reported Xid 79 (two ``xid`` findings, one per tenant); mallory manages ``hpo`` only, alice
is an admin.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest
from django.conf import settings
from django.test import Client, override_settings

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Cluster, ClusterCycle, Incident, Tenant
from diagnosis.pages.support import page_cache
from diagnosis.reports.fairness_report import default_end
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

PERIOD = (
    f"from={(AS_OF - timedelta(hours=1)):%Y-%m-%dT%H:%MZ}"
    f"&to={(AS_OF + timedelta(minutes=5)):%Y-%m-%dT%H:%MZ}"
)
OVERVIEW = "/clusters/cached/"
FINDINGS = "/clusters/cached/findings/"
FAIRNESS = f"/clusters/cached/fairness/?{PERIOD}"


def snapshot(as_of, jobs=(("hpo-1", "hpo"), ("vision-1", "vision"))):
    """Node n1; each of ``jobs`` (id, tenant) on its own GPU, each GPU with a recent Xid 79."""
    b = SnapshotBuilder(as_of=as_of, cluster="cached").node("n1", gpus=8)
    b.queue("hpo").queue("vision")
    for index, (job_id, tenant) in enumerate(jobs):
        b.job(job_id, tenant=tenant, allocation=[("n1", [index])], gpus_per_pod=1)
        b.gpu("n1", index, xid=[(79, "1m")])
    return b.build()


@pytest.fixture
def cached(make_cluster, mallory) -> Cluster:
    cluster = make_cluster("cached", metrics_kind="none")
    record_cycle(cluster, snapshot(AS_OF))
    Tenant.objects.get(cluster=cluster, name="hpo").managers.add(mallory)
    return cluster


@pytest.fixture
def alice_client(alice) -> Client:
    return logged_in_client(alice)


@pytest.fixture
def mallory_client(mallory) -> Client:
    return logged_in_client(mallory)


def text(client: Client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


def open_xid_findings(html: str) -> int:
    """The overview's open-findings table: the ``all`` count of rule xid."""
    rows = re.findall(r'<td class="num"><a href="[^"]*\?rule=xid">(\d+)</a></td>', html)
    assert len(rows) == 1, rows
    return int(rows[0])


# -- scope ---------------------------------------------------------------------------------------


def test_a_manager_never_gets_the_admins_cached_findings_list(
    cached, alice_client, mallory_client
) -> None:
    assert "vision-1" in text(alice_client, FINDINGS)  # the admin's list, now cached

    assert "vision-1" not in text(mallory_client, FINDINGS)


def test_a_manager_never_gets_the_admins_cached_fairness_report(
    cached, alice_client, mallory_client
) -> None:
    assert 'data-tenant="vision"' in text(alice_client, FAIRNESS)

    assert 'data-tenant="vision"' not in text(mallory_client, FAIRNESS)


def test_a_manager_never_gets_the_admins_cached_overview(
    cached, alice_client, mallory_client
) -> None:
    assert open_xid_findings(text(alice_client, OVERVIEW)) == 2

    assert open_xid_findings(text(mallory_client, OVERVIEW)) == 1


def test_a_manager_who_loses_a_tenant_stops_seeing_it_at_once(
    cached, mallory, mallory_client
) -> None:
    Tenant.objects.get(cluster=cached, name="vision").managers.add(mallory)
    assert "vision-1" in text(mallory_client, FINDINGS)

    Tenant.objects.get(cluster=cached, name="vision").managers.remove(mallory)

    assert "vision-1" not in text(mallory_client, FINDINGS)


def test_no_fragment_holds_the_readers_name_or_a_csrf_token(
    cached, alice_client, monkeypatch
) -> None:
    stored: list[dict[str, Any]] = []
    real_set = page_cache._set

    def kept(key: str, value: dict[str, Any], seconds: int) -> None:
        stored.append(value)
        real_set(key, value, seconds)

    monkeypatch.setattr(page_cache, "_set", kept)

    for path in (OVERVIEW, FINDINGS, FAIRNESS):
        page = text(alice_client, path)
        assert "csrfmiddlewaretoken" in page  # the shell has both
        assert "alice" in page

    html = " ".join(str(value) for entry in stored for kind, value in entry.values())
    assert sum(kind == "html" for entry in stored for kind, _ in entry.values()) == 3
    assert "csrfmiddlewaretoken" not in html
    assert "alice" not in html


# -- hits and what changes them -------------------------------------------------------------------


@pytest.mark.parametrize("path", [OVERVIEW, FINDINGS, FAIRNESS])
def test_a_second_request_is_answered_from_the_cache(cached, alice_client, path) -> None:
    first = alice_client.get(path)
    second = alice_client.get(path)

    assert "findings_table" in first.context or "page" in first.context or "data" in first.context
    assert not {"findings_table", "page", "data"} & set(second.context.keys())
    strip = re.compile(r'name="csrfmiddlewaretoken" value="[^"]*"|data age.*|ran [^<]* ago')
    assert strip.sub("", second.content.decode()) == strip.sub("", first.content.decode())


def test_the_default_period_is_answered_from_the_cache_between_cycles(
    make_cluster, alice_client
) -> None:
    cluster = make_cluster("cached", metrics_kind="none")
    minute_ago = pd.Timestamp.now(tz="UTC").floor("s") - timedelta(minutes=1)
    record_cycle(cluster, snapshot(minute_ago))  # the newest data, recent: the period ends there

    first = alice_client.get("/clusters/cached/fairness/")
    second = alice_client.get("/clusters/cached/fairness/")

    assert "data" in first.context
    assert first.context["data"].period.end == minute_ago
    assert "data" not in second.context


def test_a_new_cycle_shows_its_findings(cached, alice_client) -> None:
    assert "vision-2" not in text(alice_client, FINDINGS)

    jobs = (("hpo-1", "hpo"), ("vision-1", "vision"), ("vision-2", "vision"))
    record_cycle(cached, snapshot(AS_OF + timedelta(minutes=1), jobs))

    assert "vision-2" in text(alice_client, FINDINGS)


def test_an_incident_reported_between_cycles_is_marked_on_the_cached_trend(
    cached, alice_client
) -> None:
    assert 'id="trend-marks"' not in text(alice_client, OVERVIEW)
    ran_at = ClusterCycle.objects.get(cluster=cached).ran_at

    Incident.objects.create(  # Alertmanager's report of a fault before the cycle ran
        cluster=cached,
        node="n1",
        fingerprint="alertmanager:late",
        summary="GPU fell off the bus",
        opened_at=ran_at - timedelta(seconds=5),
    )

    assert "GPU fell off the bus" in text(alice_client, OVERVIEW)


def test_each_language_gets_its_own_fragment(cached, alice_client) -> None:
    assert "Open findings" in text(alice_client, OVERVIEW)

    chinese = alice_client.get(OVERVIEW, headers={"accept-language": "zh-hans"})

    assert "Open findings" not in chinese.content.decode()


def test_the_cache_answers_from_the_real_redis(cached, alice_client, redis_url) -> None:
    in_redis = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": redis_url,
        "KEY_PREFIX": f"gpuobs-test-pages-{uuid.uuid4().hex}",  # this test's keys only
    }
    with override_settings(CACHES={**settings.CACHES, page_cache.CACHE: in_redis}):
        first = alice_client.get(FINDINGS)
        second = alice_client.get(FINDINGS)

    assert "page" in first.context
    assert "page" not in second.context


def test_a_page_renders_when_the_cache_is_down(cached, alice_client, monkeypatch) -> None:
    monkeypatch.setattr(page_cache, "_failed_at", None)
    down = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
    }
    with override_settings(CACHES={"default": down, page_cache.CACHE: down}):
        assert "vision-1" in text(alice_client, FINDINGS)
        assert page_cache._failed_at is not None  # and the next requests leave it alone


def test_a_cluster_gone_quiet_has_its_default_period_end_now(make_cluster) -> None:
    cluster = make_cluster("cached", metrics_kind="none")
    record_cycle(cluster, snapshot(AS_OF))
    now = AS_OF + timedelta(hours=1)

    assert default_end(cluster, now) == now
    assert default_end(cluster, AS_OF + timedelta(minutes=2)) == AS_OF
