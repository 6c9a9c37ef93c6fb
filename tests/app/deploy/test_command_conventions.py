"""Issue #31: the management commands' one convention (diagnosis/management/cli.py): exit 2 for
bad input or an unknown object (an unknown cluster above all), ``--json`` where a command prints
a table or a summary, and progress of long work on stderr, never with ``--json``."""

from __future__ import annotations

import json
import os
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from diagnosis.models import ApiToken, Cluster
from tests.app.deploy.test_commands import EXAMPLE_DOCUMENT
from tests.core.test_openb import write_small_trace
from tests.support.celery_worker import database_url_of_test_database
from tests.support.commands import manage
from tests.support.world import create_machine_user, sender_token

pytestmark = pytest.mark.django_db

# Every command that takes a cluster by name, with the rest of a good command line.
TAKES_A_CLUSTER = {
    "collect": ["collect", "--cluster", "nope", "--cycles", "1"],
    "report": ["report", "fairness", "--cluster", "nope"],
    "export_openmetrics": ["export_openmetrics", "--cluster", "nope", "--hours", "1"],
    "snapshot export": ["snapshot", "export", "--cluster", "nope"],
    "snapshot import": ["snapshot", "import", str(EXAMPLE_DOCUMENT), "--cluster", "nope"],
    "api_token create": [
        "api_token", "create", "--user", "sender", "--cluster", "nope", "--kind", "events",
    ],
}  # fmt: skip


@pytest.mark.parametrize("argv", TAKES_A_CLUSTER.values(), ids=TAKES_A_CLUSTER.keys())
def test_an_unknown_cluster_exits_2_naming_it(argv) -> None:
    with pytest.raises(CommandError) as raised:
        call_command(*argv, stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2
    assert "nope" in str(raised.value)
    assert not Cluster.objects.filter(name="nope").exists()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            [
                "collect",
                "--prometheus",
                "http://x",
                "--scheduler-snapshot",
                str(EXAMPLE_DOCUMENT),
                "--out",
                "-",
                "--match",
                "nomatch",
            ],
            "--match",
        ),
        (["collect", "--prometheus", "http://x", "--out", "-"], "--scheduler-snapshot"),
        (["export_openmetrics", "--cluster", "lab", "--hours", "0"], "--hours"),
        (["export_openmetrics", "--cluster", "lab", "--hours", "1", "--label", "1x=y"], "--label"),
        (["report", "fairness", "--cluster", "lab", "--user", "nobody"], "--user"),
    ],
    ids=["match", "missing-options", "hours", "label", "unknown-user"],
)
def test_bad_options_exit_2_naming_the_option(lab, argv, named) -> None:
    with pytest.raises(CommandError) as raised:
        call_command(*argv, stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2
    assert named in str(raised.value)


def test_a_cluster_that_is_not_simulated_is_bad_input_for_the_exporter(make_cluster) -> None:
    make_cluster("slurm-1", scheduler_kind="slurm")
    with pytest.raises(CommandError, match="not a simulated cluster") as raised:
        call_command("export_openmetrics", "--cluster", "slurm-1", "--hours", "1")
    assert raised.value.returncode == 2


def test_the_process_exits_2_with_the_message_on_stderr() -> None:
    """What a shell sees, not only what call_command raises."""
    env = {**os.environ, "DATABASE_URL": database_url_of_test_database()}
    result = manage("report", "fairness", "--cluster", "nope", env=env, text=True)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "--cluster: no cluster 'nope'" in result.stderr


# -- --json ---------------------------------------------------------------------------------------


def test_api_token_list_json_parses_and_names_each_tokens_scope(make_cluster) -> None:
    cluster = make_cluster("dgx-pod")
    sender_token(create_machine_user("uploader"), "topology", cluster)
    out = StringIO()
    call_command("api_token", "list", "--json", stdout=out)
    (token,) = json.loads(out.getvalue())
    assert token["user"] == "uploader"
    assert (token["clusters"], token["kinds"]) == (["dgx-pod"], ["topology"])
    assert token["prefix"] == ApiToken.objects.get().prefix
    assert set(token) == {
        "user",
        "name",
        "prefix",
        "clusters",
        "kinds",
        "expires_at",
        "last_used_at",
    }  # never the secret


def test_snapshot_import_json_is_one_object_and_no_progress(tmp_path) -> None:
    out, err = StringIO(), StringIO()
    call_command("snapshot", "import", str(EXAMPLE_DOCUMENT), "--diagnose", "--json", stdout=out,
                 stderr=err)  # fmt: skip
    result = json.loads(out.getvalue())
    assert result["cluster"] == "demo"
    assert result["cycle"] is not None
    assert result["transitions"]  # the example's findings were written
    assert err.getvalue() == ""


def test_collect_cycles_json_is_one_object_per_cycle(lab) -> None:
    out = StringIO()
    call_command("collect", "--cluster", "lab", "--cycles", "2", "--interval", "0", "--json",
                 stdout=out)  # fmt: skip
    cycles = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [c["cycle"] for c in cycles] == [1, 2]
    assert all(c["ok"] and c["gpus"] == 32 for c in cycles)


# -- progress -------------------------------------------------------------------------------------


def test_snapshot_import_diagnose_shows_its_steps_on_stderr() -> None:
    out, err = StringIO(), StringIO()
    call_command("snapshot", "import", str(EXAMPLE_DOCUMENT), "--diagnose", stdout=out, stderr=err)
    steps = err.getvalue().splitlines()
    assert steps[0].endswith(f"reading {EXAMPLE_DOCUMENT}")
    assert "diagnosing and recording the cycle" in steps[1]
    assert steps[-1].endswith("] done")
    assert "stored snapshot of cluster demo" in out.getvalue()  # stdout as before


def test_an_openb_replay_shows_its_steps_unless_json(tmp_path) -> None:
    nodes, pods = write_small_trace(tmp_path)
    argv = ["simulate", "openb", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd"]
    err = StringIO()
    call_command(*argv, stdout=StringIO(), stderr=err)
    assert "replaying 3 pods on 2 nodes under fgd" in err.getvalue()
    assert "done: " in err.getvalue()

    quiet, out = StringIO(), StringIO()
    call_command(*argv, "--json", stdout=out, stderr=quiet)
    assert quiet.getvalue() == ""
    assert json.loads(out.getvalue())["policy"] == "fgd"
