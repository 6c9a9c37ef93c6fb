"""The overview's time range and live updates (docs/ui.md "Time range", "Live updates"): the
range parser, the picker's links, and the status fragment a live page polls -- who may read it
and when it says a new cycle landed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.http import QueryDict
from django.test import Client

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import ClusterCycle
from diagnosis.pages.support.time_range import TimeRange, range_picker
from diagnosis.reports.period import PeriodError
from tests.support.builders import SnapshotBuilder
from tests.support.world import logged_in_client

END = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_a_preset_ends_at_the_newest_data() -> None:
    time_range = TimeRange.parse({"range": "6h"}, default_end=END)

    assert (time_range.start, time_range.end, time_range.preset) == (
        END - timedelta(hours=6),
        END,
        "6h",
    )


def test_an_unknown_preset_is_the_default_one() -> None:
    assert TimeRange.parse({"range": "3y"}, default_end=END).preset == "24h"


def test_a_custom_range_reads_what_datetime_local_inputs_send() -> None:
    time_range = TimeRange.parse(
        {"from": "2026-11-28T08:00", "to": "2026-11-28T20:30"}, default_end=END
    )

    assert time_range.start == datetime(2026, 11, 28, 8, 0, tzinfo=UTC)
    assert time_range.end == datetime(2026, 11, 28, 20, 30, tzinfo=UTC)
    assert time_range.preset is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"from": "2026-11-28T08:00"}, "to"),
        ({"from": "2026-11-28T08:00", "to": "2026-11-28T07:00"}, "to"),
        ({"from": "2026-10-01", "to": "2026-11-28"}, "to"),  # over 31 days
        ({"from": "yesterday", "to": "2026-11-28"}, "from"),
    ],
)
def test_a_broken_custom_range_names_its_field(query: dict, field: str) -> None:
    with pytest.raises(PeriodError) as error:
        TimeRange.parse(query, default_end=END)

    assert error.value.field == field


def test_the_pickers_links_keep_the_pages_other_parameters() -> None:
    query = QueryDict("pool=a100&from=2026-11-28T08:00&to=2026-11-28T09:00&page=3")
    picker = range_picker(query, TimeRange.parse(query, default_end=END))

    assert picker.presets[0].query == "pool=a100&range=1h"
    assert picker.kept == (("pool", "a100"),)
    # 24-hour text in the reader's zone (UTC here), never a browser's datetime-local (#32 item 6)
    assert (picker.from_value, picker.to_value) == ("2026-11-28 08:00", "2026-11-28 09:00")


# -- the live status fragment -------------------------------------------------------------------


@pytest.fixture
def cycled(make_cluster):
    cluster = make_cluster("live", enabled=False)
    record_cycle(cluster, SnapshotBuilder(as_of=END, cluster="live").pool("a100", nodes=1).build())
    return cluster


def latest_id(cluster) -> int:
    return ClusterCycle.objects.filter(cluster=cluster, ok=True).latest("as_of").pk


@pytest.mark.django_db
def test_the_status_needs_a_login(cycled) -> None:
    response = Client().get("/clusters/live/live/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_the_status_of_a_cluster_the_user_may_not_read_is_a_404(cycled, nobody) -> None:
    assert logged_in_client(nobody).get("/clusters/live/live/").status_code == 404


@pytest.mark.django_db
def test_the_status_triggers_a_refresh_when_a_newer_cycle_landed(cycled, bob) -> None:
    response = logged_in_client(bob).get("/clusters/live/live/?cycle=1")

    assert response.status_code == 200
    assert response["HX-Trigger"] == "gpuobs:new-cycle"
    assert f'data-cycle="{latest_id(cycled)}"' in response.content.decode()


@pytest.mark.django_db
def test_the_status_stays_quiet_while_the_page_shows_the_newest_cycle(cycled, bob) -> None:
    response = logged_in_client(bob).get(f"/clusters/live/live/?cycle={latest_id(cycled)}")

    assert "HX-Trigger" not in response
    assert "updated" in response.content.decode()


def live_state(client, cluster) -> str:
    html = client.get(f"/clusters/{cluster.name}/live/").content.decode()
    return html.split('data-state="', 1)[1].split('"', 1)[0]


def test_the_live_dot_follows_the_datas_age_and_the_clusters_status(cycled, bob, settings):
    """Issue #32 item 10: no green dot beside "updated 5 min ago" of a failing cluster."""
    client = logged_in_client(bob)
    assert live_state(client, cycled) == "ok"

    ClusterCycle.objects.filter(cluster=cycled).update(
        ran_at=datetime.now(UTC) - timedelta(hours=1)
    )
    settings.GPUOBS_CYCLE_SECONDS = 60
    assert live_state(client, cycled) == "stale"

    cycled.status = "error"
    cycled.save(update_fields=["status"])
    assert live_state(client, cycled) == "error"
    assert (
        "(the last collection failed)"
        in client.get(f"/clusters/{cycled.name}/live/").content.decode()
    )


def test_sres_and_admins_read_the_cause_of_a_failed_collection(cycled, bob, carol):
    ClusterCycle.objects.create(
        cluster=cycled,
        as_of=END,
        ran_at=datetime.now(UTC),
        ok=False,
        error="metrics source (prometheus) failed: temporary failure",
    )
    cycled.status = "error"
    cycled.status_message = "metrics source (prometheus) failed: temporary failure"
    cycled.status_detail = "PrometheusError: 10.0.0.7:9090 answered 503 Service Unavailable"
    cycled.save()

    seen = {
        user.username: logged_in_client(user).get(f"/clusters/{cycled.name}/").content.decode()
        for user in (bob, carol)
    }
    assert 'id="failure-cause"' in seen["carol"]
    assert "10.0.0.7:9090 answered 503" in seen["carol"]
    assert "10.0.0.7" not in seen["bob"]
    assert "temporary failure" in seen["bob"]


# -- the cluster list's (the fleet's) status ----------------------------------------------------


@pytest.mark.django_db
def test_the_fleet_status_triggers_a_refresh_when_any_cluster_got_a_newer_cycle(
    cycled, make_cluster, bob
) -> None:
    client = logged_in_client(bob)
    shown = latest_id(cycled)
    assert "HX-Trigger" not in client.get(f"/live/?cycle={shown}")
    other = make_cluster("live-other", enabled=False)
    record_cycle(
        other, SnapshotBuilder(as_of=END, cluster="live-other").pool("a100", nodes=1).build()
    )

    response = client.get(f"/live/?cycle={shown}")

    assert response["HX-Trigger"] == "gpuobs:new-cycle"
    assert f'data-cycle="{latest_id(other)}"' in response.content.decode()


@pytest.mark.django_db
def test_the_fleet_status_counts_only_clusters_the_reader_may_see(cycled, nobody) -> None:
    html = logged_in_client(nobody).get("/live/?cycle=").content.decode()
    assert 'data-cycle=""' in html
    assert "waiting for the first cycle" in html


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/", "/clusters/live/nodes/a100-000/", "/clusters/live/nodes/a100-000/gpus/0/"]
)
def test_the_cluster_list_node_and_gpu_pages_poll_and_follow_new_cycles(cycled, bob, path) -> None:
    html = logged_in_client(bob).get(path).content.decode()
    assert 'id="live-status"' in html
    assert f'?cycle={latest_id(cycled)}"' in html
    assert 'id="live-region"' in html
