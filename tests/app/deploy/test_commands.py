"""The command-line contract: snapshot validate/export/import, diagnose and rules_doc."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from diagnosis.edge.schedulers.registry import capabilities_of
from diagnosis.management.snapshot_input import load_snapshot_argument
from diagnosis.models import Cluster, Finding, Snapshot
from tests.conftest import REPO_ROOT
from tests.support.builders import SnapshotBuilder
from tests.support.commands import manage

EXAMPLE_DOCUMENT = REPO_ROOT / "tests" / "fixtures" / "example_snapshot.json"


@pytest.fixture
def bad_snapshot(tmp_path):
    document = json.loads(EXAMPLE_DOCUMENT.read_text())
    document["jobs"][0]["state"] = "sleeping"
    document["nodes"][0]["state"] = "asleep"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def busy_snapshot(tmp_path):
    builder = SnapshotBuilder(cluster="lab").pool("a100", nodes=2)
    builder.job("idle", node="a100-000", waited="3h", util=0.0, fb_used_frac=0.05)
    builder.job("big", state="pending", pods=2, gpus_per_pod=8, waited="6h")
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(builder.document()))
    return path


# -- snapshot validate -----------------------------------------------------------------------------


def test_validate_accepts_the_example_document():
    result = manage("snapshot", "validate", str(EXAMPLE_DOCUMENT))
    assert result.returncode == 0, result.stderr
    assert b"valid gpuobs.snapshot/v1 of cluster demo" in result.stdout


def test_validate_rejects_with_every_error_and_exit_2(bad_snapshot):
    result = manage("snapshot", "validate", str(bad_snapshot))
    assert result.returncode == 2
    assert result.stdout == b""
    assert b"jobs[0].state: 'sleeping' is not one of" in result.stderr
    assert b"nodes[0].state: 'asleep' is not one of" in result.stderr


def test_validate_reports_a_missing_file(tmp_path):
    result = manage("snapshot", "validate", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert b"cannot read" in result.stderr


# -- snapshot import / export ----------------------------------------------------------------------


@pytest.mark.django_db
def test_import_stores_the_snapshot_and_creates_a_dry_run_cluster(busy_snapshot):
    out = StringIO()
    call_command("snapshot", "import", str(busy_snapshot), stdout=out)
    cluster = Cluster.objects.get(name="lab")
    assert cluster.dry_run
    assert not cluster.enabled
    assert Snapshot.objects.get(cluster=cluster).load_document()["cluster"] == "lab"
    assert "created cluster lab" in out.getvalue()


@pytest.mark.django_db
def test_import_with_diagnose_records_findings(busy_snapshot):
    call_command("snapshot", "import", str(busy_snapshot), "--diagnose", stdout=StringIO())
    subjects = set(Finding.objects.values_list("rule_id", "subject"))
    assert ("idle-allocation", "job:idle") in subjects


@pytest.mark.django_db
def test_import_of_a_bad_file_stores_nothing(bad_snapshot):
    with pytest.raises(CommandError):
        call_command("snapshot", "import", str(bad_snapshot), stdout=StringIO(), stderr=StringIO())
    assert not Snapshot.objects.exists()
    assert not Cluster.objects.exists()


@pytest.mark.django_db
def test_export_writes_back_what_was_imported(busy_snapshot, tmp_path):
    call_command("snapshot", "import", str(busy_snapshot), stdout=StringIO())
    out = tmp_path / "out.json"
    call_command("snapshot", "export", "--cluster", "lab", "--out", str(out), stdout=StringIO())
    exported = json.loads(out.read_text())
    original = json.loads(busy_snapshot.read_text())
    assert exported["as_of"] == original["as_of"]
    assert [j["id"] for j in exported["jobs"]] == [j["id"] for j in original["jobs"]]


@pytest.mark.django_db
def test_export_of_an_unknown_cluster_fails_clearly():
    with pytest.raises(CommandError, match="--cluster: no cluster 'ghost'") as raised:
        call_command("snapshot", "export", "--cluster", "ghost")
    assert raised.value.returncode == 2


# -- diagnose --------------------------------------------------------------------------------------


def test_diagnose_json_has_the_contract_keys(busy_snapshot):
    result = manage("diagnose", str(busy_snapshot), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) >= {"as_of", "findings", "errors", "not_judged", "accounting"}
    finding = next(f for f in report["findings"] if f["rule"] == "idle-allocation")
    assert set(finding) == {"rule", "subject", "severity", "summary", "evidence"}
    assert finding["subject"] == "job:idle"
    buckets = report["accounting"]["cluster"]["buckets"]
    assert sum(b["gpus"] for b in buckets.values()) == 16


def test_diagnose_set_changes_a_threshold(busy_snapshot):
    result = manage(
        "diagnose", str(busy_snapshot), "--json", "--set", "idle-allocation.min_runtime=14400"
    )
    report = json.loads(result.stdout)
    assert not [f for f in report["findings"] if f["rule"] == "idle-allocation"]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("idle-allocation.min_runtime=soon", b"expected a number"),
        ("nope.x=1", b"unknown rule 'nope'"),
        ("idle-allocation", b"expected RULE.THRESHOLD=VALUE"),
    ],
)
def test_diagnose_refuses_a_bad_set(busy_snapshot, setting, message):
    result = manage("diagnose", str(busy_snapshot), "--set", setting)
    assert result.returncode == 2
    assert result.stdout == b""
    assert message in result.stderr


def test_diagnose_of_a_bad_snapshot_prints_nothing_to_stdout(bad_snapshot):
    result = manage("diagnose", str(bad_snapshot), "--json")
    assert result.returncode == 2
    assert result.stdout == b""
    assert b"jobs[0].state" in result.stderr


def test_diagnose_table_groups_by_severity(busy_snapshot):
    result = manage("diagnose", str(busy_snapshot))
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert "WARNING (" in text
    assert "idle-allocation" in text
    assert "GPU-HOURS" in text


def test_diagnose_reads_stdin():
    result = manage("diagnose", "-", "--json", stdin=EXAMPLE_DOCUMENT.read_bytes())
    assert result.returncode == 0, result.stderr
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == ["xid"]


# -- rules_doc -------------------------------------------------------------------------------------


def test_rules_doc_is_up_to_date():
    """docs/rules.md is generated from the rule modules: regenerate it when a rule changes."""
    result = manage("rules_doc", "--check")
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


def test_rules_doc_check_notices_a_stale_file(tmp_path):
    stale = tmp_path / "rules.md"
    stale.write_text("# old\n")
    result = manage("rules_doc", "--check", "--out", str(stale))
    assert result.returncode == 1
    assert b"is stale" in result.stderr


def test_a_snapshot_file_gets_the_advice_its_scheduler_kind_declares(tmp_path) -> None:
    document = json.loads(EXAMPLE_DOCUMENT.read_text())
    document["scheduler"] = {"kind": "volcano"}
    path = tmp_path / "volcano.json"
    path.write_text(json.dumps(document))

    loaded = load_snapshot_argument(BaseCommand(), str(path))

    advice = capabilities_of("volcano").gang_advice
    assert advice is not None
    assert loaded.gang_advice() == advice.setting


# -- hostile files (issue #28, item 7) ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[" * 100_000 + "]" * 100_000, "$: the JSON is nested too deeply"),
        (None, "jobs[0].priority: must lie within"),
    ],
    ids=["100000-deep", "priority-1e20"],
)
def test_a_hostile_file_is_an_error_line_and_exit_2_never_a_traceback(tmp_path, text, error):
    if text is None:
        document = json.loads(EXAMPLE_DOCUMENT.read_text())
        document["jobs"][0]["priority"] = 1e20
        text = json.dumps(document)
    path = tmp_path / "hostile.json"
    path.write_text(text)
    stderr = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("snapshot", "import", str(path), stdout=StringIO(), stderr=stderr)
    assert raised.value.returncode == 2
    assert error in stderr.getvalue()
    assert not Snapshot.objects.exists()


@pytest.mark.django_db
def test_import_diagnose_clips_a_300_character_job_id_as_a_cycle_does(tmp_path):
    builder = SnapshotBuilder(cluster="lab").pool("a100", nodes=1)
    builder.job("j" * 300, node="a100-000")
    path = tmp_path / "long.json"
    path.write_text(json.dumps(builder.document()))
    call_command("snapshot", "import", str(path), "--diagnose", stdout=StringIO())
    stored = Snapshot.objects.get().load_document()
    assert [len(j["id"]) for j in stored["jobs"]] == [255]
    assert any("clipped to 255" in r for r in stored["collection"]["repaired"])


@pytest.mark.django_db
def test_import_replaces_a_nul_the_json_text_escapes(tmp_path):
    builder = SnapshotBuilder(cluster="lab").pool("a100", nodes=1)
    document = builder.job("j1", node="a100-000").document()
    document["jobs"][0]["name"] = "bad\x00name"
    path = tmp_path / "nul.json"
    path.write_text(json.dumps(document))  # the NUL as the escape \u0000
    call_command("snapshot", "import", str(path), "--diagnose", stdout=StringIO())
    stored = Snapshot.objects.get().load_document()
    assert [j["name"] for j in stored["jobs"]] == ["bad\ufffdname"]
    assert any("NUL" in r for r in stored["collection"]["repaired"])
