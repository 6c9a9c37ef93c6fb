"""Issue #32 item 12: the node, job and queue tables sort by any column and filter on the
server, in the URL, and keep both across pages (diagnosis/pages/support/sorting.py).

The cluster is the demo's seed scenario (diagnosis/core/simulate/scenarios.py) run by the cycle
to 2:20 of simulated time, past its Xid 79 on gpu-100 GPU 3 (unhealthy) and its Xid 13 on
gpu-090 GPU 1: the real shapes a cycle stores, 128 nodes (three pages of 50)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from django.http import QueryDict

from diagnosis.models import Cluster, Job
from diagnosis.pages.support.sorting import TableSort
from tests.support.browser import module_seed_cluster
from tests.support.world import logged_in_client

NAME = "tables-seed"
CYCLES = 14


@pytest.fixture(scope="module")
def seed(django_db_setup, django_db_blocker) -> Iterator[Cluster]:
    """The module's simulated cluster (committed once; deleted after the module)."""
    with module_seed_cluster(django_db_blocker, NAME, CYCLES) as cluster:
        yield cluster


@pytest.fixture
def client(bob):
    return logged_in_client(bob)


def table_column(html: str, table_id: str, link_kind: str) -> list[str]:
    """The names the ``table_id`` table links to (``/<link_kind>/<name>/``), in row order."""
    table = html[html.index(f'id="{table_id}"') :]
    table = table[: table.index("</table>")]
    return [
        unescape(n) for n in re.findall(rf'href="/clusters/{NAME}/{link_kind}/([^/"]+)/"', table)
    ]


def page_links(html: str) -> list[str]:
    nav = html[html.index('class="pagination"') :]
    return [unescape(h) for h in re.findall(r'href="(\?[^"]*)"', nav[: nav.index("</nav>")])]


# -- the sort parameter -------------------------------------------------------------------------


def test_a_header_link_turns_the_order_round_and_keeps_the_filters_not_the_page() -> None:
    sort = TableSort.parse(QueryDict("state=ready&page=3&sort=-util"), ["name", "util"], "name")

    assert (sort.key, sort.descending, sort.param) == ("util", True, "-util")
    assert sort.link("util") == "?state=ready&sort=util"
    assert sort.link("name") == "?state=ready&sort=name"
    assert (sort.aria("util"), sort.aria("name")) == ("descending", "none")


def test_a_first_click_on_a_count_sorts_the_largest_first() -> None:
    sort = TableSort.parse(QueryDict(""), ["name", "xids"], "name", descending_first=["xids"])

    assert sort.link("xids") == "?sort=-xids"
    assert sort.link("name") == "?sort=-name"  # the current column: the other way


@pytest.mark.parametrize("value", ["bogus", "-", "--name", "name;drop"])
def test_an_unknown_sort_is_the_default_order(value: str) -> None:
    sort = TableSort.parse(QueryDict(f"sort={value}"), ["name"], "-name")
    assert sort.param == "-name"


def test_none_values_go_last_both_ways() -> None:
    rows = [{"n": "a", "v": None}, {"n": "b", "v": 2}, {"n": "c", "v": 1}]
    orders = {"v": lambda r: r["v"]}
    for text, expected in (("v", ["c", "b", "a"]), ("-v", ["b", "c", "a"])):
        sort = TableSort.parse(QueryDict(f"sort={text}"), orders, "v")
        assert [r["n"] for r in sort.apply(rows, orders, tie=lambda r: r["n"])] == expected


# -- nodes --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_health_filter_lists_the_unhealthy_nodes_first_and_only_them(seed, client) -> None:
    """The seed's unhealthy node was on page 3 of 3 by name."""
    by_name = client.get(f"/clusters/{NAME}/nodes/?page=3").content.decode()
    assert "gpu-100" in table_column(by_name, "node-table", "nodes")

    html = client.get(f"/clusters/{NAME}/nodes/?health=unhealthy").content.decode()

    assert table_column(html, "node-table", "nodes") == ["gpu-090", "gpu-100"]
    assert "2 of 128 nodes" in html


@pytest.mark.django_db
def test_a_column_sort_puts_the_most_xids_first(seed, client) -> None:
    html = client.get(f"/clusters/{NAME}/nodes/?sort=-unhealthy").content.decode()
    assert table_column(html, "node-table", "nodes")[0] == "gpu-100"
    assert 'aria-sort="descending" data-sort="unhealthy"' in html


@pytest.mark.django_db
def test_the_node_pages_keep_the_sort_and_the_filters(seed, client) -> None:
    html = client.get(f"/clusters/{NAME}/nodes/?state=ready&sort=-util").content.decode()
    links = page_links(html)
    assert links
    assert all("state=ready" in link and "sort=-util" in link for link in links)
    second = client.get(f"/clusters/{NAME}/nodes/{links[0]}").content.decode()
    assert 'aria-sort="descending" data-sort="util"' in second
    assert 'id="node-state-filter"' in second
    assert '<option value="ready" selected>' in second


@pytest.mark.django_db
def test_a_state_no_node_is_in_says_so(seed, client) -> None:
    html = client.get(f"/clusters/{NAME}/nodes/?state=down").content.decode()
    assert table_column(html, "node-table", "nodes") == []
    assert 'id="node-none"' in html


# -- jobs ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_job_table_sorts_by_gpus_largest_first(seed, client) -> None:
    html = client.get(f"/clusters/{NAME}/jobs/?sort=-gpus").content.decode()
    shown = table_column(html, "job-table", "jobs")
    biggest = max(
        Job.objects.filter(cluster=seed, state__in=["pending", "running"]),
        key=lambda j: j.gpus,
    )
    assert Job.objects.get(cluster=seed, external_id=shown[0]).gpus == biggest.gpus == 512


@pytest.mark.django_db
def test_the_job_table_sorts_by_wait_and_keeps_it_across_pages(seed, client) -> None:
    html = client.get(f"/clusters/{NAME}/jobs/?state=all&sort=-wait").content.decode()
    shown = table_column(html, "job-table", "jobs")
    assert shown[0] == "research-big"  # the starving job: waiting since 0:20
    links = page_links(html)
    assert links
    assert all("sort=-wait" in link and "state=all" in link for link in links)
    assert '<input type="hidden" name="sort" value="-wait">' in html  # the search keeps it


@pytest.mark.django_db
@pytest.mark.parametrize("sort", ["id", "-name", "tenant", "-queue", "state", "submitted"])
def test_every_job_column_sorts(seed, client, sort: str) -> None:
    response = client.get(f"/clusters/{NAME}/jobs/?sort={sort}")
    assert response.status_code == 200
    assert f'aria-sort="{"descending" if sort[0] == "-" else "ascending"}"' in response.text


# -- queues -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_queue_table_sorts_by_use_and_filters_to_queues_with_waiting_jobs(seed, client) -> None:
    tree = table_column(client.get(f"/clusters/{NAME}/queues/").text, "queue-table", "queues")
    assert sorted(tree) == ["hpo", "pretrain", "research", "serving"]

    used = client.get(f"/clusters/{NAME}/queues/?sort=-used").text
    assert table_column(used, "queue-table", "queues")[0] == "pretrain"  # its 512-GPU gang

    waiting = client.get(f"/clusters/{NAME}/queues/?pending=1").text
    assert "research" in table_column(waiting, "queue-table", "queues")
    assert "serving" not in table_column(waiting, "queue-table", "queues")

    one = client.get(f"/clusters/{NAME}/queues/?tenant=hpo").text
    assert table_column(one, "queue-table", "queues") == ["hpo"]
