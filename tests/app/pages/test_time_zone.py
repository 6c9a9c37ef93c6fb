"""Issue #32 item 6: the reader's time zone and the one clock of a page (docs/ui.md "Clocks and
time zones"). UTC unless the reader chose a zone in the header (a cookie of their browser);
every time a page shows is in that zone, to the second, labelled with it; a simulated cluster's
wall-clock moments (people's steps) are put on its clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.http import QueryDict
from django.utils import timezone

from diagnosis.models import Cluster, ClusterCycle, Finding
from diagnosis.pages.support.cluster_clock import ClusterClock, simulated_clock
from diagnosis.pages.support.time_range import TimeRange, range_picker
from diagnosis.pages.support.time_zone import COOKIE, zone_label, zone_named
from diagnosis.templatetags.clock import moment, on_clock
from tests.support.world import logged_in_client

AT = datetime(2026, 7, 1, 6, 5, 7, 123456, tzinfo=UTC)


@pytest.mark.parametrize(
    ("zone", "when", "label"),
    [
        ("UTC", AT, "UTC"),
        ("Asia/Shanghai", AT, "UTC+8"),
        ("Asia/Kolkata", AT, "UTC+5:30"),
        ("America/New_York", AT, "UTC-4"),  # daylight saving time
        ("America/New_York", AT.replace(month=1), "UTC-5"),
    ],
)
def test_a_zone_is_labelled_by_its_offset_on_that_day(zone: str, when: datetime, label: str):
    assert zone_label(when.astimezone(zone_named(zone))) == label


@pytest.mark.parametrize("name", ["", "Mars/Olympus", "../../etc/passwd", "utc+8"])
def test_a_name_that_is_no_zone_is_refused(name: str):
    assert zone_named(name) is None


def test_a_moment_is_written_in_the_readers_zone_to_the_second_and_labelled():
    with timezone.override(zone_named("Asia/Shanghai")):
        html = str(moment(AT))

    assert ">2026-07-01 14:05:07 UTC+8</time>" in html  # no microseconds, no "T"
    assert 'datetime="2026-07-01T06:05:07Z"' in html
    assert "Asia/Shanghai · 2026-07-01 06:05:07 UTC" in html


def test_without_a_choice_a_moment_is_utc():
    assert ">2026-07-01 06:05:07 UTC</time>" in str(moment(AT))


@pytest.mark.django_db
def test_the_header_keeps_the_chosen_zone_in_a_cookie_and_goes_back(client, bob):
    client.force_login(bob)

    answer = client.post("/time-zone/", {"time_zone": "Asia/Shanghai", "next": "/clusters/"})

    assert answer.status_code == 302
    assert answer["Location"] == "/clusters/"
    assert answer.cookies[COOKIE].value == "Asia/Shanghai"
    assert 'value="Asia/Shanghai" selected' in client.get("/").content.decode()


@pytest.mark.django_db
def test_an_unknown_zone_is_a_400_and_another_site_is_never_the_way_back(client, bob):
    client.force_login(bob)

    assert client.post("/time-zone/", {"time_zone": "Mars/Olympus"}).status_code == 400
    away = client.post("/time-zone/", {"time_zone": "UTC", "next": "https://evil.example/"})
    assert away["Location"] == "/"


@pytest.mark.django_db
def test_a_bad_cookie_is_utc(client, bob, make_cluster):
    cluster = make_cluster("tz")
    finding = Finding.objects.create(
        cluster=cluster,
        rule_id="xid",
        subject="gpu:gpu-001/0",
        fingerprint="tz-1",
        severity="critical",
        state="firing",
        summary="Xid 79",
        first_seen=AT,
        active_since=AT,
        last_seen=AT,
    )
    client.force_login(bob)
    client.cookies[COOKIE] = "../../etc/passwd"

    text = client.get(f"/clusters/tz/findings/{finding.pk}/").content.decode()

    assert "2026-07-01 06:05:07 UTC" in text


@pytest.mark.django_db
def test_a_finding_page_shows_its_times_in_the_chosen_zone(client, bob, make_cluster):
    cluster = make_cluster("tz")
    finding = Finding.objects.create(
        cluster=cluster,
        rule_id="xid",
        subject="gpu:gpu-001/0",
        fingerprint="tz-1",
        severity="critical",
        state="firing",
        summary="Xid 79",
        first_seen=AT,
        active_since=AT,
        last_seen=AT,
    )
    client.force_login(bob)
    client.cookies[COOKIE] = "Asia/Shanghai"

    text = client.get(f"/clusters/tz/findings/{finding.pk}/").content.decode()

    assert "2026-07-01 14:05:07 UTC+8" in text
    assert "06:05:07.123456" not in text  # never microseconds


def test_the_range_pickers_text_is_24_hour_in_the_readers_zone_and_read_back_in_it():
    end = datetime(2026, 12, 1, 20, 30, tzinfo=UTC)
    with timezone.override(zone_named("Asia/Shanghai")):
        picker = range_picker(
            QueryDict(""),
            TimeRange.parse({}, default_end=end),
        )
        parsed = TimeRange.parse(
            {"from": "2026-12-02 00:00", "to": "2026-12-02 04:30"}, default_end=end
        )

    assert (picker.to_value, picker.zone) == ("2026-12-02 04:30", "UTC+8")  # never "4:30 AM"
    assert parsed.start == datetime(2026, 12, 1, 16, 0, tzinfo=UTC)
    assert parsed.end == end


# -- the cluster's clock ---------------------------------------------------------------------------


def step_cluster(**config) -> Cluster:
    return Cluster.objects.create(
        name="stepped", scheduler_kind="sim", scheduler_config={"clock": "step", **config}
    )


@pytest.mark.django_db
def test_a_real_clusters_clock_is_the_wall_clock_and_costs_no_query(
    make_cluster, django_assert_num_queries
):
    cluster = make_cluster("real", scheduler_kind="slurm")
    with django_assert_num_queries(0):
        clock = ClusterClock.around(cluster, [AT])

    assert simulated_clock(cluster) is None
    assert clock.at(AT) == AT
    assert str(on_clock(AT, clock)) == str(moment(AT))


@pytest.mark.django_db
def test_a_wall_moment_is_put_at_the_cluster_time_of_the_cycle_before_it_plus_the_time_since():
    cluster = step_cluster(step_s=600)
    wall = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    for i in range(3):  # cycles a minute apart on the wall clock, 10 minutes on the cluster's
        ClusterCycle.objects.create(
            cluster=cluster,
            ok=True,
            ran_at=wall + timedelta(minutes=i),
            as_of=wall + timedelta(hours=5, minutes=10 * i),
        )

    clock = ClusterClock.around(
        cluster, [wall - timedelta(seconds=5), wall + timedelta(seconds=90)]
    )

    assert simulated_clock(cluster) == {"step_s": 600}
    assert clock.at(wall + timedelta(seconds=90)) == wall + timedelta(
        hours=5, minutes=10, seconds=30
    )
    assert clock.at(wall - timedelta(seconds=5)) == wall + timedelta(hours=5) - timedelta(seconds=5)
    assert "wall clock" in str(on_clock(wall + timedelta(seconds=90), clock))


@pytest.mark.django_db
def test_a_wall_moment_never_passes_the_next_cycles_snapshot():
    cluster = step_cluster(step_s=1)
    wall = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    for i in range(2):  # a cluster slower than the wall clock: 1 s a cycle, cycles 60 s apart
        ClusterCycle.objects.create(
            cluster=cluster,
            ok=True,
            ran_at=wall + timedelta(minutes=i),
            as_of=wall + timedelta(seconds=i),
        )

    clock = ClusterClock.around(cluster, [wall + timedelta(seconds=30)])

    assert clock.at(wall + timedelta(seconds=30)) < wall + timedelta(seconds=1)


def test_an_evidence_time_reads_as_every_time_does():
    """Issue #32 item 12: evidence showed ISO timestamps with microseconds."""
    from diagnosis.templatetags.gpuobs import evidence_table  # noqa: PLC0415

    with timezone.override(zone_named("Asia/Shanghai")):
        html = str(evidence_table({"held_since": "2026-07-01T06:05:07.123456+00:00"}))

    assert "2026-07-01 14:05:07 UTC+8" in html
    assert ".123456" not in html.split("datetime=")[0]
    assert "06:05:07.123456" not in html


@pytest.mark.django_db
def test_the_demos_clock_is_its_own_and_a_real_time_simulation_is_the_wall_clock(make_cluster, bob):
    demo = make_cluster("demo", scheduler_kind="sim", scheduler_config={"scenario": "seed"})
    real_time = make_cluster("sim-1x", scheduler_kind="sim", scheduler_config={"speed": 1})
    client = logged_in_client(bob)

    assert simulated_clock(demo) == {"speed": 60.0}
    assert simulated_clock(real_time) is None
    assert "runs 60× the wall clock" in client.get("/clusters/demo/").content.decode()
    assert 'id="cluster-clock-note"' not in client.get("/clusters/sim-1x/").content.decode()
