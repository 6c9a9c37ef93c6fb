"""The dashboard pages: who may see them, what they show, and what they cost in queries.

Most tests read one simulated cluster built once for the module the way production builds it:
the seed scenario on the built-in simulator, one ``run_cluster_cycle`` per 10 simulated minutes
(30 cycles, 5 simulated hours, by which time every rule but ``xid`` has open findings and the
two injected Xids have come and gone). Its snapshots end at the wall-clock time the module
started, so its data is fresh; tests about staleness build clusters whose snapshots are old.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape

import pandas as pd
import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from diagnosis.actions.oncall.incidents import resolve_incident_by
from diagnosis.actions.records.cycles import record_cycle, run_cluster_cycle
from diagnosis.charts.figures import utilization_trend
from diagnosis.core.accounting import BUCKETS
from diagnosis.core.rules.registry import all_rules
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import Cluster, ClusterCycle, Finding, Incident
from diagnosis.pages.clusters import Freshness
from diagnosis.templatetags.gpuobs import evidence_table
from tests.support.builders import SnapshotBuilder

pytestmark = pytest.mark.django_db

SEED = "pages-seed"
CYCLES = 30
STEP_S = 600


def sim_config(cycles: int, *, ended_ago: timedelta = timedelta(0), scenario: str = "seed"):
    """A stepped seed-scenario config whose ``cycles``-th snapshot is ``ended_ago`` before now."""
    start = datetime.now(UTC) - ended_ago - timedelta(seconds=cycles * STEP_S)
    return {
        "scenario": scenario,
        "seed": 0,
        "clock": "step",
        "step_s": STEP_S,
        "started_at": start.replace(microsecond=0).isoformat(),
    }


def make_sim_cluster(name: str, cycles: int, **config) -> Cluster:
    cluster = Cluster.objects.create(
        name=name,
        scheduler_kind="sim",
        metrics_kind="sim",
        scheduler_config=sim_config(cycles, **config),
    )
    for _ in range(cycles):
        run_cluster_cycle(cluster)
    return cluster


@pytest.fixture(scope="module")
def seed(django_db_setup, django_db_blocker) -> Iterator[Cluster]:
    """The module's simulated cluster (committed once; deleted after the module)."""
    with django_db_blocker.unblock():
        sim_runtime.forget(SEED)
        cluster = make_sim_cluster(SEED, CYCLES)
    yield cluster
    with django_db_blocker.unblock():
        Cluster.objects.filter(pk=cluster.pk).delete()
        sim_runtime.forget(SEED)


@pytest.fixture
def fresh(settings):
    """Cycles every day: the module's data stays fresh however long the tests take."""
    settings.GPUOBS_CYCLE_SECONDS = 86_400


@pytest.fixture
def sim_clusters() -> Iterator[list[str]]:
    """Names of simulated clusters a test makes; their in-process simulators are dropped after."""
    names: list[str] = []
    yield names
    for name in names:
        sim_runtime.forget(name)


def finding(cluster: Cluster, rule_id: str, **filters) -> Finding:
    return Finding.objects.filter(cluster=cluster, rule_id=rule_id, **filters).order_by("id")[0]


def page_paths(cluster: Cluster) -> list[str]:
    frag = finding(cluster, "fragmentation")
    return [
        "/",
        f"/clusters/{cluster.name}/",
        f"/clusters/{cluster.name}/findings/",
        f"/clusters/{cluster.name}/findings/{frag.pk}/",
        f"/clusters/{cluster.name}/incidents/",
    ]


def text_of(response) -> str:
    """The page's text with tags and runs of white space collapsed (for phrase checks)."""
    html = response.content.decode()
    return plain(re.sub(r"<script.*?</script>", " ", html, flags=re.S))


def plain(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


# -- access --------------------------------------------------------------------------------------


def test_every_page_sends_anonymous_visitors_to_login(client: Client, seed) -> None:
    for path in page_paths(seed):
        response = client.get(path)

        assert response.status_code == 302, path
        assert response["Location"].startswith("/accounts/login/?next="), path


def test_every_page_renders_for_a_viewer(bob_client: Client, seed) -> None:
    for path in page_paths(seed):
        assert bob_client.get(path).status_code == 200, path


@pytest.mark.parametrize(
    "path",
    [
        "/clusters/nope/",
        "/clusters/nope/findings/",
        "/clusters/nope/incidents/",
        "/clusters/nope/findings/1/",
        "/clusters/pages-seed/findings/999999999/",
    ],
)
def test_unknown_cluster_or_finding_is_404(bob_client: Client, seed, path: str) -> None:
    assert bob_client.get(path).status_code == 404


def test_a_finding_is_only_found_under_its_own_cluster(
    bob_client: Client, seed, make_cluster
) -> None:
    make_cluster("other")
    frag = finding(seed, "fragmentation")

    assert bob_client.get(f"/clusters/other/findings/{frag.pk}/").status_code == 404


# -- the cluster list ----------------------------------------------------------------------------


def test_cluster_list_shows_headline_figures_and_links(bob_client: Client, seed, fresh) -> None:
    good = ClusterCycle.objects.filter(cluster=seed, ok=True).latest()
    open_findings = Finding.objects.filter(cluster=seed, state__in=["pending", "firing"])
    open_count = open_findings.count()
    critical = open_findings.filter(severity="critical").count()

    response = bob_client.get("/")

    text = text_of(response)
    assert 'href="/clusters/pages-seed/"' in response.content.decode()
    assert "1,024" in text
    assert f"{good.allocation_utilization * 100:.0f}%" in text
    assert f"{good.activity_utilization * 100:.0f}%" in text
    # the gang deadlock and the Xid GPUs still unhealthy (their xid findings stay open)
    assert critical >= 2
    assert f"{open_count} {critical} critical" in text
    assert "fresh" in text.lower()
    # the simulator is scheduler and metrics source: named once (issue #32 item 12)
    kinds = response.content.decode().split("data-kinds>", 1)[1].split("\n", 1)[0]
    assert kinds.count(seed.get_scheduler_kind_display()) == 1
    # and its unresolved incidents (the seed's Xid GPUs), linked to the incidents list
    incidents = Incident.objects.filter(cluster=seed).exclude(state="resolved").count()
    assert incidents >= 1
    assert (
        f'open-incidents"><a href="/clusters/{seed.name}/incidents/">{incidents}</a>'
        in response.content.decode()
    )


# -- the overview --------------------------------------------------------------------------------


def test_overview_shows_the_latest_cycles_figures(bob_client: Client, seed, fresh) -> None:
    good = ClusterCycle.objects.filter(cluster=seed, ok=True).latest()

    response = bob_client.get(f"/clusters/{SEED}/")

    text = text_of(response)
    assert "GPUs 1,024" in text
    assert f"Allocation {good.allocation_utilization * 100:.1f}%" in text
    assert f"Activity {good.activity_utilization * 100:.1f}%" in text
    assert "Stale data" not in text
    assert "Data age Fresh" in text


def test_overview_draws_the_gpu_hour_waterfall_from_our_static_files(
    bob_client: Client, seed
) -> None:
    html = bob_client.get(f"/clusters/{SEED}/").content.decode()

    assert (
        '<div class="chart" id="gpu-hours-waterfall" data-figure="gpu-hours-waterfall-figure"'
        in html
    )
    match = re.search(
        r'<script id="gpu-hours-waterfall-figure" type="application/json">(.*?)</script>',
        html,
        re.S,
    )
    figure = json.loads(match.group(1))
    [trace] = figure["data"]
    assert trace["type"] == "waterfall"
    assert trace["measure"][-1] == "total"
    assert len(trace["x"]) == len(BUCKETS) + 1
    assert '/static/vendor/plotly.min.js"' in html
    assert '/static/js/gpuobs-charts.js"' in html
    assert "cdn.plot.ly" not in html
    assert "<script>" not in html


def test_plotly_js_is_found_in_the_installed_plotly_package() -> None:
    path = finders.find("vendor/plotly.min.js")

    assert path
    assert path.endswith("plotly/package_data/plotly.min.js")
    with open(path, encoding="utf-8") as handle:
        assert "plotly.js" in handle.read(200)


def test_waterfall_sums_the_last_hour_of_cycles_as_gpu_hours(bob_client: Client, seed) -> None:
    # Cycles every 600 s with a 900 s window: each of the hour's 6 cycles stands for 600 s, so
    # the buckets add up to the capacity of one hour, 1,024 GPU-hours, not 6 × 900 s of it.
    breakdown = bob_client.get(f"/clusters/{SEED}/").context["breakdown"]

    assert [b.bucket for b in breakdown.buckets] == list(BUCKETS)
    assert breakdown.cycles == 6
    assert breakdown.complete
    assert breakdown.capacity_gpu_hours == pytest.approx(1024.0)
    assert sum(b.gpu_hours for b in breakdown.buckets) == pytest.approx(1024.0)
    assert breakdown.bucket("held-by-partial-gang").gpu_hours > 0


def test_each_waterfall_bucket_links_to_the_findings_behind_it(bob_client: Client, seed) -> None:
    response = bob_client.get(f"/clusters/{SEED}/")
    rows = {row.bucket.bucket: row for row in response.context["bucket_rows"]}
    deadlock = finding(seed, "gang-deadlock")

    partial = rows["held-by-partial-gang"]
    assert partial.list_url == (
        f"/clusters/{SEED}/findings/?rule=gang-deadlock&rule=gang-partial-hold&state=all"
    )
    assert any(link.url == f"/clusters/{SEED}/findings/{deadlock.pk}/" for link in partial.findings)
    assert rows["free-no-demand"].list_url is None
    html = response.content.decode()
    assert f'href="/clusters/{SEED}/findings/{deadlock.pk}/"' in html


def test_utilization_trend_covers_the_stored_cycles(bob_client: Client, seed) -> None:
    response = bob_client.get(f"/clusters/{SEED}/")

    assert response.context["trend_points"] == CYCLES
    assert 'id="utilization-trend"' in response.content.decode()


def test_overview_counts_open_findings_by_rule_and_severity(bob_client: Client, seed) -> None:
    response = bob_client.get(f"/clusters/{SEED}/")
    table = {row.rule_id: row for row in response.context["findings_table"]}
    expected = Finding.objects.filter(
        cluster=seed, rule_id="topology-misplacement", state__in=["pending", "firing"]
    ).count()

    assert table["topology-misplacement"].total == expected
    assert table["gang-deadlock"].cells[0] == (
        "critical",
        1,
        f"/clusters/{SEED}/findings/?rule=gang-deadlock&severity=critical",
    )
    # an Xid that left its window stays open while its GPU is still unhealthy
    open_xids = Finding.objects.filter(
        cluster=seed, rule_id="xid", severity="critical", state__in=["pending", "firing"]
    ).count()
    assert open_xids >= 1
    assert table["xid"].cells[0][:2] == ("critical", open_xids)


def test_failed_collection_shows_the_error_and_keeps_the_last_good_numbers(
    bob_client: Client, sim_clusters, fresh
) -> None:
    sim_clusters.append("flaky")
    cluster = make_sim_cluster("flaky", 3)
    good = ClusterCycle.objects.get(cluster=cluster, as_of=cluster.cycles.latest().as_of)
    cluster.scheduler_config = {**cluster.scheduler_config, "scenario": "nope"}
    cluster.save()
    failed = run_cluster_cycle(cluster)
    assert not failed.ok

    response = bob_client.get("/clusters/flaky/")

    text = text_of(response)
    assert "The last collection failed" in text
    assert "scheduler (sim) failed: its settings are invalid" in text  # not where (issue #12)
    assert "The figures below are the last good ones" in text
    assert "GPUs 1,024" in text
    assert f"Allocation {good.allocation_utilization * 100:.1f}%" in text
    assert response.context["good"].pk == good.pk
    assert "Error" in text_of(bob_client.get("/"))  # the cluster list says so too


def test_a_cluster_that_never_collected_says_so(bob_client: Client, sim_clusters) -> None:
    sim_clusters.append("broken")
    cluster = Cluster.objects.create(
        name="broken",
        scheduler_kind="sim",
        metrics_kind="sim",
        scheduler_config={"scenario": "nope"},
    )
    run_cluster_cycle(cluster)

    response = bob_client.get("/clusters/broken/")

    text = text_of(response)
    assert response.status_code == 200
    assert "scheduler (sim) failed: its settings are invalid" in text  # not where (issue #12)
    assert "No cycle has succeeded yet" in text
    assert "no data" in text_of(bob_client.get("/"))


def test_stale_data_is_labelled_stale_never_healthy(bob_client: Client, sim_clusters) -> None:
    sim_clusters.append("old")
    make_sim_cluster("old", 2, ended_ago=timedelta(hours=3))  # snapshots of 3 hours ago

    response = bob_client.get("/clusters/old/")

    text = text_of(response)
    assert "Stale data." in text
    assert "Data age Stale" in text
    assert "Fresh" not in text
    assert "stale (last known: OK)" in text
    assert "status-ok" not in response.content.decode()  # no green "OK" on old data
    listing = bob_client.get("/")
    assert "STALE" in text_of(listing).upper()
    assert "last known: OK" in text_of(listing)


def test_low_metrics_coverage_is_shown_with_what_it_costs(bob_client: Client, sim_clusters) -> None:
    sim_clusters.append("patchy")
    cluster = make_sim_cluster("patchy", 2)
    ClusterCycle.objects.filter(cluster=cluster).update(coverage=0.9)

    text = text_of(bob_client.get("/clusters/patchy/"))

    assert "Metrics coverage 90.0%" in text
    assert "the metric rules are not judged" in text


def test_coverage_is_not_shown_for_a_source_that_does_not_measure_it(
    bob_client: Client, sim_clusters
) -> None:
    sim_clusters.append("whole")
    make_sim_cluster("whole", 2)

    assert "Metrics coverage" not in text_of(bob_client.get("/clusters/whole/"))


def test_freshness_judges_the_newer_of_cycle_and_snapshot_age() -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def at(minutes: float) -> datetime:
        return now - timedelta(minutes=minutes)

    fresh = Freshness(now, 60, last_cycle_at=at(1), good_cycle_at=at(1), as_of=at(1.5))
    old_snapshot = Freshness(now, 60, last_cycle_at=at(0.5), good_cycle_at=at(0.5), as_of=at(30))
    failing = Freshness(now, 60, last_cycle_at=at(0.1), good_cycle_at=at(10), as_of=at(10))
    ahead = Freshness(
        now, 60, last_cycle_at=at(5), good_cycle_at=at(5), as_of=now + timedelta(hours=6)
    )

    assert not fresh.stale
    assert old_snapshot.stale  # cycles run, but the data they read is old
    assert failing.stale  # the last good cycle is old, however recent the failed ones
    assert ahead.snapshot_ahead
    assert ahead.stale
    assert Freshness(now, 60).stale
    assert not Freshness(now, 60).has_data


def test_overview_lists_rule_errors_and_what_was_not_judged(
    bob_client: Client, make_cluster, monkeypatch
) -> None:
    def boom(*args):
        raise RuntimeError("the xid catalog is unreadable")

    monkeypatch.setitem(all_rules(), "xid", dataclasses.replace(all_rules()["xid"], evaluate=boom))
    cluster = make_cluster("unjudged")
    builder = SnapshotBuilder(as_of=datetime.now(UTC).replace(microsecond=0), cluster="unjudged")
    builder.pool("a100", nodes=1).job("train-1", node="a100-000", waited="2h", util=0.9)
    record_cycle(cluster, builder.build())

    text = text_of(bob_client.get("/clusters/unjudged/"))

    assert "low-mfu: 1 job not judged (no MFU or tensor activity)" in text
    assert "xid failed: RuntimeError: the xid catalog is unreadable" in text
    assert "Degraded" in text


# -- findings ------------------------------------------------------------------------------------


def listed(client: Client, query: str = "") -> list[Finding]:
    response = client.get(f"/clusters/{SEED}/findings/{query}")
    assert response.status_code == 200
    return list(response.context["page"].object_list)


def test_findings_list_shows_open_findings_by_default(bob_client: Client, seed) -> None:
    shown = listed(bob_client)

    assert shown
    assert {f.state for f in shown} <= {"pending", "firing"}
    assert (
        len(shown) == Finding.objects.filter(cluster=seed, state__in=["pending", "firing"]).count()
    )
    assert shown[0].severity == "critical"  # most severe first


def test_findings_filter_by_state(bob_client: Client, seed) -> None:
    resolved = listed(bob_client, "?state=resolved")

    assert resolved
    assert {f.state for f in resolved} == {"resolved"}
    assert len(listed(bob_client, "?state=all")) == Finding.objects.filter(cluster=seed).count()


def test_findings_filter_by_rule_and_severity(bob_client: Client, seed) -> None:
    topology = listed(bob_client, "?rule=topology-misplacement")
    info = listed(bob_client, "?rule=topology-misplacement&severity=info")
    either = listed(bob_client, "?rule=low-mfu&rule=idle-allocation")

    assert topology
    assert {f.rule_id for f in topology} == {"topology-misplacement"}
    assert info
    assert {f.severity for f in info} == {"info"}
    assert len(info) < len(topology)
    assert {f.rule_id for f in either} == {"low-mfu", "idle-allocation"}
    assert listed(bob_client, "?rule=no-such-rule") == []


def test_findings_filter_by_pool(bob_client: Client, seed) -> None:
    in_pool = listed(bob_client, "?pool=a100&state=all")

    assert {"pool:a100", "jobs:sweep-gang-a+sweep-gang-b"} <= {f.subject for f in in_pool}
    assert "xid" not in {f.rule_id for f in in_pool}  # GPU findings name no pool
    assert listed(bob_client, "?pool=h100&state=all") == []


def test_findings_list_is_paginated_and_pages_keep_the_filters(
    bob_client: Client, seed, monkeypatch
) -> None:
    monkeypatch.setattr("diagnosis.pages.findings.FINDINGS_PER_PAGE", 2)
    total = Finding.objects.filter(cluster=seed).count()

    response = bob_client.get(f"/clusters/{SEED}/findings/?state=all&page=2")

    page = response.context["page"]
    assert page.number == 2
    assert page.paginator.count == total
    assert len(page.object_list) == 2
    assert "?state=all&amp;page=3" in response.content.decode()


def test_finding_detail_shows_evidence_history_and_the_rules_doc(bob_client: Client, seed) -> None:
    frag = finding(seed, "fragmentation")

    response = bob_client.get(f"/clusters/{SEED}/findings/{frag.pk}/")

    html = response.content.decode()
    text = text_of(response)
    assert '<table class="evidence">' in html
    assert '<table class="sub">' in html  # blocked_jobs, a list of dicts, as a sub-table
    assert frag.evidence["blocked_jobs"][0]["id"] in text
    assert frag.summary in text
    events = list(frag.events.all())
    assert len(re.findall(r"→", text)) >= len(events) >= 2
    assert f"{events[0].from_state or 'new'} → {events[0].to_state}" in text
    rule = all_rules()["fragmentation"]
    assert rule.title in text
    assert "How to fix" in text
    assert "binpack" in text


def test_evidence_renders_nested_values_readably() -> None:
    html = evidence_table(
        {
            "wait_s": 20400,
            "jobs": [{"id": "j1", "tenant": "t"}, {"id": "j2", "extra": True}],
            "codes": [13, 79],
            "histogram": {"0": 119, "1": 5},
            "note": None,
            "summary": "<b>not markup</b>",
        }
    )

    assert "20,400" in html
    assert "5.7 h" in html
    assert '<th scope="col" title="extra">Extra</th>' in html
    assert "yes" in html
    assert "13 , 79" in plain(html)
    assert '<table class="kv">' in html
    assert "&lt;b&gt;not markup&lt;/b&gt;" in html


# -- incidents -----------------------------------------------------------------------------------


def test_incidents_list_the_xid_incidents_with_the_catalogs_meaning(
    bob_client: Client, seed
) -> None:
    text = text_of(bob_client.get(f"/clusters/{SEED}/incidents/"))

    assert "GPU gpu-100/3" in text
    assert "GPU gpu-090/1" in text
    assert "GPU has fallen off the bus." in text  # Xid 79
    assert "Drain the node and reboot it" in text
    assert "Graphics Engine Exception." in text  # Xid 13
    assert "sweep-gang-b" not in text  # placed on gpu-090/1 after the Xid: not hit (issue #16)


def test_incidents_put_unresolved_ones_first(bob_client: Client, make_cluster, erin) -> None:
    cluster = make_cluster("xids")
    as_of = datetime.now(UTC).replace(microsecond=0)
    first = SnapshotBuilder(as_of=as_of - timedelta(hours=1), cluster="xids").pool("a100", nodes=2)
    first.gpu("a100-001", 2, xid=[(13, "1m")])
    record_cycle(cluster, first.build())
    old = Incident.objects.get(cluster=cluster)
    resolve_incident_by(old, erin)
    now = SnapshotBuilder(as_of=as_of, cluster="xids").pool("a100", nodes=2)
    now.job("train-9", node="a100-000", tenant="vision", xid=[(79, "2m")], util=0.9, ran="1h")
    record_cycle(cluster, now.build())

    rows = bob_client.get("/clusters/xids/incidents/").context["rows"]

    assert rows[0]["incident"].state == "open"
    assert rows[0]["info"].meaning == "GPU has fallen off the bus."
    assert rows[0]["tenants"] == ["vision"]
    assert rows[-1]["incident"] == old


# -- cost ----------------------------------------------------------------------------------------


def test_every_page_runs_a_bounded_number_of_queries(
    bob_client: Client, seed, django_assert_max_num_queries
) -> None:
    bob_client.get("/")  # the session is loaded once per request either way
    for path in page_paths(seed):
        # the overview: 13 with its trend's marks and their window (incidents opened, changes
        # applied), and the page cache's data version (diagnosis/pages/support/page_cache.py)
        with django_assert_max_num_queries(13 if path == f"/clusters/{seed.name}/" else 11):
            assert bob_client.get(path).status_code == 200


def test_a_cached_page_runs_fewer_queries(
    bob_client: Client, seed, django_assert_max_num_queries
) -> None:
    for path in (f"/clusters/{seed.name}/", f"/clusters/{seed.name}/findings/"):
        bob_client.get(path)
        # the session, the reader, their roles, the cluster, the data version, the latest good
        # cycle (the live status line); the overview's notifications and trend marks (their
        # window, the marks)
        with django_assert_max_num_queries(9 if path == f"/clusters/{seed.name}/" else 6):
            assert bob_client.get(path).status_code == 200


def test_the_cluster_list_costs_the_same_for_many_clusters(
    bob_client: Client, seed, make_cluster, django_assert_max_num_queries
) -> None:
    for i in range(15):
        make_cluster(f"empty-{i:02d}")

    with django_assert_max_num_queries(7):  # 6, and the live status line's newest good cycle
        response = bob_client.get("/")

    assert len(response.context["rows"]) >= 16


def test_chart_module_builds_the_trend_from_a_dataframe() -> None:
    start = datetime(2026, 11, 29, tzinfo=UTC)
    frame = pd.DataFrame(
        {
            "as_of": [start + timedelta(minutes=m) for m in (0, 1, 2, 30, 31)],
            "allocation_utilization": [0.5, 0.6, 0.7, 0.8, 0.9],
            "activity_utilization": [0.2, 0.3, None, 0.4, 0.5],
        }
    )

    figure = utilization_trend(frame)

    allocation, activity = figure.data
    assert len(allocation.x) == 6  # a gap of 28 minutes breaks the line: one empty point added
    assert sum(pd.isna(y) for y in allocation.y) == 1
    assert sum(pd.isna(y) for y in activity.y) == 2  # the gap and the unknown reading
