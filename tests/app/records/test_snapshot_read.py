"""``manage.py snapshot read --scheduler KIND --config FILE.json``: one read of a scheduler adapter
into a ``gpuobs.snapshot/v1`` document, with no database cluster and no metrics -- against the
loopback Kubernetes API server (Volcano, Kueue, KAI) and the real test Slurm -- and a clear error
for a bad config, an unreachable API server and a missing permission."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from diagnosis.core import snapshot
from tests.edge.slurm.conftest import slurm, slurm_cluster, slurm_config  # noqa: F401 (fixtures)
from tests.edge.test_yarn import routes as yarn_routes
from tests.support.kube_server import (
    KubeApiServer,
    adapter_config,
    kube_api_fixture,
    load_fixture,
)
from tests.support.rest_server import serving as rest_serving

kube_api = kube_api_fixture("nodes", versions=("v1beta2",))


def config_file(tmp_path: Path, config: Any) -> str:
    path = tmp_path / "scheduler.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config), encoding="utf-8")
    return str(path)


def read(kind: str, config: str, *extra: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("snapshot", "read", "--scheduler", kind, "--config", config, *extra, stdout=out)
    return json.loads(out.getvalue())


def as_v1beta2(obj: dict[str, Any]) -> dict[str, Any]:
    if not obj["apiVersion"].startswith("kueue.x-k8s.io/"):
        return obj
    spec = dict(obj.get("spec") or {})
    if "cohort" in spec:
        spec["cohortName"] = spec.pop("cohort")
    return {**obj, "apiVersion": "kueue.x-k8s.io/v1beta2", "spec": spec}


@pytest.mark.kubernetes
@pytest.mark.parametrize(
    ("kind", "fixture"), [("volcano", "volcano"), ("kueue", "kueue"), ("kai", "kai")]
)
def test_read_prints_a_valid_snapshot_of_each_kubernetes_adapter(
    kind: str, fixture: str, kube_api: KubeApiServer, tmp_path: Path
) -> None:
    objects = load_fixture(fixture)
    kube_api.load(as_v1beta2(o) for o in objects) if kind == "kueue" else kube_api.load(objects)
    document = read(kind, config_file(tmp_path, adapter_config()))
    snap = snapshot.load(document)
    assert (snap.cluster, document["scheduler"]["kind"]) == (kind, kind)
    assert len(snap.jobs) > 0
    assert snap.total_gpus == 40


@pytest.mark.kubernetes
def test_read_writes_the_file_named_by_out(kube_api: KubeApiServer, tmp_path: Path) -> None:
    kube_api.load(load_fixture("volcano"))
    out = tmp_path / "snap.json"
    message = io.StringIO()
    call_command(
        "snapshot",
        "read",
        "--scheduler",
        "volcano",
        "--config",
        config_file(tmp_path, adapter_config()),
        "--cluster",
        "trial",
        "--out",
        str(out),
        stdout=message,
    )
    assert snapshot.load_file(out).cluster == "trial"
    assert message.getvalue().startswith(f"wrote {out}: 5 nodes, 5 jobs")


@pytest.mark.slurm
def test_read_prints_a_valid_snapshot_of_real_slurm(slurm_config, tmp_path: Path) -> None:  # noqa: F811
    snap = snapshot.load(read("slurm", config_file(tmp_path, slurm_config)))
    assert snap.scheduler["kind"] == "slurm"
    assert snap.total_gpus == 20  # n1 and n2 with 8 H100 each, s1 with 4 A100


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ({"watch_timeout_s": "soon"}, "scheduler_config.watch_timeout_s"),
        ({"no_such_setting": 1}, "scheduler_config.no_such_setting"),
    ],
)
def test_a_bad_config_names_the_problem(tmp_path: Path, config: Any, says: str) -> None:
    with pytest.raises(CommandError, match=says) as caught:
        read("volcano", config_file(tmp_path, config))
    assert caught.value.returncode == 2


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"cannot read .*missing\.json"):
        read("kai", str(tmp_path / "missing.json"))


def test_an_unknown_scheduler_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"known: .*kai"):
        read("nomad", config_file(tmp_path, {}))


@pytest.mark.kubernetes
def test_an_unreachable_api_server_is_a_clear_transient_error(
    kube_api: KubeApiServer, tmp_path: Path
) -> None:
    kube_api.stop()
    with pytest.raises(CommandError, match=r"volcano: .*transient: retrying may help"):
        read("volcano", config_file(tmp_path, adapter_config(request_timeout_s=2)))


@pytest.mark.kubernetes
def test_a_missing_rbac_permission_names_the_resource(
    kube_api: KubeApiServer, tmp_path: Path
) -> None:
    kube_api.load(load_fixture("kai"))
    kube_api.forbidden.add("queues.scheduling.run.ai")
    with pytest.raises(CommandError, match=r"HTTP 403: .*cannot get resource \"queues\"") as caught:
        read("kai", config_file(tmp_path, adapter_config()))
    assert "(permanent)" in str(caught.value)


def test_read_prints_a_valid_snapshot_of_yarn(tmp_path: Path) -> None:
    """A later adapter works the same way: YARN's ResourceManager API from its recorded payloads
    (tests/fixtures/yarn) on a loopback server."""
    with rest_serving(yarn_routes()) as server:
        document = read("yarn", config_file(tmp_path, {"url": server.url, "read_node_gpus": False}))
    snap = snapshot.load(document)
    assert snap.scheduler["kind"] == "yarn"
    assert snap.total_gpus == 32


@pytest.mark.kubernetes
def test_the_kubeconfig_can_be_a_file_under_the_secrets_directory(
    kube_api: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube_api.load(load_fixture("kai"))
    monkeypatch.setenv("GPUOBS_SECRETS_DIR", str(tmp_path))  # serving() wrote tmp_path/kubeconfig
    config = {"kubeconfig_file": "kubeconfig", "watch_timeout_s": 1}
    assert snapshot.load(read("kai", config_file(tmp_path, config))).scheduler["kind"] == "kai"


def test_a_kubeconfig_file_outside_the_secrets_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUOBS_SECRETS_DIR", str(tmp_path))
    with pytest.raises(CommandError, match=r"scheduler_config\.kubeconfig_file") as caught:
        read("volcano", config_file(tmp_path, {"kubeconfig_file": "../etc/kubeconfig"}))
    assert "(permanent)" in str(caught.value)
