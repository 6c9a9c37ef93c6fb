"""The Slurm adapter over slurmrestd (``transport: slurmrestd``): the v0.0.4x answers recorded
from SchedMD's OpenAPI schemas (tests/fixtures/slurm/v0.0.4x), served by a loopback server."""

from __future__ import annotations

import json

import pytest

from diagnosis.edge.errors import SchedulerError
from diagnosis.edge.request_id import current as request_id
from diagnosis.edge.schedulers.registry import adapter_for
from diagnosis.edge.schedulers.slurm.adapter import CONF_DIR_ENV, SlurmAdapter
from tests.conftest import REPO_ROOT
from tests.support.rest_server import serving

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "slurm"
TOKEN_ENV = "GPUOBS_SECRET_SLURM_JWT"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.test.signature"


def fixture(version: str, name: str) -> dict:
    return json.loads((FIXTURES / version / name).read_text())


def routes(version: str) -> dict:
    return {
        f"/slurm/{version}/nodes": (200, fixture(version, "scontrol_show_nodes.json")),
        f"/slurm/{version}/jobs": (200, fixture(version, "squeue.json")),
        f"/slurm/{version}/partitions": (200, fixture(version, "partitions.json")),
    }


@pytest.fixture(autouse=True)
def bound_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deployment binds the JWT to the slurm integration (docs/integrations.md)."""
    monkeypatch.setenv("GPUOBS_SECRET_BINDINGS", f"{TOKEN_ENV}=slurm")


@pytest.fixture(autouse=True)
def conf_dir(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's folder is the deployment's Slurm conf folder (its slurm.conf lives there)."""
    monkeypatch.setenv(CONF_DIR_ENV, str(tmp_path))


def adapter(url: str, version: str, tmp_path, **config) -> SlurmAdapter:
    return adapter_for(  # type: ignore[return-value]
        "slurm",
        {
            "transport": "slurmrestd",
            "rest_url": url,
            "rest_token_env": TOKEN_ENV,
            "rest_user": "gpuobs",
            "rest_version": version,
            "slurm_conf": str(tmp_path / "slurm.conf"),  # no gres.conf beside it
            "gpu_models": {"h100": "H100-SXM5-80GB"},
            **config,
        },
        cluster="rest",
    )


@pytest.mark.parametrize("version", ["v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44"])
def test_slurmrestd_reads_the_same_state_as_the_commands(version, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with serving(routes(version)) as server:
        slurm = adapter(server.url, version, tmp_path)
        state = slurm.read_state()
        batch = slurm.read_events(None)

    nodes = {n["name"]: (n["pool"], n["gpus"], n["state"]) for n in state.nodes}
    jobs = {j["id"]: j for j in state.jobs}
    assert nodes == {
        "n1": ("gpu", 8, "ready"),
        "n2": ("gpu", 8, "ready"),
        "s1": ("small", 4, "cordoned"),
    }
    assert jobs["2"]["allocation"] == [
        {"node": "n1", "gpus": [2, 3, 4]},
        {"node": "n2", "gpus": [0, 1, 2]},
    ]
    # LLN shows in select_type; a partition's LLN=YES flag is not in the API: gpu is unknown.
    assert state.scheduler["placement"] == {"small": "spread"}
    assert [e["node"] for e in batch.events if e["kind"] == "node_drained"] == ["s1"]
    assert [r.path for r in server.requests] == [
        f"/slurm/{version}/nodes",
        f"/slurm/{version}/jobs",
        f"/slurm/{version}/partitions",
    ]
    assert {r.headers["x-slurm-user-token"] for r in server.requests} == {TOKEN}
    assert {r.headers["x-slurm-user-name"] for r in server.requests} == {"gpuobs"}
    assert all(TOKEN not in c["command"] for c in slurm.log.commands)


def test_slurmrestd_reads_carry_the_request_id(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    token = request_id.set("req-31i-slurm")
    try:
        with serving(routes("v0.0.44")) as server:
            adapter(server.url, "v0.0.44", tmp_path).read_state()
    finally:
        request_id.reset(token)

    assert {r.headers["x-request-id"] for r in server.requests} == {"req-31i-slurm"}


def test_a_missing_token_is_a_permanent_error_naming_the_variable(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with (
        serving(routes("v0.0.42")) as server,
        pytest.raises(SchedulerError, match=TOKEN_ENV) as caught,
    ):
        adapter(server.url, "v0.0.42", tmp_path).read_state()

    assert caught.value.permanent
    assert server.requests == []


@pytest.mark.parametrize(
    ("answer", "permanent", "words"),
    [
        ((401, {"errors": [{"description": "Authentication failure"}]}), True, "HTTP 401"),
        ((502, b"bad gateway"), False, "HTTP 502"),
        (
            (200, {"nodes": [], "errors": [{"error": "Unable to contact slurmctld"}]}),
            False,
            "slurmctld",
        ),
    ],
)
def test_slurmrestd_failures_are_scheduler_errors(
    answer, permanent, words, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with (
        serving({**routes("v0.0.42"), "/slurm/v0.0.42/nodes": answer}) as server,
        pytest.raises(SchedulerError, match=words) as caught,
    ):
        adapter(server.url, "v0.0.42", tmp_path).read_state()

    assert caught.value.permanent is permanent
    assert TOKEN not in str(caught.value)


def test_slurmrestd_transport_refuses_changes(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    slurm = adapter("http://127.0.0.1:9", "v0.0.42", tmp_path)

    with pytest.raises(SchedulerError, match="only reads") as caught:
        slurm.apply({"kind": "drain-node", "target": "node:n1", "reason": "x"}, dry_run=True)
    assert caught.value.permanent


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"transport": "slurmrestd"}, "scheduler_config.rest_url"),
        (
            {"transport": "slurmrestd", "rest_url": "http://r:6820"},
            "scheduler_config.rest_token_env",
        ),
        ({"transport": "rest"}, "scheduler_config.transport"),
        ({"rest_token_env": "DATABASE_URL"}, "scheduler_config.rest_token_env"),
        ({"rest_url": "http://u:p@r:6820"}, "scheduler_config.rest_url"),
        ({"rest_version": "v0.0.38"}, "scheduler_config.rest_version"),
        (
            {
                "transport": "slurmrestd",
                "rest_url": "http://r:6820",
                "rest_token_env": TOKEN_ENV,
                "accounting": True,
            },
            "scheduler_config.accounting",
        ),
    ],
)
def test_bad_transport_config_names_the_field(config, field) -> None:
    with pytest.raises(SchedulerError, match=field) as caught:
        adapter_for("slurm", config)
    assert caught.value.permanent


def test_the_token_is_never_forwarded_across_a_redirect(monkeypatch, tmp_path) -> None:
    """Issue #28: slurmrestd redirecting to another port gets an error, not the token."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with serving(routes("v0.0.43")) as elsewhere:
        moved = {path: (302, elsewhere.url + path) for path in routes("v0.0.43")}
        with serving(moved) as server, pytest.raises(SchedulerError, match="redirect"):
            adapter(server.url, "v0.0.43", tmp_path).read_state()
    assert elsewhere.requests == []
