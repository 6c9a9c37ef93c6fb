"""Clusters declared as code (docs/operations.md, "Clusters as code"): ``manage.py clusters
apply -f`` (a file, a folder such as a mounted ConfigMap), idempotent, ``--dry-run`` printing the
diff, configs checked by the adapters' and sources' own declarations, literal secrets refused,
``clusters export`` round-tripping as unchanged; the admins' API for both; ``snapshot import
--cluster`` no longer making a cluster."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from diagnosis.models import AuditEntry, Cluster
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

EAST = {
    "name": "a100-east",
    "scheduler": {"kind": "sim", "config": {"scenario": "small", "seed": 3}},
    "metrics": {
        "kind": "prometheus",
        "config": {"url": "http://prometheus:9090", "bearer_token_env": "GPUOBS_SECRET_PROM"},
    },
}
WEST = {"name": "west", "scheduler": {"kind": "sim"}, "metrics": {"kind": "sim"}}


def write(path: Path, *clusters: dict) -> Path:
    path.write_text(yaml.safe_dump({"kind": "gpuobs.clusters/v1", "clusters": list(clusters)}))
    return path


def clusters(*args: str) -> str:
    out = StringIO()
    call_command("clusters", *args, stdout=out)
    return out.getvalue()


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as raised:
        clusters(*args)
    assert raised.value.returncode == 2
    return str(raised.value)


def test_apply_creates_then_a_second_apply_is_unchanged(tmp_path) -> None:
    spec = write(tmp_path / "clusters.yaml", EAST)

    first = clusters("apply", "-f", str(spec))
    second = clusters("apply", "-f", str(spec))

    east = Cluster.objects.get(name="a100-east")
    assert (east.scheduler_kind, east.metrics_kind, east.dry_run, east.enabled) == (
        "sim",
        "prometheus",
        True,
        True,
    )
    assert east.metrics_config["bearer_token_env"] == "GPUOBS_SECRET_PROM"
    assert "cluster a100-east: created" in first
    assert second.strip() == "cluster a100-east: unchanged"
    assert list(AuditEntry.objects.values_list("action", flat=True)) == ["cluster-created"]


def test_dry_run_prints_the_diff_and_writes_nothing(tmp_path) -> None:
    clusters("apply", "-f", str(write(tmp_path / "c.yaml", EAST)))
    changed = {**EAST, "dry_run": False}

    out = clusters("apply", "-f", str(write(tmp_path / "c.yaml", changed)), "--dry-run")

    assert "cluster a100-east: updated" in out
    assert "  dry_run: True -> False" in out
    assert Cluster.objects.get(name="a100-east").dry_run is True


def test_a_folder_of_files_is_applied_like_a_configmap(tmp_path) -> None:
    write(tmp_path / "east.yaml", EAST)
    write(tmp_path / "west.yml", WEST)
    (tmp_path / "README.txt").write_text("not a cluster file")

    clusters("apply", "-f", str(tmp_path))

    assert sorted(Cluster.objects.values_list("name", flat=True)) == ["a100-east", "west"]


def test_a_literal_secret_is_refused(tmp_path) -> None:
    leaky = {**EAST, "metrics": {"kind": "prometheus", "config": {"url": "http://p:9090"}}}
    leaky["metrics"]["config"]["bearer_token_env"] = "eyJhbGciOi-a-real-token"

    message = refused("apply", "-f", str(write(tmp_path / "c.yaml", leaky)))

    assert "c.yaml: clusters[0].metrics.config.bearer_token_env" in message
    assert "GPUOBS_SECRET_" in message
    assert not Cluster.objects.exists()


def test_every_problem_is_named_by_its_place_and_nothing_is_written(tmp_path) -> None:
    bad = {
        "name": "bad name",
        "scheduler": {"kind": "sim", "config": {"sped": 2}},
        "metrics": {"kind": "prometheus", "config": {}},
        "dry_run": "no",
    }
    message = refused("apply", "-f", str(write(tmp_path / "c.yaml", WEST, bad)))

    assert "clusters[1].name" in message
    assert "clusters[1].scheduler.config.sped: unknown setting" in message
    assert "clusters[1].metrics.config.url: required" in message
    assert "clusters[1].dry_run: expected true or false" in message
    assert not Cluster.objects.exists()  # west is valid, but nothing is half-applied


def test_a_name_declared_twice_is_refused(tmp_path) -> None:
    write(tmp_path / "a.yaml", WEST)
    write(tmp_path / "b.yaml", WEST)

    assert "declared in a.yaml" in refused("apply", "-f", str(tmp_path))


def test_export_round_trips_through_apply_as_unchanged(tmp_path, make_cluster) -> None:
    make_cluster("hand-made", metrics_kind="none", dry_run=False, auto_rollback=True)
    clusters("apply", "-f", str(write(tmp_path / "c.yaml", EAST)))
    exported = tmp_path / "export.yaml"

    clusters("export", "--out", str(exported))
    again = clusters("apply", "-f", str(exported))

    assert again.splitlines() == [
        "cluster a100-east: unchanged",
        "cluster hand-made: unchanged",
    ]


def test_snapshot_import_to_an_unknown_cluster_names_clusters_apply() -> None:
    example = Path(__file__).parents[2] / "fixtures" / "example_snapshot.json"
    with pytest.raises(CommandError) as raised:
        call_command("snapshot", "import", str(example), "--cluster", "nowhere")

    assert raised.value.returncode == 2
    assert "clusters apply" in str(raised.value)
    assert not Cluster.objects.exists()


# -- the API -------------------------------------------------------------------------------------

DOCUMENT = {"kind": "gpuobs.clusters/v1", "clusters": [EAST]}


def test_an_admin_applies_and_exports_through_the_api(alice) -> None:
    client = logged_in_client(alice)

    planned = client.post(
        "/api/v1/clusters/apply/?dry_run=1", DOCUMENT, content_type="application/json"
    )
    applied = client.post("/api/v1/clusters/apply/", DOCUMENT, content_type="application/json")
    exported = client.get("/api/v1/clusters/export/")

    assert planned.json()["changes"][0]["outcome"] == "created"
    assert applied.json()["changes"][0]["outcome"] == "created"
    assert exported.json()["clusters"][0]["name"] == "a100-east"
    again = client.post("/api/v1/clusters/apply/", exported.json(), content_type="application/json")
    assert again.json()["changes"][0]["outcome"] == "unchanged"
    assert AuditEntry.objects.get().actor == "alice"


def test_a_bad_document_is_a_400_naming_the_problems(alice) -> None:
    body = {"kind": "gpuobs.clusters/v1", "clusters": [{**EAST, "metrics": {"kind": "nope"}}]}

    answer = logged_in_client(alice).post(
        "/api/v1/clusters/apply/", body, content_type="application/json"
    )

    assert answer.status_code == 400
    assert answer.json()["problems"][0].startswith("body: clusters[0].metrics.kind")


@pytest.mark.parametrize("who", ["bob", "carol", "erin", "mallory"])
def test_clusters_as_code_are_the_admin_roles_only(request, who) -> None:
    client = logged_in_client(request.getfixturevalue(who))

    assert client.get("/api/v1/clusters/export/").status_code == 403
    posted = client.post("/api/v1/clusters/apply/", DOCUMENT, content_type="application/json")
    assert posted.status_code == 403
    assert not Cluster.objects.exists()


def test_the_schema_describes_apply_and_export(alice) -> None:
    schema = logged_in_client(alice).get("/api/v1/schema", HTTP_ACCEPT="application/json").json()

    assert "/api/v1/clusters/apply/" in schema["paths"]
    assert "/api/v1/clusters/export/" in schema["paths"]
    assert "ClusterDocument" in schema["components"]["schemas"]
