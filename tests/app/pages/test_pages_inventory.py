"""The daily views of issue 19: nodes and GPUs (heatmap, node page, GPU time series), queues,
the job list and the job's efficiency report, and the links between every page.

Most tests read one simulated cluster built once for the module the way production builds it:
the demo's seed scenario on the built-in simulator, one ``run_cluster_cycle`` per 10 simulated
minutes (:data:`CYCLES` cycles), so the stored snapshots, jobs, queues and findings are the real
shapes a cycle writes. Scoping tests give mallory (a manager) one tenant of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html import unescape

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse

from diagnosis.access import HIDDEN_JOB
from diagnosis.charts.figures import gpu_heatmap
from diagnosis.models import Cluster, Finding, Job, Snapshot, Tenant
from diagnosis.pages import inventory, queues
from diagnosis.pages.support import snapshots
from diagnosis.templatetags.gpuobs import evidence_table
from diagnosis.templatetags.links import markdown, markdown_inline, subject_link, url_of
from tests.support.browser import module_seed_cluster
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

NAME = "views-seed"
CYCLES = 18


@pytest.fixture(scope="module")
def seed(django_db_setup, django_db_blocker) -> Iterator[Cluster]:
    """The module's simulated cluster (committed once; deleted after the module)."""
    with module_seed_cluster(django_db_blocker, NAME, CYCLES) as cluster:
        yield cluster


def text_of(response) -> str:
    html = re.sub(r"<script.*?</script>", " ", response.content.decode(), flags=re.S)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def figure_of(html: str, element_id: str) -> dict:
    """The plotly figure a page embeds for the chart ``element_id`` (embed)."""
    payload = re.search(rf'id="{element_id}-figure"[^>]*>(.*?)</script>', html, re.S)
    assert payload, f"no chart {element_id}"
    return json.loads(payload[1])


def latest_document(cluster: Cluster) -> dict:
    return Snapshot.objects.filter(cluster=cluster).order_by("-as_of")[0].load_document()


def busy_gpu(cluster: Cluster) -> tuple[str, int, str]:
    """A GPU a running job holds in the latest snapshot: node, index, job id."""
    for job in latest_document(cluster)["jobs"]:
        if job["state"] == "running" and job["allocation"]:
            pod = job["allocation"][0]
            return pod["node"], pod["gpus"][0], job["id"]
    raise AssertionError("the seed scenario has running jobs")


def pending_job(cluster: Cluster) -> dict:
    for job in latest_document(cluster)["jobs"]:
        if job["state"] == "pending" and job.get("queue") and job.get("pending_reason"):
            return job
    raise AssertionError("the seed scenario has pending jobs with a reason")


def manager_of(cluster: Cluster, user, tenant: str) -> Client:
    Tenant.objects.get(cluster=cluster, name=tenant).managers.add(user)
    return logged_in_client(user)


def pages(cluster: Cluster) -> list[str]:
    node, index, job = busy_gpu(cluster)
    queue = pending_job(cluster)["queue"]
    base = f"/clusters/{cluster.name}"
    return [
        f"{base}/nodes/",
        f"{base}/nodes/{node}/",
        f"{base}/nodes/{node}/gpus/{index}/",
        f"{base}/queues/",
        f"{base}/queues/{queue}/",
        f"{base}/jobs/",
        f"{base}/jobs/{job}/",
    ]


# -- access --------------------------------------------------------------------------------------


def test_every_new_page_sends_anonymous_visitors_to_login(client: Client, seed) -> None:
    for path in pages(seed):
        response = client.get(path)

        assert response.status_code == 302, path
        assert response["Location"].startswith("/accounts/login/"), path


def test_every_new_page_renders_for_a_viewer(bob_client: Client, seed) -> None:
    for path in pages(seed):
        assert bob_client.get(path).status_code == 200, path


def test_a_user_without_a_role_gets_404_everywhere(nobody, seed) -> None:
    client = logged_in_client(nobody)
    for path in pages(seed):
        assert client.get(path).status_code == 404, path


def test_every_new_page_runs_a_bounded_number_of_queries(
    bob_client: Client, seed, django_assert_max_num_queries
) -> None:
    snapshots.forget_cached()  # cold: every stored snapshot read from the database
    for path in pages(seed):
        # the job page: also its life's snapshots and last document, events, drains, incidents,
        # tenant and queue; the node and GPU pages: the live status line's newest good cycle
        job_page = "/jobs/" in path and not path.endswith("/jobs/")
        # a node's, a GPU's or a job's series: each sampled snapshot's index header in one
        # query, the nodes' parts of them in one more, whatever the range; and the live
        # status line's newest good cycle on each page
        series_page = "/nodes/" in path and not path.endswith("/nodes/")
        with django_assert_max_num_queries(17 if job_page else 12 if series_page else 11):
            assert bob_client.get(path).status_code == 200, path


# -- nodes and GPUs ------------------------------------------------------------------------------


def test_the_heatmap_is_one_plotly_heatmap_linking_every_gpu(bob_client: Client, seed) -> None:
    node, index, _job = busy_gpu(seed)
    html = bob_client.get(f"/clusters/{seed.name}/nodes/").content.decode()
    figure = figure_of(html, "gpu-heatmap")

    assert [trace["type"] for trace in figure["data"]] == ["heatmap"]
    links = figure["data"][0]["customdata"]
    assert f"/clusters/{seed.name}/nodes/{node}/gpus/{index}/" in links[index]
    assert html.count("<tr>") <= 60  # the node table is paged, the GPUs are not DOM rows


def test_the_node_table_puts_the_unhealthy_nodes_first_and_filters_to_them(
    bob_client: Client, seed
) -> None:
    """Issue #32 item 12: the seed's only unhealthy node was on page 3 of 3."""
    latest = latest_document(seed)
    bad = sorted({g["node"] for g in latest["gpus"] if g.get("health") != "ok" or g.get("xid")})
    assert bad
    base = f"/clusters/{seed.name}/nodes/"
    first = bob_client.get(f"{base}?sort=problems").content.decode()
    listed = re.findall(rf'href="/clusters/{seed.name}/nodes/([^/"]+)/"', first)
    assert set(listed[: len(bad)]) == set(bad)
    only = bob_client.get(f"{base}?problems=1").content.decode()
    table = only[only.index('id="node-table"') :]
    shown = set(re.findall(rf'href="/clusters/{seed.name}/nodes/([^/"]+)/"', table))
    assert set(bad) <= shown
    assert len(shown) < len(latest["nodes"])


def test_the_node_page_lists_its_gpus_with_their_jobs_linked(bob_client: Client, seed) -> None:
    node, index, job = busy_gpu(seed)
    html = bob_client.get(f"/clusters/{seed.name}/nodes/{node}/").content.decode()

    assert f'href="/clusters/{seed.name}/jobs/{job}/"' in html
    assert f'href="/clusters/{seed.name}/nodes/{node}/gpus/{index}/"' in html
    assert 'id="node-util"' in html
    assert "Snapshot time" in html


def test_the_snapshot_pages_read_the_index_never_a_whole_document(
    bob_client: Client, seed, monkeypatch
) -> None:
    """Issue #35: cold, the heatmap, node, GPU, queue and job pages decompress and parse only
    their parts of the stored snapshots (a 12 MB document at 16,384 GPUs), over a 6-hour range
    too."""
    paths = pages(seed)
    snapshots.forget_cached()

    def whole_document(snapshot_id: int) -> str:
        raise AssertionError(f"snapshot {snapshot_id}'s whole document was read")

    monkeypatch.setattr(snapshots, "_raw", whole_document)
    for path in paths:
        response = bob_client.get(path, {"range": "6h"})
        assert response.status_code == 200, path


def test_a_snapshot_stored_before_the_index_is_read_from_its_document(
    bob_client: Client, seed
) -> None:
    paths = pages(seed)

    def shown(path: str) -> str:  # without the data's age, which moves on
        return re.sub(r"updated \d+ \w+ ago", "", text_of(bob_client.get(path)))

    with_index = {path: shown(path) for path in paths}
    Snapshot.objects.filter(cluster=seed).update(index_header=None, index_body=None)
    snapshots.forget_cached()
    try:
        for path in paths:
            assert shown(path) == with_index[path], path
    finally:
        snapshots.forget_cached()


def test_an_unknown_node_is_a_404(bob_client: Client, seed) -> None:
    assert bob_client.get(f"/clusters/{seed.name}/nodes/no-such-node/").status_code == 404


def test_the_gpu_page_charts_six_metrics_over_the_chosen_range(bob_client: Client, seed) -> None:
    node, index, _job = busy_gpu(seed)
    url = f"/clusters/{seed.name}/nodes/{node}/gpus/{index}/"

    six_hours = bob_client.get(url, {"range": "6h"})
    one_hour = bob_client.get(url, {"range": "1h"})

    html = six_hours.content.decode()
    figure = figure_of(html, "gpu-series")
    assert [trace["type"] for trace in figure["data"]] == ["scatter"] * 6
    for title in ("GPU utilization", "Tensor-core activity", "Framebuffer used", "Power"):
        assert title in html
    assert "Temperature" in html
    assert "SM clock" in html
    # 18 cycles of 10 simulated minutes: 3 hours of snapshots, 7 in the last hour
    assert "18 stored snapshots" in text_of(six_hours)
    assert "7 stored snapshots" in text_of(one_hour)


def test_a_gpu_series_is_downsampled_to_a_bounded_number_of_points(seed) -> None:
    end = Snapshot.objects.filter(cluster=seed).order_by("-as_of")[0].as_of
    start = Snapshot.objects.filter(cluster=seed).order_by("as_of")[0].as_of

    chosen = snapshots.sampled_snapshots(seed, start, end, max_points=5)

    assert len(chosen) == 5
    assert chosen[0].as_of == start
    assert chosen[-1].as_of == end


def test_a_gpu_by_uuid_redirects_to_its_page(bob_client: Client, seed) -> None:
    node, index, _job = busy_gpu(seed)
    gpu = next(
        g
        for g in latest_document(seed)["gpus"]
        if g["node"] == node and g["index"] == index and g.get("uuid")
    )

    response = bob_client.get(f"/clusters/{seed.name}/gpus/{gpu['uuid']}/")

    assert response.status_code == 302
    assert response["Location"] == f"/clusters/{seed.name}/nodes/{node}/gpus/{index}/"


def test_reading_members_stops_after_the_wanted_ones() -> None:
    raw = '{"a": 1, "gpus": [{"node": "n"}], "jobs": [unparsable'

    assert snapshots.read_members(raw, ["gpus"]) == {"gpus": [{"node": "n"}]}


def test_a_manager_sees_another_tenants_job_on_a_node_as_hidden(mallory, seed) -> None:
    node, _index, job = busy_gpu(seed)
    owner = Job.objects.get(cluster=seed, external_id=job).tenant.name
    other = Tenant.objects.filter(cluster=seed).exclude(name=owner).order_by("name")[0].name
    client = manager_of(seed, mallory, other)

    html = client.get(f"/clusters/{seed.name}/nodes/{node}/").content.decode()

    assert f"/jobs/{job}/" not in html
    assert unescape(HIDDEN_JOB) in unescape(html)


# -- queues --------------------------------------------------------------------------------------


def test_the_queue_list_shows_each_queue_with_weight_use_and_fair_share(
    bob_client: Client, seed
) -> None:
    queues = latest_document(seed)["queues"]

    response = bob_client.get(f"/clusters/{seed.name}/queues/")

    html = response.content.decode()
    for queue in queues:
        assert f'href="/clusters/{seed.name}/queues/{queue["name"]}/"' in html
    assert "Fair share" in text_of(response)
    assert "Borrowed" in text_of(response)


def test_the_queue_page_lists_a_pending_job_with_the_schedulers_reason(
    bob_client: Client, seed
) -> None:
    job = pending_job(seed)

    response = bob_client.get(f"/clusters/{seed.name}/queues/{job['queue']}/")

    text = text_of(response)
    assert job["id"] in text
    assert job["pending_reason"][:40] in text


def test_the_queue_page_names_the_deadlock_a_pending_gang_is_in(bob_client: Client, seed) -> None:
    """The seed's two sweep gangs deadlock on a shared node by the second simulated hour."""
    deadlock = Finding.objects.get(cluster=seed, rule_id="gang-deadlock", state="firing")
    member = deadlock.subject.partition(":")[2].split("+")[0]
    queue = Job.objects.get(cluster=seed, external_id=member).queue.name

    response = bob_client.get(f"/clusters/{seed.name}/queues/{queue}/")

    row = re.search(rf"<tr>\s*<td><a[^>]*/jobs/{member}/.*?</tr>", response.content.decode(), re.S)
    assert row, f"{member} is not listed as pending"
    assert f'href="/clusters/{seed.name}/findings/{deadlock.pk}/"' in row[0]


def test_a_manager_sees_only_their_tenants_queues(mallory, seed) -> None:
    tenants = list(Tenant.objects.filter(cluster=seed).order_by("name"))
    client = manager_of(seed, mallory, tenants[0].name)
    queues = latest_document(seed)["queues"]
    theirs = [q["name"] for q in queues if q["tenant"] == tenants[0].name]
    others = [q["name"] for q in queues if q["tenant"] != tenants[0].name]

    html = client.get(f"/clusters/{seed.name}/queues/").content.decode()

    assert all(f"/queues/{q}/" in html for q in theirs)
    assert not any(f"/queues/{q}/" in html for q in others)
    assert client.get(f"/clusters/{seed.name}/queues/{others[0]}/").status_code == 404


# -- jobs ----------------------------------------------------------------------------------------


def test_the_job_list_searches_by_id(bob_client: Client, seed) -> None:
    job = Job.objects.filter(cluster=seed).order_by("external_id")[0]

    response = bob_client.get(
        f"/clusters/{seed.name}/jobs/", {"q": job.external_id, "state": "all"}
    )

    html = response.content.decode()
    assert f'href="/clusters/{seed.name}/jobs/{job.external_id}/"' in html
    shown = re.findall(rf'href="/clusters/{seed.name}/jobs/([^"/]+)/"', html)
    assert all(job.external_id in j for j in shown)


def test_the_job_list_filters_by_tenant_and_state(bob_client: Client, seed) -> None:
    tenant = Tenant.objects.filter(cluster=seed).order_by("name")[0]
    expected = Job.objects.filter(cluster=seed, tenant=tenant, state="running").count()

    response = bob_client.get(
        f"/clusters/{seed.name}/jobs/", {"tenant": tenant.name, "state": "running"}
    )

    assert f"{expected} job" in text_of(response)


def test_the_job_list_is_paginated(bob_client: Client, seed) -> None:
    total = Job.objects.filter(cluster=seed).count()
    assert total > 50, "the seed scenario has more than a page of jobs"

    response = bob_client.get(f"/clusters/{seed.name}/jobs/", {"state": "all", "page": 2})

    assert "page 2 of" in text_of(response)
    assert (
        len(re.findall(rf'href="/clusters/{seed.name}/jobs/[^"]+/"', response.content.decode()))
        <= 50
    )


def test_a_manager_never_finds_another_tenants_job(mallory, seed) -> None:
    tenants = list(Tenant.objects.filter(cluster=seed).order_by("name"))
    client = manager_of(seed, mallory, tenants[0].name)
    foreign = Job.objects.filter(cluster=seed).exclude(tenant=tenants[0]).first()

    listed = client.get(f"/clusters/{seed.name}/jobs/", {"q": foreign.external_id, "state": "all"})

    assert f"/jobs/{foreign.external_id}/" not in listed.content.decode()
    assert client.get(f"/clusters/{seed.name}/jobs/{foreign.external_id}/").status_code == 404


def test_the_job_page_reports_allocation_gpu_hours_and_mfu(bob_client: Client, seed) -> None:
    node, index, job = busy_gpu(seed)

    response = bob_client.get(f"/clusters/{seed.name}/jobs/{job}/")

    html = response.content.decode()
    text = text_of(response)
    assert f'href="/clusters/{seed.name}/nodes/{node}/gpus/{index}/"' in html
    assert "Productive GPU-hours" in text
    assert "MFU" in text
    assert 'id="job-util"' in html
    assert re.search(r'id="productive-gpu-hours">[0-9]', html)


def test_a_pending_jobs_wait_is_never_negative(bob_client: Client, seed) -> None:
    job = pending_job(seed)

    response = bob_client.get(f"/clusters/{seed.name}/jobs/{job['id']}/")

    assert "waiting -" not in text_of(response)
    assert "waiting" in text_of(response)


# -- links, labels, Markdown ---------------------------------------------------------------------


def test_a_finding_page_links_its_subject_and_the_names_in_its_evidence(
    bob_client: Client, seed
) -> None:
    finding = Finding.objects.filter(cluster=seed, subject__startswith="job:").first()
    job = finding.subject.partition(":")[2]

    html = bob_client.get(f"/clusters/{seed.name}/findings/{finding.pk}/").content.decode()

    assert f'<a class="ref ref-job" href="/clusters/{seed.name}/jobs/{job}/">' in html
    assert f'class="ref ref-tenant" href="/clusters/{seed.name}/tenants/' in html


def test_evidence_keys_get_labels_and_units() -> None:
    html = evidence_table({"util_mean": 0.0312, "power_w": 310.5, "hold_s": 7200})

    assert "Mean GPU utilization" in html
    assert "3.1%" in html
    assert "310.5</span>&nbsp;W" in html
    assert "2.0 h" in html


def test_evidence_seconds_read_as_a_duration_not_a_raw_number() -> None:
    """Issue #32 item 12: "Holding GPUs for 5.3 h", never "19,060.1 (5.3 h)"."""
    html = evidence_table({"hold_s": 19060.1})

    assert '<span class="num" title="19,060.1 s">5.3 h</span>' in html
    assert "19,060.1</span>" not in html


def test_evidence_names_link_to_their_pages(seed) -> None:
    html = evidence_table({"job": "j-1", "blocked_jobs": [{"id": "j-2"}], "node": "n1"}, seed)

    assert f'href="/clusters/{seed.name}/jobs/j-1/"' in html
    assert f'href="/clusters/{seed.name}/jobs/j-2/"' in html
    assert f'href="/clusters/{seed.name}/nodes/n1/"' in html


def test_a_hidden_job_is_never_a_link(seed) -> None:
    assert "<a" not in evidence_table({"job": HIDDEN_JOB}, seed)


def test_a_gang_deadlock_subject_links_every_member(seed) -> None:
    html = subject_link("jobs:a+b", seed)

    assert f'href="/clusters/{seed.name}/jobs/a/"' in html
    assert f'href="/clusters/{seed.name}/jobs/b/"' in html


def test_advice_markdown_is_rendered_and_raw_html_is_not() -> None:
    html = markdown("Set `binpack` *now* <script>alert(1)</script> [x](javascript:alert(1))")

    assert "<code>binpack</code>" in html
    assert "<em>now</em>" in html
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert 'href="javascript' not in html


def test_inline_markdown_has_no_paragraph() -> None:
    assert str(markdown_inline("use `x`")) == "use <code>x</code>"


def test_the_health_heatmap_codes_unhealthy_not_ready_and_unreported_gpus(seed) -> None:
    def gpu(node: str, index: int, health: str = "ok") -> dict:
        return {"node": node, "index": index, "health": health, "util": 0.5, "xid": []}

    metrics = snapshots.GpuMetrics(
        nodes={
            "a": {"name": "a", "pool": "p", "gpus": 2, "state": "ready"},
            "b": {"name": "b", "pool": "p", "gpus": 2, "state": "drained"},
        },
        gpus={("a", 0, -1): gpu("a", 0, "unhealthy"), ("b", 0, -1): gpu("b", 0)},
    )
    rows = inventory._node_rows(metrics, "")

    nodes, values, links = inventory.heatmap_matrix(seed, metrics, rows, "health")

    assert nodes == ["a", "b"]
    assert values.tolist() == [[3.0, 4.0], [5.0, 4.0]]  # unhealthy, not ready; unreported
    assert links[1][0] == f"/clusters/{seed.name}/nodes/a/gpus/1/"


def test_a_broken_custom_range_falls_back_and_says_why(bob_client: Client, seed) -> None:
    node, index, _job = busy_gpu(seed)

    response = bob_client.get(
        f"/clusters/{seed.name}/nodes/{node}/gpus/{index}/", {"from": "2026-12-01T10:00"}
    )

    assert response.status_code == 200
    assert "both from and to are needed" in text_of(response)


@pytest.mark.parametrize(
    ("kind", "name", "kwarg"),
    [("job", "job 1/x%y#?", "job_id"), ("tenant", "团队 a", "tenant"), ("queue", "q.1", "queue")],
)
def test_a_link_is_the_url_reverse_gives(kind: str, name: str, kwarg: str) -> None:
    expected = reverse(f"diagnosis:{kind}", kwargs={"name": "demo", kwarg: name})

    assert url_of(kind, name, "demo") == expected


def test_a_node_name_a_url_cannot_carry_is_plain_text() -> None:
    assert url_of("node", "a/b", "demo") is None


def test_a_node_name_is_text_in_the_heatmap_never_plotly_markup() -> None:
    figure = gpu_heatmap(
        ['<a href="javascript:x()">n</a>'], np.array([[0.5]]), [["/clusters/c/nodes/n/gpus/0/"]]
    )

    assert figure.data[0].x == ('&lt;a href="javascript:x()"&gt;n&lt;/a&gt;',)


def test_inline_markdown_never_makes_a_link_of_a_name() -> None:
    html = str(markdown_inline("release job [x](https://evil.example/) first"))

    assert "<a" not in html
    assert "[x](https://evil.example/)" in html


def test_the_queue_tree_follows_kueues_cohorts_with_use_borrowing_and_fair_share() -> None:
    """The shape the Kueue adapter writes (diagnosis/edge/schedulers/kubernetes/kueue.py:
    ``scheduler.cohorts`` from ``cohort_rows``, ``scheduler.queue_parents`` per ClusterQueue)."""
    document = {
        "nodes": [{"name": "n1", "gpus": 8}, {"name": "n2", "gpus": 8}],
        "scheduler": {
            "cohorts": {"research": {"weight": 1}},
            "queue_parents": {"cq-a": "research", "cq-b": "research"},
        },
        "queues": [
            {"name": "cq-a", "tenant": "a", "weight": 1, "deserved_gpus": 4},
            {"name": "cq-b", "tenant": "b", "weight": 1, "deserved_gpus": 4},
        ],
        "jobs": [
            {
                "id": "a1",
                "queue": "cq-a",
                "state": "running",
                "gpus_per_pod": 6,
                "allocation": [{"node": "n1", "gpus": [0, 1, 2, 3, 4, 5]}],
            },
            {"id": "b1", "queue": "cq-b", "state": "pending", "pods": 1, "gpus_per_pod": 8},
        ],
    }

    rows = queues.queue_tree(document)

    assert list(rows) == ["research", "cq-a", "cq-b"]
    assert rows["research"].is_group
    assert (rows["cq-a"].depth, rows["cq-a"].used_gpus, rows["cq-a"].borrowed_gpus) == (1, 6, 2)
    assert (rows["cq-b"].pending_jobs, rows["cq-b"].pending_gpus) == (1, 8)
    assert rows["cq-a"].fair_gpus + rows["cq-b"].fair_gpus == pytest.approx(14)
    assert rows["research"].used_gpus == 6


def test_a_partial_gangs_page_shows_the_gpu_hours_it_holds(make_cluster, bob) -> None:
    """Issue #32 item 11: a gang that never started but holds 16 GPUs for 5 h costs 80 GPU-h."""
    from diagnosis.actions.records.cycles import record_cycle  # noqa: PLC0415
    from tests.support.builders import AS_OF, SnapshotBuilder  # noqa: PLC0415

    cluster = make_cluster("partial", metrics_kind="none")
    snapshot = (
        SnapshotBuilder(as_of=AS_OF, cluster="partial")
        .pool("a100", nodes=2, gpus=8)  # no free GPU for its two missing pods: stuck
        .job(
            "gang-1",
            tenant="research",
            state="pending",
            pods=4,
            gpus_per_pod=8,
            bound=2,
            nodes=["a100-000", "a100-001"],
            partial_since="5h",
            waited="6h",
        )
        .build()
    )
    record_cycle(cluster, snapshot)

    html = logged_in_client(bob).get("/clusters/partial/jobs/gang-1/").content.decode()
    held = re.search(r'id="held-gpu-hours">(.*?)</div></div>', html, re.S).group(1)
    assert '<div class="value">80.0</div>' in held
    assert "16 GPUs held by its bound pods × 5.0 h" in unescape(held)
    assert "16 GPUs on 2 node(s)" in html  # the GPU table's summary line
    finding = Finding.objects.get(cluster=cluster, subject="job:gang-1")
    gpu_page = logged_in_client(bob).get("/clusters/partial/nodes/a100-000/gpus/0/")
    assert f'href="/clusters/partial/findings/{finding.pk}/"' in gpu_page.content.decode()
