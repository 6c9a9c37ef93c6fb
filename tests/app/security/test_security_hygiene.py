"""Issue #12, defect 8: headers and hostile input through every door -- a CSP, no-store on
authenticated answers, %00 and deep JSON refused with a 4xx, plotly names that cannot carry
links, CSV cells that cannot start a formula, append-only audit rows, ensure_admin's validators."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from diagnosis.charts.figures import plotly_text, recommendation_impact
from diagnosis.middleware import json_depth
from diagnosis.models import AuditEntry, AuditEntryImmutableError, Cluster
from diagnosis.reports.csv_export import safe_cell
from tests.support.builders import SnapshotBuilder
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db


def test_pages_carry_a_strict_script_policy(bob_client, make_cluster):
    make_cluster("csp", metrics_kind="none")
    policy = bob_client.get("/clusters/csp/")["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'none'" in policy


@pytest.mark.parametrize("path", ["/", "/api/v1/clusters/"])
def test_authenticated_answers_are_not_stored_by_caches(bob_client, path):
    assert "no-store" in bob_client.get(path)["Cache-Control"]


@pytest.mark.parametrize(
    "path",
    [
        "/clusters/a%00b/",
        "/api/v1/clusters/a%00b/jobs",
        "/api/v1/clusters/?name=a%00b",
        "/clusters/demo/findings/?rule=x%00",
    ],
)
def test_a_nul_in_a_path_or_filter_is_a_400(bob_client, make_cluster, path):
    make_cluster("demo", metrics_kind="none")
    assert bob_client.get(path).status_code == 400


def test_json_nested_1000_deep_is_a_400_even_without_a_role(nobody):
    body = "[" * 1000 + "]" * 1000
    client = logged_in_client(nobody)
    response = client.post("/api/v1/alertmanager", body, content_type="application/json")
    assert response.status_code == 400


def test_the_depth_counts_brackets_outside_strings_only():
    assert json_depth(json.dumps({"a": ["[[[[", {"b": 1}]}).encode()) == 3


def test_a_tenant_name_is_no_link_in_a_chart():
    assert plotly_text('<a href="https://evil.example">hpo</a>') == (
        '&lt;a href="https://evil.example"&gt;hpo&lt;/a&gt;'
    )


def test_a_queue_name_is_no_link_in_the_impact_charts_subplot_titles():
    figure = recommendation_impact(
        {
            "metrics": [
                {
                    "metric": "wait_p50",
                    "label": "Median wait",
                    "subject": 'queue:<a href="https://evil.example">q</a>',
                    "unit": "s",
                    "current": {"mean": 60.0, "min": 50.0, "max": 70.0},
                    "proposed": {"mean": 30.0, "min": 20.0, "max": 40.0},
                    "verdict": "improves",
                }
            ]
        }
    )
    titles = [a.text for a in figure.layout.annotations]
    assert titles == ['Median wait<br>queue:&lt;a href="https://evil.example"&gt;q&lt;/a&gt;']


@pytest.mark.parametrize("cell", ['=HYPERLINK("http://evil","x")', "+1", "-1+2", "@SUM(A1)"])
def test_a_csv_cell_never_starts_a_formula(cell):
    assert safe_cell(cell) == "'" + cell


def test_a_number_cell_stays_a_number():
    assert safe_cell(-1.5) == -1.5


def test_an_audit_row_cannot_be_overwritten_through_a_new_object():
    row = AuditEntry.objects.create(actor="carol", action="approve", target="queue:a")
    with pytest.raises(AuditEntryImmutableError):
        AuditEntry(pk=row.pk, actor="mallory", action="approve", target="queue:a").save()
    row.refresh_from_db()
    assert row.actor == "carol"


def test_ensure_admin_refuses_a_weak_password(settings):
    settings.GPUOBS_ADMIN_PASSWORD = "admin"
    with pytest.raises(CommandError, match="GPUOBS_ADMIN_PASSWORD is refused"):
        call_command("ensure_admin")


def test_snapshot_import_refuses_a_cluster_name_that_is_no_slug(tmp_path):
    document = SnapshotBuilder(cluster="a b/<x>").node("n1").document()
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CommandError, match="is not a cluster name"):
        call_command("snapshot", "import", str(path))
    assert not Cluster.objects.exists()
