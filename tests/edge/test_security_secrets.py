"""Issue #12, defect 1 and 3 at the edge: a cluster's settings reach no file, environment
variable or program of the server except by an allowed reference, and a data-source URL
carries no credentials."""

from __future__ import annotations

import pytest

from diagnosis.edge import secrets
from diagnosis.edge.errors import ConfigError
from diagnosis.edge.schedulers.registry import adapter_spec
from diagnosis.edge.schedulers.slurm.adapter import SlurmCommands, SlurmSettings
from diagnosis.edge.sources.prometheus.config import PrometheusConfig


@pytest.mark.parametrize(
    "raw",
    [
        {"url": "http://collector.example", "bearer_token_file": "/proc/self/environ"},
        {"url": "http://collector.example", "bearer_token_file": "../../proc/self/environ"},
        {"url": "http://collector.example", "bearer_token_env": "DJANGO_SECRET_KEY"},
        {"url": "http://collector.example", "username": "u", "password_env": "DATABASE_URL"},
        {"url": "http://collector.example", "ca_file": "/etc/shadow"},
    ],
)
def test_a_secret_reference_outside_the_allowed_places_is_refused(raw):
    with pytest.raises(ConfigError) as raised:
        PrometheusConfig.parse(raw)
    assert "GPUOBS_SECRET_" in str(raised.value) or "secrets directory" in str(raised.value)


def test_a_token_file_under_the_secrets_directory_is_read(tmp_path, monkeypatch):
    (tmp_path / "prom-token").write_text("t0ken\n")
    monkeypatch.setenv(secrets.DIR_ENV, str(tmp_path))
    monkeypatch.setenv(secrets.BINDINGS_ENV, "file:prom-token=prometheus@p:80")
    config = PrometheusConfig.parse({"url": "http://p", "bearer_token_file": "prom-token"})
    assert config.auth() == ({"Authorization": "Bearer t0ken"}, None)


def test_a_symlink_out_of_the_secrets_directory_is_not_followed(tmp_path, monkeypatch):
    inside = tmp_path / "secrets"
    inside.mkdir()
    (tmp_path / "environ").write_text("DJANGO_SECRET_KEY=leak")
    (inside / "token").symlink_to(tmp_path / "environ")
    monkeypatch.setenv(secrets.DIR_ENV, str(inside))
    config = PrometheusConfig.parse({"url": "http://p", "bearer_token_file": "token"})
    with pytest.raises(ConfigError, match="outside the secrets directory"):
        config.auth()


def test_a_url_with_user_and_password_is_refused_without_echoing_them():
    with pytest.raises(ConfigError) as raised:
        PrometheusConfig.parse({"url": "http://user:hunter2@prometheus:9090"})
    assert "must not carry a user or password" in str(raised.value)
    assert "hunter2" not in str(raised.value)


def test_the_slurm_commands_folder_is_not_a_cluster_setting(monkeypatch):
    spec = adapter_spec("slurm").config_spec()
    assert "bin_dir" not in spec.by_key
    assert spec.problems({"bin_dir": "/home/mallory/bin"})[0].startswith("bin_dir: unknown")


def test_the_slurm_commands_folder_comes_from_the_deployment(monkeypatch):
    monkeypatch.setenv("GPUOBS_SLURM_BIN_DIR", "/opt/slurm/bin")
    commands = SlurmCommands(SlurmSettings.from_config({}))
    assert commands.argv(["sinfo", "--json"]) == ["/opt/slurm/bin/sinfo", "--json"]


# -- issue #28, item 6: a secret is bound to the integration (and host) that may receive it ------


@pytest.mark.parametrize(
    ("bindings", "url", "error"),
    [
        ("", "http://prom.example:9090", "is bound to no integration"),
        (
            "GPUOBS_SECRET_PROM=slurm",
            "http://prom.example:9090",
            "is bound to slurm, not prometheus",
        ),
        (
            "GPUOBS_SECRET_PROM=prometheus@prom.example:9090",
            "http://evil.example:9090",
            "may be sent to prom.example:9090 only",
        ),
        (
            "GPUOBS_SECRET_PROM=prometheus@prom.example:9090",
            "http://prom.example:8080",
            "may be sent to prom.example:9090 only",
        ),
    ],
    ids=["unbound", "other-integration", "other-host", "other-port"],
)
def test_a_secret_goes_only_where_it_is_bound(monkeypatch, bindings, url, error):
    monkeypatch.setenv("GPUOBS_SECRET_PROM", "t0ken")
    monkeypatch.setenv(secrets.BINDINGS_ENV, bindings)
    config = PrometheusConfig.parse({"url": url, "bearer_token_env": "GPUOBS_SECRET_PROM"})
    with pytest.raises(ConfigError, match=error) as raised:
        config.auth()
    assert "t0ken" not in str(raised.value)


def test_a_secret_bound_to_its_integration_and_host_is_sent(monkeypatch):
    monkeypatch.setenv("GPUOBS_SECRET_PROM", "t0ken")
    monkeypatch.setenv(secrets.BINDINGS_ENV, "GPUOBS_SECRET_PROM=prometheus@Prom.Example:9090")
    config = PrometheusConfig.parse(
        {"url": "http://prom.example:9090", "bearer_token_env": "GPUOBS_SECRET_PROM"}
    )
    assert config.auth() == ({"Authorization": "Bearer t0ken"}, None)
