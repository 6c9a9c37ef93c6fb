"""Issue #32: several GPUs, or a job's GPUs, on one chart with the range picker
(diagnosis/pages/overlay.py, diagnosis/charts/overlay.py).

The cluster is the demo's seed scenario (diagnosis/core/simulate/scenarios.py) run by the cycle
for :data:`CYCLES` cycles of 10 simulated minutes: the stored snapshots are the shapes a cycle
writes, and ``pretrain-a`` is its 512-GPU gang (more GPUs than one line each)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape

import numpy as np
import pytest

from diagnosis.charts.overlay import MAX_LINES, spread
from diagnosis.models import Cluster, Snapshot, Tenant
from diagnosis.pages.overlay import MAX_ASKED
from tests.support.browser import module_seed_cluster
from tests.support.world import logged_in_client

NAME = "overlay-seed"
CYCLES = 4
URL = f"/clusters/{NAME}/overlay/"


@pytest.fixture(scope="module")
def seed(django_db_setup, django_db_blocker) -> Iterator[Cluster]:
    """The module's simulated cluster (committed once; deleted after the module)."""
    with module_seed_cluster(django_db_blocker, NAME, CYCLES) as cluster:
        yield cluster


def figure_of(html: str) -> dict:
    payload = re.search(r'id="gpu-overlay-figure"[^>]*>(.*?)</script>', html, re.S)
    assert payload, "no overlay chart"
    return json.loads(payload[1])


def values(array) -> list[float]:
    """A trace's numbers: plotly's typed array (base64 little-endian doubles) or a list."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype="<f8").tolist()
    return [np.nan if v is None else float(v) for v in array]


def stored_util(cluster: Cluster, node: str, index: int) -> list[float]:
    """The GPU's mean util in each stored snapshot, oldest first."""
    out = []
    for snap in Snapshot.objects.filter(cluster=cluster).order_by("as_of"):
        document = snap.load_document()
        gpu = next(g for g in document["gpus"] if (g["node"], g["index"]) == (node, index))
        out.append(gpu["util"]["mean"])
    return out


@pytest.fixture
def client(bob):
    return logged_in_client(bob)


@pytest.mark.django_db
def test_two_gpus_of_two_nodes_are_two_lines_of_their_stored_values(seed, client) -> None:
    html = client.get(f"{URL}?gpu=gpu-000/0+gpu-017/3&range=24h").content.decode()

    traces = figure_of(html)["data"]
    assert [t["name"] for t in traces] == ["gpu-000/0", "gpu-017/3"]
    for trace, (node, index) in zip(traces, [("gpu-000", 0), ("gpu-017", 3)], strict=True):
        assert values(trace["y"]) == pytest.approx(stored_util(seed, node, index))
    assert "2 GPUs" in html
    assert 'href="/clusters/overlay-seed/nodes/gpu-017/gpus/3/"' in html


@pytest.mark.django_db
def test_the_metric_is_chosen_and_the_range_picker_keeps_the_gpus(seed, client) -> None:
    html = unescape(client.get(f"{URL}?gpu=gpu-000/0&metric=power_w").content.decode())

    layout = figure_of(html)["layout"]
    assert layout["yaxis"]["title"]["text"] == "Power"
    presets = re.findall(r'href="\?([^"]*range=1h[^"]*)"', html)
    assert presets == ["gpu=gpu-000%2F0&metric=power_w&range=1h"]


@pytest.mark.django_db
def test_a_big_jobs_gpus_are_their_mean_and_band_aggregated_on_the_server(seed, client) -> None:
    html = client.get(f"{URL}?job=pretrain-a&range=24h").content.decode()

    traces = figure_of(html)["data"]
    assert len(traces) == 3  # highest, lowest (the band), mean: never 512 lines
    assert "512 GPUs" in html
    high, low, mean = (values(t["y"]) for t in traces)
    latest = Snapshot.objects.filter(cluster=seed).latest("as_of").load_document()
    job = next(j for j in latest["jobs"] if j["id"] == "pretrain-a")
    held = {(p["node"], i) for p in job["allocation"] for i in p["gpus"]}
    utils = [g["util"]["mean"] for g in latest["gpus"] if (g["node"], g["index"]) in held]
    assert len(utils) == 512
    assert mean[-1] == pytest.approx(np.mean(utils))
    assert (low[-1], high[-1]) == pytest.approx((min(utils), max(utils)))


def test_the_spread_counts_only_the_gpus_that_reported() -> None:
    t0 = datetime(2026, 11, 29, tzinfo=UTC)
    t1 = t0 + timedelta(minutes=10)
    series = {
        "a": [{"as_of": t0, "util": 0.2}, {"as_of": t1, "util": None}],
        "b": [{"as_of": t0, "util": 0.6}, {"as_of": t1, "util": 0.9}],
    }
    times, mean, low, high, counts = spread(series, "util")
    assert list(times) == [t0, t1]
    assert mean.tolist() == pytest.approx([0.4, 0.9])
    assert (low.tolist(), high.tolist(), counts.tolist()) == ([0.2, 0.9], [0.6, 0.9], [2, 1])


@pytest.mark.django_db
@pytest.mark.parametrize(
    "asked", ["gpu-999/0", 'gpu-000/0"}]});alert(1)//', "gpu-000", "../../etc/passwd/1"]
)
def test_a_gpu_that_is_not_there_is_named_on_the_page_never_a_500(seed, client, asked) -> None:
    response = client.get(URL, {"gpu": asked, "metric": "$(rm -rf /)"})

    assert response.status_code == 200
    html = response.content.decode()
    assert "Not a GPU of the latest snapshot" in html
    assert '"}]});alert' not in html  # the error names it escaped, never as markup
    assert 'id="gpu-overlay"' not in html


@pytest.mark.django_db
def test_more_gpus_than_may_be_named_are_cut_with_a_message(seed, client) -> None:
    refs = " ".join(f"gpu-{n:03d}/{i}" for n in range(10) for i in range(8))  # 80
    html = client.get(URL, {"gpu": refs}).content.decode()

    assert f"At most {MAX_ASKED} GPUs can be named" in html
    assert f"{MAX_ASKED} GPUs" in html
    assert len(figure_of(html)["data"]) == 3  # beyond MAX_LINES: the spread
    assert MAX_LINES < MAX_ASKED


@pytest.mark.django_db
def test_a_manager_may_not_overlay_another_tenants_job(seed, mallory) -> None:
    Tenant.objects.get(cluster=seed, name="research").managers.add(mallory)
    client = logged_in_client(mallory)

    assert client.get(URL, {"job": "pretrain-a"}).status_code == 404
    assert client.get(URL, {"gpu": "gpu-000/0"}).status_code == 200  # hardware: cluster-wide


@pytest.mark.django_db
def test_the_overlay_needs_a_login(seed) -> None:
    from django.test import Client  # noqa: PLC0415

    response = Client().get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_the_gpu_node_and_job_pages_link_their_overlay(seed, client) -> None:
    gpu = client.get(f"/clusters/{NAME}/nodes/gpu-000/gpus/0/").content.decode()
    assert f'href="{URL}?gpu=gpu-000/0"' in gpu
    node = client.get(f"/clusters/{NAME}/nodes/gpu-000/").content.decode()
    assert f'href="{URL}?gpu=gpu-000/0+gpu-000/1+' in node
    job = client.get(f"/clusters/{NAME}/jobs/pretrain-a/").content.decode()
    assert f'href="{URL}?job=pretrain-a"' in job
