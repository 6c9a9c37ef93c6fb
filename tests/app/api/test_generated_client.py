"""Issue #31: a client generated from the published schema (openapi-python-client, into a temp
directory at test time, never committed) lists the recommendations of the live test server
filtered by state, and reads a refusal as the typed error body."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import requests

from diagnosis.models import ApiToken
from tests.support.records import make_recommendation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.lab("lab-client")]

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "gpuobs_client"
CONFIG = f"package_name_override: {PACKAGE}\npost_hooks: []\n"  # no formatter run on it


@pytest.fixture
def token(bob) -> str:
    return ApiToken.issue(bob, "generated client", days=None)[1]


@pytest.fixture
def generated(live_server, token, tmp_path) -> Iterator[ModuleType]:
    """The client package generated from the live server's own schema, importable."""
    schema = requests.get(
        f"{live_server.url}/api/v1/schema?format=json",
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    assert schema.status_code == 200
    (tmp_path / "schema.json").write_bytes(schema.content)
    (tmp_path / "config.yml").write_text(CONFIG)
    done = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(tmp_path / "schema.json"),
            "--config",
            str(tmp_path / "config.yml"),
            "--meta",
            "none",
            "--output-path",
            str(tmp_path / "out" / PACKAGE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout, done.stdout  # every operation was generated
    sys.path.insert(0, str(tmp_path / "out"))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path / "out"))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def test_the_generated_client_lists_recommendations_by_state(
    generated, live_server, token, lab
) -> None:
    proposed = make_recommendation(lab)
    make_recommendation(lab, target="queue:team-a", state="rejected")
    listing = importlib.import_module(f"{PACKAGE}.api.recommendations.recommendations_list")
    states = importlib.import_module(f"{PACKAGE}.models.recommendations_list_state")
    client = generated.AuthenticatedClient(base_url=live_server.url, token=token, prefix="Token")

    with client:
        page = listing.sync(client=client, state=states.RecommendationsListState.PROPOSED)
        everything = listing.sync(client=client)

    assert page.count == 1
    assert [(r.id, r.cluster, r.state.value) for r in page.results] == [
        (proposed.pk, "lab-client", "proposed")
    ]
    assert everything.count == 2


def test_the_generated_client_reads_an_unknown_object_as_the_error_body(
    generated, live_server, token, lab
) -> None:
    one = importlib.import_module(f"{PACKAGE}.api.recommendations.recommendations_retrieve")
    error = importlib.import_module(f"{PACKAGE}.models.error")
    client = generated.AuthenticatedClient(base_url=live_server.url, token=token, prefix="Token")

    with client:
        answer = one.sync_detailed(client=client, id=999_999)

    assert answer.status_code == 404
    assert isinstance(answer.parsed, error.Error)
    assert answer.parsed.detail
