"""Issue #31: the ``gpuobs`` command line (gpuobs_cli/) against the live test server, with real
hashed API tokens of the world's people: what it lists and shows, a request approved only by a
second person, and its exit codes -- 0 done, 2 refused as given, 1 the server or the network
failed (docs/cli.md "Exit codes")."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnosis.models import ApiToken, Recommendation
from gpuobs_cli.main import COLUMNS, main
from tests.support.records import make_recommendation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.lab("lab-cli")]

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def gpuobs(live_server, tmp_path, celery_eager, capsys):
    """``gpuobs(person, *argv)``: the command line as ``person`` (a real hashed token, as
    ``manage.py api_token`` issues), returning its exit code, stdout and stderr."""

    def run(person, *argv: str) -> tuple[int, str, str]:
        _, key = ApiToken.issue(person, "cli", days=None)
        environ = {
            "GPUOBS_URL": live_server.url,
            "GPUOBS_TOKEN": key,
            "XDG_CONFIG_HOME": str(tmp_path),  # no config file of the machine's
        }
        capsys.readouterr()
        code = main(list(argv), environ)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def rec(lab) -> Recommendation:
    return make_recommendation(
        lab, impact={"summary": "Raise queue team-b's weight from 1 to 3.", "verdict": "improves"}
    )


def test_clusters_are_listed_as_a_table_and_shown_as_json(gpuobs, bob, lab) -> None:
    code, table, _ = gpuobs(bob, "clusters", "list")
    assert code == 0
    header, row = table.splitlines()
    assert header.split() == list(COLUMNS["clusters"])
    assert row.split()[:2] == ["lab-cli", "sim"]
    assert header.startswith("name ")

    code, out, _ = gpuobs(bob, "clusters", "show", "lab-cli", "--json")
    assert code == 0
    assert json.loads(out)["name"] == "lab-cli"


def test_recommendations_are_filtered_by_state(gpuobs, bob, lab, rec) -> None:
    make_recommendation(lab, target="queue:team-a", state="rejected")

    code, out, _ = gpuobs(bob, "--json", "recommendations", "list", "--state", "proposed")

    assert code == 0
    assert [(r["id"], r["state"]) for r in json.loads(out)] == [(rec.pk, "proposed")]


def test_approving_needs_a_second_person(gpuobs, carol, dave, rec) -> None:
    code, out, _ = gpuobs(carol, "recommendations", "request", str(rec.pk))
    assert code == 0
    assert out.startswith(f"recommendation {rec.pk}: requested")

    code, out, err = gpuobs(carol, "recommendations", "approve", str(rec.pk))
    assert (code, out) == (2, "")
    assert err.strip() == (
        "gpuobs: refused (HTTP 403): "
        "a change must be approved by someone other than the person who asked"
    )
    rec.refresh_from_db()
    assert rec.state == "proposed"

    code, out, _ = gpuobs(dave, "recommendations", "approve", str(rec.pk))
    assert code == 0
    assert out.startswith(f"recommendation {rec.pk}: approved")
    rec.refresh_from_db()
    assert (rec.state, rec.approved_by) == ("approved", dave)


def test_an_unknown_object_is_exit_2(gpuobs, bob, lab) -> None:
    code, _, err = gpuobs(bob, "recommendations", "show", "999999")
    assert code == 2
    assert "(HTTP 404)" in err
    assert gpuobs(bob, "clusters", "show", "nowhere")[0] == 2
    assert gpuobs(bob, "incidents", "list", "--cluster", "../recommendations")[0] == 2


def test_a_bad_filter_is_exit_2_naming_the_field(gpuobs, bob, lab) -> None:
    code, _, err = gpuobs(bob, "findings", "list", "--cluster", "lab-cli", "--state", "molten")
    assert code == 2
    assert "gpuobs: refused (HTTP 400): invalid request: state" in err
    assert "  state: one of " in err


def test_a_bad_argument_is_a_usage_error_exit_2(gpuobs, bob, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["recommendations", "show", "abc"], {})
    assert stopped.value.code == 2
    assert "expected a positive integer id, got 'abc'" in capsys.readouterr().err


def test_a_wrong_token_is_exit_2(live_server, tmp_path, capsys) -> None:
    environ = {"GPUOBS_URL": live_server.url, "GPUOBS_TOKEN": "0" * 40}
    assert main(["clusters", "list"], {**environ, "XDG_CONFIG_HOME": str(tmp_path)}) == 2
    assert "(HTTP 401)" in capsys.readouterr().err


def test_url_and_token_come_from_the_config_file(live_server, tmp_path, bob, lab, capsys) -> None:
    _, key = ApiToken.issue(bob, "cli", days=None)
    (tmp_path / "token").write_text(key + "\n")
    config = tmp_path / "gpuobs" / "cli.toml"
    config.parent.mkdir()
    config.write_text(f'url = "{live_server.url}"\ntoken_file = "{tmp_path / "token"}"\n')

    assert main(["--json", "clusters", "list"], {"XDG_CONFIG_HOME": str(tmp_path)}) == 0
    assert [c["name"] for c in json.loads(capsys.readouterr().out)] == ["lab-cli"]


class _BadGateway(http.server.BaseHTTPRequestHandler):
    """What a reverse proxy answers when gpuobs is down: a 502 with an HTML page."""

    def do_GET(self) -> None:
        body = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
        self.send_response(502)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def bad_gateway() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _BadGateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def nothing_listening() -> str:
    """A loopback URL nothing listens on (a port bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_server_error_or_no_server_is_exit_1(
    bad_gateway, nothing_listening, tmp_path, capsys
) -> None:
    environ = {"GPUOBS_TOKEN": "x", "XDG_CONFIG_HOME": str(tmp_path)}
    assert main(["clusters", "list"], {**environ, "GPUOBS_URL": bad_gateway}) == 1
    assert "gpuobs: failed (HTTP 502)" in capsys.readouterr().err

    assert main(["clusters", "list"], {**environ, "GPUOBS_URL": nothing_listening}) == 1
    assert "gpuobs: failed: cannot reach" in capsys.readouterr().err


def test_the_console_script_runs_without_the_server_code(live_server, bob, lab) -> None:
    """``python -m gpuobs_cli`` in a fresh interpreter: it answers, and no module of Django or
    of the server was loaded to do it."""
    _, key = ApiToken.issue(bob, "cli", days=None)
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['gpuobs', '--json', 'clusters', 'list']\n"
        "try:\n"
        "    runpy.run_module('gpuobs_cli', run_name='__main__')\n"
        "finally:\n"
        "    loaded = {m.split('.')[0] for m in sys.modules}\n"
        "    print(sorted(loaded & {'django', 'rest_framework', 'diagnosis', 'gpuobs'}),"
        " file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        env={"GPUOBS_URL": live_server.url, "GPUOBS_TOKEN": key, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [c["name"] for c in json.loads(done.stdout)] == ["lab-cli"]
    assert done.stderr.strip().splitlines()[-1] == "[]"


HARM = "hpo's share 44.2% → 45.1% against a fair share of 40.2%"


def test_a_predicted_harm_is_named_and_approved_only_when_confirmed(gpuobs, carol, dave, lab):
    """The impact as tests/app/workflow/test_harm_confirmation.py plants it."""
    rec = make_recommendation(
        lab,
        "placement-policy",
        "pool:a100",
        {"from": "spread", "to": "binpack"},
        impact={"verdict": "harms", "harm": [HARM], "summary": "Binpack pool a100."},
    )
    assert gpuobs(carol, "recommendations", "request", str(rec.pk))[0] == 0

    code, _, err = gpuobs(dave, "recommendations", "approve", str(rec.pk))
    assert code == 2
    assert err.startswith("gpuobs: refused (HTTP 409): ")
    assert f"  predicted harm: {HARM}\n  approve anyway with --confirm-harm" in err

    code, out, _ = gpuobs(dave, "recommendations", "approve", str(rec.pk), "--confirm-harm")
    assert code == 0
    assert out.startswith(f"recommendation {rec.pk}: approved")
