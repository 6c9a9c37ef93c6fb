"""The tenant fairness report end to end: rollups and records written by real cycles, the
report computed from them, and the same numbers on the page, in the API, the CSV, the PDF, the
``report`` command and the emailed subscription."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from pathlib import Path

import pypdf
import pytest
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandError

from diagnosis.actions.notify.subscriptions import (
    send_due_report_subscriptions,
    subscribe_to_report,
)
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import (
    Cluster,
    Finding,
    Job,
    PoolRollup,
    Queue,
    ReportSubscription,
    Tenant,
    TenantRollup,
)
from diagnosis.reports.csv_export import CSV_COLUMNS
from diagnosis.reports.pdf import tenant_table_rows
from diagnosis.reports.period import PeriodError, ReportPeriod
from gpuobs import celery_app
from tests.conftest import REPO_ROOT
from tests.support.builders import SnapshotBuilder
from tests.support.fairness_world import (
    CYCLES,
    PERIOD,
    START,
    STEP,
    record_two_tenant_cycles,
    two_tenant_snapshot,
)
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db
QUERY = f"from={PERIOD['from']}&to={PERIOD['to']}"


@pytest.fixture
def acme():
    return record_two_tenant_cycles()


def api_report(client, query: str = QUERY) -> dict:
    response = client.get(f"/api/v1/clusters/acme/reports/fairness?{query}")
    assert response.status_code == 200, response.content
    return response.json()


def pdf_text(content: bytes) -> tuple[int, str]:
    reader = pypdf.PdfReader(io.BytesIO(content))
    return len(reader.pages), "\n".join(page.extract_text() for page in reader.pages)


# -- what a cycle stores --------------------------------------------------------------------------


def test_each_cycle_stores_a_rollup_per_tenant_and_per_pool(acme):
    assert TenantRollup.objects.filter(cluster=acme).count() == CYCLES * 2
    assert PoolRollup.objects.filter(cluster=acme).count() == CYCLES * 2  # a100 and the cluster
    bravo = TenantRollup.objects.filter(cluster=acme, tenant_name="bravo").latest("as_of")
    assert (bravo.interval_s, bravo.allocated_gpu_s, bravo.fair_gpu_s) == (60, 240, 480)
    assert bravo.demanded_gpu_s == 720
    assert bravo.entitlement_s == pytest.approx(0.25 * 60)


def test_cycles_sync_tenants_and_queues_from_the_snapshot(acme):
    assert set(Tenant.objects.filter(cluster=acme).values_list("name", flat=True)) == {
        "alpha",
        "bravo",
    }
    queue = Queue.objects.get(cluster=acme, name="alpha")
    assert (queue.tenant.name, queue.deserved_gpus) == ("alpha", 12)


def test_cycles_sync_job_records_with_their_tenant_times_and_shape(acme):
    job = Job.objects.get(cluster=acme, external_id="bravo-1")

    assert (job.tenant.name, job.state, job.pods * job.gpus_per_pod) == ("bravo", "running", 4)
    assert job.started_at - job.submitted_at == timedelta(hours=2)


def test_a_job_the_scheduler_stops_listing_is_marked_unlisted(acme):
    later = START + CYCLES * STEP
    record_cycle(acme, two_tenant_snapshot(later, with_b1=False))

    assert Job.objects.get(cluster=acme, external_id="bravo-1").unlisted_since == later
    assert Job.objects.get(cluster=acme, external_id="alpha-1").unlisted_since is None


def test_recording_a_snapshot_again_adds_no_rollup(acme):
    record_cycle(acme, two_tenant_snapshot(START + (CYCLES - 1) * STEP))

    assert TenantRollup.objects.filter(cluster=acme).count() == CYCLES * 2


def test_a_preemption_is_counted_once_for_its_tenant(acme):
    snap = two_tenant_snapshot(START + CYCLES * STEP)
    snap.jobs.loc["bravo-1", "preemptions"] = 1
    record_cycle(acme, snap)
    record_cycle(acme, _with_preemptions(two_tenant_snapshot(START + (CYCLES + 1) * STEP)))

    rows = TenantRollup.objects.filter(cluster=acme, tenant_name="bravo")
    assert sum(rows.values_list("preemptions", flat=True)) == 1


def _with_preemptions(snap):
    snap.jobs.loc["bravo-1", "preemptions"] = 1
    return snap


def test_findings_of_a_tenants_job_are_tagged_with_the_tenant(db):
    cluster = record_two_tenant_cycles("idle", idle=True)

    tagged = dict(
        Finding.objects.filter(cluster=cluster, rule_id="idle-allocation").values_list(
            "subject", "tenant__name"
        )
    )
    assert tagged == {"job:alpha-idle": "alpha", "job:bravo-idle": "bravo"}


# -- the report's numbers -------------------------------------------------------------------------


def test_the_report_json_has_the_hand_computed_numbers(acme, alice_client):
    report = api_report(alice_client)
    alpha, bravo = report["tenants"]

    assert report["jain_index"] == pytest.approx(0.9)
    assert (alpha["tenant"], alpha["usage"], alpha["fair_share"], alpha["ratio"]) == (
        "alpha",
        0.5,
        0.5,
        1.0,
    )
    assert (bravo["usage"], bravo["fair_share"], bravo["ratio"]) == (0.25, 0.5, 0.5)
    assert (alpha["entitlement"], bravo["entitlement"]) == (0.75, 0.25)
    assert bravo["demand"] == pytest.approx(3 * 720 / 3600)


def test_the_report_json_carries_the_documented_tenant_fields(acme, alice_client):
    required = {
        "tenant",
        "entitlement",
        "fair_share",
        "usage",
        "ratio",
        "demand",
        "wait_p50_s",
        "wait_p95_s",
        "starvation_findings",
        "mfu",
    }
    assert all(required <= set(row) for row in api_report(alice_client)["tenants"])


def test_waits_count_the_jobs_that_started_and_those_still_waiting(acme, alice_client):
    alpha, bravo = api_report(alice_client)["tenants"]

    assert (alpha["wait_p50_s"], alpha["jobs_started"], alpha["jobs_waiting"]) == (3600, 1, 0)
    # bravo-1 started after 2 h; bravo-2, submitted 1 h before the first cycle, still waits at
    # the last one (2 min later): 62 min so far
    assert (bravo["jobs_started"], bravo["jobs_waiting"]) == (1, 1)
    assert bravo["waits"]["2-8"] == {
        "jobs": 2,
        "jobs_started": 1,
        "jobs_waiting": 1,
        "p50_s": (7200 + 3720) / 2,
        "p95_s": pytest.approx(3720 + 0.95 * (7200 - 3720)),
    }


def test_a_starving_tenant_shows_its_longest_wait_alike_on_page_csv_api_and_pdf(db, alice_client):
    """research's only job waits 26 h and never starts: its waits are that, not "none"."""
    cluster = Cluster.objects.create(name="acme", enabled=False)
    snapshot = (
        SnapshotBuilder(as_of=START, window_s=60, cluster="acme")
        .pool("a100", nodes=2, gpus=8)
        .queue("alpha", deserved_gpus=8)
        .queue("research", deserved_gpus=8)
        .job("alpha-1", tenant="alpha", gpus_per_pod=8, node="a100-000", waited="1h", ran="1h")
        .job("research-big", tenant="research", state="pending", gpus_per_pod=16, waited="26h")
        .build()
    )
    record_cycle(cluster, snapshot)

    research = next(t for t in api_report(alice_client)["tenants"] if t["tenant"] == "research")
    assert (research["jobs_started"], research["jobs_waiting"]) == (0, 1)
    assert (research["wait_p50_s"], research["waits"]["9-64"]["jobs_waiting"]) == (93600, 1)
    row = next(
        r
        for r in csv.DictReader(
            io.StringIO(alice_client.get(f"/clusters/acme/fairness.csv?{QUERY}").content.decode())
        )
        if r["tenant"] == "research"
    )
    assert (float(row["wait_p95_s"]), row["jobs_waiting"], row["jobs_waiting_9_64"]) == (
        93600,
        "1",
        "1",
    )
    page = alice_client.get(f"/clusters/acme/fairness/?{QUERY}").content.decode()
    cells = re.findall(
        r'<td class="num[^"]*">([^<]*)</td>',
        re.search(r'data-tenant="research">(.*?)</tr>', page, re.S).group(1),
    )
    assert cells[5:9] == ["26.0 h", "26.0 h", "0", "1"]  # wait p50, p95, started, waiting
    _, text = pdf_text(alice_client.get(f"/clusters/acme/fairness.pdf?{QUERY}").content)
    lines = text.splitlines()
    assert lines[lines.index("research") :][6:10] == ["26.0 h", "26.0 h", "0", "1"]


def test_a_period_without_cycles_has_no_rows(acme, alice_client):
    report = api_report(alice_client, "from=2026-01-01&to=2026-01-02")

    assert (report["cycles"], report["tenants"], report["jain_index"]) == (0, [], None)


def test_the_page_api_csv_and_pdf_show_the_same_numbers(acme, alice_client):
    report = api_report(alice_client)
    page = alice_client.get(f"/clusters/acme/fairness/?{QUERY}").content.decode()
    rows = list(
        csv.DictReader(
            io.StringIO(alice_client.get(f"/clusters/acme/fairness.csv?{QUERY}").content.decode())
        )
    )
    _, text = pdf_text(alice_client.get(f"/clusters/acme/fairness.pdf?{QUERY}").content)

    for tenant, row in zip(report["tenants"], rows, strict=True):
        assert row["tenant"] == tenant["tenant"]
        assert float(row["usage"]) == tenant["usage"]
        assert float(row["ratio"]) == tenant["ratio"]
        assert float(row["wait_p50_s"]) == tenant["wait_p50_s"]
        shown = f"{tenant['usage'] * 100:.1f}%"
        table_row = re.search(rf'data-tenant="{tenant["tenant"]}">(.*?)</tr>', page, re.S)
        assert shown in table_row.group(1)
        lines = text.splitlines()
        cells = lines[lines.index(tenant["tenant"]) :][:5]  # tenant, entitled, fair, usage, ratio
        assert cells[3:] == [shown, f"{tenant['ratio']:.2f}"]


# -- exports --------------------------------------------------------------------------------------


def test_the_csv_has_one_row_per_tenant_with_the_documented_columns(acme, alice_client):
    response = alice_client.get(f"/clusters/acme/fairness.csv?{QUERY}")
    reader = csv.DictReader(io.StringIO(response.content.decode()))

    assert response["Content-Type"].startswith("text/csv")
    assert reader.fieldnames == list(CSV_COLUMNS)
    assert [row["tenant"] for row in reader] == ["alpha", "bravo"]


def test_docs_describe_every_csv_column():
    docs = (REPO_ROOT / "docs" / "fairness.md").read_text()

    assert [c for c in CSV_COLUMNS if f"`{c}`" not in docs] == []


def test_the_pdf_is_a_multi_page_pdf_naming_every_tenant(acme, alice_client):
    response = alice_client.get(f"/clusters/acme/fairness.pdf?{QUERY}")
    pages, text = pdf_text(response.content)

    assert response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF-")
    assert pages > 1
    assert "alpha" in text
    assert "bravo" in text


def test_the_command_writes_json_with_jain_and_tenants(acme, tmp_path: Path):
    out = tmp_path / "report.json"
    call_command(
        "report", "fairness", cluster="acme", start=PERIOD["from"], end=PERIOD["to"],
        format="json", out=str(out),
    )  # fmt: skip

    report = json.loads(out.read_text())
    assert report["jain_index"] == pytest.approx(0.9)
    assert [t["tenant"] for t in report["tenants"]] == ["alpha", "bravo"]


@pytest.mark.parametrize(("kind", "magic"), [("csv", b"cluster,from,to,tenant"), ("pdf", b"%PDF-")])
def test_the_command_writes_csv_and_pdf(acme, tmp_path: Path, kind: str, magic: bytes):
    out = tmp_path / f"report.{kind}"
    call_command(
        "report", "fairness", cluster="acme", start=PERIOD["from"], end=PERIOD["to"],
        format=kind, out=str(out),
    )  # fmt: skip

    assert out.read_bytes().startswith(magic)


def test_the_command_as_a_manager_reports_only_their_tenants(acme, mallory, tmp_path: Path):
    Tenant.objects.get(cluster=acme, name="bravo").managers.add(mallory)
    out = tmp_path / "report.json"
    call_command(
        "report", "fairness", cluster="acme", start=PERIOD["from"], end=PERIOD["to"],
        user="mallory", out=str(out),
    )  # fmt: skip

    assert [t["tenant"] for t in json.loads(out.read_text())["tenants"]] == ["bravo"]


def test_the_command_names_a_bad_option(acme):
    with pytest.raises(CommandError, match="--to"):
        call_command("report", "fairness", cluster="acme", start="2026-11-29", end="soon")


# -- periods --------------------------------------------------------------------------------------


def test_a_preset_ends_at_the_given_end():
    period = ReportPeriod.parse({"period": "7d"}, default_end=START)

    assert (period.end - period.start, period.preset) == (timedelta(days=7), "7d")


def test_a_custom_range_takes_dates_as_midnight_utc():
    period = ReportPeriod.parse({"from": "2026-11-01", "to": "2026-11-02"}, default_end=START)

    assert period.seconds == 86400
    assert period.start.isoformat() == "2026-11-01T00:00:00+00:00"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"from": "2026-11-02", "to": "2026-11-01"}, "to"),
        ({"from": "yesterday", "to": "2026-11-01"}, "from"),
        ({"from": "2026-11-01"}, "to"),
        ({"period": "1y"}, "period"),
        ({"from": "2020-01-01", "to": "2026-01-01"}, "to"),
    ],
)
def test_a_bad_period_names_the_field(query, field):
    with pytest.raises(PeriodError) as error:
        ReportPeriod.parse(query, default_end=START)
    assert error.value.field == field


def test_a_bad_period_is_a_400_naming_the_field(acme, alice_client):
    response = alice_client.get("/api/v1/clusters/acme/reports/fairness?from=x&to=2026-11-01")

    assert response.status_code == 400
    assert "from" in response.json()["errors"]


# -- email subscriptions --------------------------------------------------------------------------


def test_a_subscriber_gets_the_pdf_by_email(acme, mallory):
    Tenant.objects.get(cluster=acme, name="alpha").managers.add(mallory)
    subscribe_to_report(mallory, acme, "weekly")

    assert send_due_report_subscriptions(now=START + timedelta(hours=1)) == 1

    [message] = mail.outbox
    [(name, content, mimetype)] = message.attachments
    assert message.to == ["mallory@example.org"]
    assert (name.endswith(".pdf"), mimetype) == (True, "application/pdf")
    _, text = pdf_text(content)
    assert "alpha" in text
    assert "bravo" not in text


def test_a_weekly_report_is_not_sent_again_within_the_week(acme, mallory):
    Tenant.objects.get(cluster=acme, name="alpha").managers.add(mallory)
    subscribe_to_report(mallory, acme, "weekly")
    send_due_report_subscriptions(now=START)

    assert send_due_report_subscriptions(now=START + timedelta(days=6)) == 0
    assert send_due_report_subscriptions(now=START + timedelta(days=7)) == 1


def test_a_subscriber_who_may_no_longer_read_the_cluster_gets_nothing(acme, mallory):
    subscribe_to_report(mallory, acme, "monthly")  # she manages no tenant of acme

    assert send_due_report_subscriptions(now=START) == 0
    assert mail.outbox == []
    assert "no longer read" in ReportSubscription.objects.get(user=mallory).last_error


def test_the_page_subscribes_and_cancels(acme, bob):
    client = logged_in_client(bob)
    client.post("/clusters/acme/fairness/subscription/", {"frequency": "monthly"})
    assert ReportSubscription.objects.get(user=bob, cluster=acme).frequency == "monthly"

    client.post("/clusters/acme/fairness/subscription/", {"frequency": ""})
    assert not ReportSubscription.objects.filter(user=bob).exists()


def test_beat_checks_the_subscriptions_hourly():
    entry = celery_app.conf.beat_schedule["fairness report subscriptions"]
    assert (entry["task"], entry["schedule"]) == ("diagnosis.tasks.send_report_subscriptions", 3600)


def test_a_namespaced_job_id_has_its_page_and_api_answer(alice_client):
    cluster = Cluster.objects.create(name="kube", enabled=False)
    snap = (
        SnapshotBuilder(as_of=START, cluster="kube")
        .pool("a100", nodes=1, gpus=8)
        .queue("team", deserved_gpus=8)
        .job("team-ns/trainer-0", tenant="team", gpus_per_pod=8, node="a100-000")
        .build()
    )
    record_cycle(cluster, snap)

    assert alice_client.get("/clusters/kube/jobs/team-ns/trainer-0/").status_code == 200
    body = alice_client.get("/api/v1/clusters/kube/jobs/team-ns/trainer-0").json()
    assert (body["id"], body["tenant"]) == ("team-ns/trainer-0", "team")


def _page_table(page: str, table_id: str) -> dict[str, dict[str, str]]:
    """A table of the page as {column: {tenant: cell text}}."""
    table = re.search(rf'id="{table_id}">(.*?)</table>', page, re.S).group(1)
    headers = [
        re.sub(r"<[^>]+>", "", h).strip()
        for h in re.findall(r"<th scope=\"col\"[^>]*>(.*?)</th>", table)
    ]
    columns: dict[str, dict[str, str]] = {h: {} for h in headers}
    assert len(columns) == len(headers), headers  # no two columns of one table alike
    for tenant, row in re.findall(r'<tr data-tenant="([^"]+)"[^>]*>(.*?)</tr>', table, re.S):
        cells = [
            re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        for header, cell in zip(headers, cells, strict=True):
            columns[header][tenant] = cell
    return columns


def test_every_column_name_means_one_thing_and_gpu_hours_have_one_decimal(db, alice_client):
    """One name, one meaning: the page's tenant and productive tables (a column both show
    shows the same figures), the CSV and the PDF's tenant table name no two columns alike
    (two "Idle GPU-h" meant two different sums); GPU-hours have one decimal in every row."""
    record_two_tenant_cycles("idle", idle=True)
    query = f"from={PERIOD['from']}&to={PERIOD['to']}"
    page = alice_client.get(f"/clusters/idle/fairness/?{query}").content.decode()
    tenants, productive = _page_table(page, "tenant-table"), _page_table(page, "productive-table")
    for shared in (set(tenants) & set(productive)) - {"Tenant"}:
        assert tenants[shared] == productive[shared], shared
    assert {"Held idle GPU-h", "Allocated-idle GPU-h"} <= set(tenants) | set(productive)
    gpu_hours = [
        cell
        for table in (tenants, productive)
        for header, cells in table.items()
        if header.endswith("GPU-h")
        for cell in cells.values()
    ]
    assert len(gpu_hours) >= 12  # 6 columns x 2 tenants
    assert all(re.fullmatch(r"[\d,]+\.\d", cell) for cell in gpu_hours), gpu_hours
    response = alice_client.get(f"/clusters/idle/fairness.csv?{query}")
    fields = next(csv.reader(io.StringIO(response.content.decode())))
    assert len(fields) == len(set(fields))
    assert {"mfu_weighted_gpu_hours", "held_idle_gpu_hours"} <= set(fields)
    assert not {"productive_gpu_hours", "idle_gpu_hours"} & set(fields)
    header = tenant_table_rows(())[0]
    assert len(header) == len(set(header))
