"""Prometheus-compatible back ends (docs/integrations.md "Prometheus-compatible back ends"): the
per-source headers a multi-tenant back end needs (Mimir's ``X-Scope-OrgID``, Thanos Receive's
``THANOS-TENANT``), read from secret references bound to the source's host, and mutual TLS with a
client certificate and key from the secrets directory. What the client sends is checked on a
loopback server that records it and answers with the Prometheus HTTP API's envelope
(``tests/support/recording_prometheus.py`` says where the shapes come from)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from diagnosis.edge.request_id import current as request_id
from diagnosis.edge.sources.prometheus import PrometheusConfig
from diagnosis.edge.sources.prometheus.client import PrometheusClient
from diagnosis.edge.sources.prometheus.config import PrometheusConfigError
from diagnosis.edge.sources.prometheus.wire import PrometheusError
from tests.support.recording_prometheus import RecordingPrometheus, TlsMaterial, tls_material

AT = 1_764_662_400.0


@pytest.fixture
def recording() -> Iterator[RecordingPrometheus]:
    server = RecordingPrometheus().start()
    yield server
    server.close()


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TlsMaterial:
    """Certificates in the deployment's secrets directory (``GPUOBS_SECRETS_DIR``)."""
    monkeypatch.setenv("GPUOBS_SECRETS_DIR", str(tmp_path / "secrets"))
    return tls_material(tmp_path / "secrets")


@pytest.fixture
def mtls(tls: TlsMaterial) -> Iterator[RecordingPrometheus]:
    server = RecordingPrometheus(tls=tls.server_context(require_client_cert=True)).start()
    yield server
    server.close()


def bind(monkeypatch: pytest.MonkeyPatch, url: str, *references: str) -> None:
    host = urlsplit(url).netloc
    entries = ",".join(f"{ref}=prometheus@{host}" for ref in references)
    monkeypatch.setenv("GPUOBS_SECRET_BINDINGS", entries)


def query(config: PrometheusConfig) -> None:
    with PrometheusClient(config, sleep=lambda _: None) as client:
        client.instant("DCGM_FI_DEV_GPU_UTIL", AT, "util")


def test_a_tenant_header_reaches_the_server(recording, monkeypatch) -> None:
    monkeypatch.setenv("GPUOBS_SECRET_MIMIR_TENANT", "team-gpu")
    monkeypatch.setenv("GPUOBS_SECRET_PROM_TOKEN", "tok-123")
    bind(monkeypatch, recording.url, "GPUOBS_SECRET_MIMIR_TENANT", "GPUOBS_SECRET_PROM_TOKEN")
    config = PrometheusConfig.parse(
        {
            "url": recording.url,
            "headers": {"X-Scope-OrgID": "GPUOBS_SECRET_MIMIR_TENANT"},
            "bearer_token_env": "GPUOBS_SECRET_PROM_TOKEN",
        }
    )

    query(config)

    headers = recording.requests[0].headers
    assert headers["X-Scope-OrgID"] == "team-gpu"
    assert headers["Authorization"] == "Bearer tok-123"


def test_a_header_from_a_secret_file_is_sent_on_range_reads_too(
    recording, monkeypatch, tmp_path
) -> None:
    (tmp_path / "thanos-tenant").write_text("tenant-b\n")
    monkeypatch.setenv("GPUOBS_SECRETS_DIR", str(tmp_path))
    bind(monkeypatch, recording.url, "file:thanos-tenant")
    config = PrometheusConfig.parse(
        {"url": recording.url, "headers": {"THANOS-TENANT": "file:thanos-tenant"}}
    )

    with PrometheusClient(config) as client:
        client.range("DCGM_FI_DEV_GPU_UTIL", AT - 60, AT, 15, "util")

    assert recording.requests[0].path == "/api/v1/query_range"
    assert recording.requests[0].headers["THANOS-TENANT"] == "tenant-b"


def test_the_request_id_goes_out_with_every_query(recording) -> None:
    config = PrometheusConfig.parse({"url": recording.url})
    token = request_id.set("req-31i-prom")
    try:
        query(config)
    finally:
        request_id.reset(token)
    query(config)

    assert recording.requests[0].headers["X-Request-ID"] == "req-31i-prom"
    assert "X-Request-ID" not in recording.requests[1].headers


def test_a_header_bound_to_another_host_is_not_sent(recording, monkeypatch) -> None:
    monkeypatch.setenv("GPUOBS_SECRET_MIMIR_TENANT", "team-gpu")
    monkeypatch.setenv(
        "GPUOBS_SECRET_BINDINGS", "GPUOBS_SECRET_MIMIR_TENANT=prometheus@mimir.example"
    )
    config = PrometheusConfig.parse(
        {"url": recording.url, "headers": {"X-Scope-OrgID": "GPUOBS_SECRET_MIMIR_TENANT"}}
    )

    with pytest.raises(PrometheusConfigError, match=r"headers\.X-Scope-OrgID: .*mimir.example"):
        query(config)
    assert recording.requests == []


def test_thanos_partial_response_warnings_are_kept(recording) -> None:
    recording.warnings = ["partial response: store 10.0.0.7:10901 did not answer"]
    config = PrometheusConfig.parse({"url": recording.url})

    with PrometheusClient(config) as client:
        vector = client.instant("DCGM_FI_DEV_GPU_UTIL", AT, "util")
        report = client.report.as_dict()

    assert len(vector) == 1
    assert report["warnings"] == ["partial response: store 10.0.0.7:10901 did not answer"]


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"Authorization": "GPUOBS_SECRET_X"}, "headers: Authorization is set by gpuobs"),
        ({"X-Request-ID": "GPUOBS_SECRET_X"}, "headers: X-Request-ID is set by gpuobs"),
        ({"X-Scope-OrgID": "team-gpu"}, "headers: X-Scope-OrgID: must name an environment"),
        ({"X-Scope-OrgID": "DJANGO_SECRET_KEY"}, "headers: X-Scope-OrgID: must name"),
        ({"X-Scope-OrgID": "file:../etc/passwd"}, "headers: X-Scope-OrgID: must name a file"),
        ({"Bad Name": "GPUOBS_SECRET_X"}, "headers: 'Bad Name' is not a header name"),
        ({"X-Scope-OrgID": 7}, "headers: X-Scope-OrgID: expected a secret reference"),
    ],
)
def test_header_settings_that_are_refused(headers, message) -> None:
    with pytest.raises(PrometheusConfigError) as caught:
        PrometheusConfig.parse({"url": "http://prom:9090", "headers": headers})
    assert message in str(caught.value)


def test_a_client_certificate_needs_its_key(tls) -> None:
    with pytest.raises(PrometheusConfigError, match="give both or neither"):
        PrometheusConfig.parse({"url": "https://prom:9090", "client_cert_file": "client.crt"})


def test_mutual_tls_with_a_client_certificate_from_the_secrets_directory(
    mtls, tls, monkeypatch
) -> None:
    bind(monkeypatch, mtls.url, "file:client.key")
    config = PrometheusConfig.parse(
        {
            "url": mtls.url,
            "ca_file": "ca.crt",
            "client_cert_file": "client.crt",
            "client_key_file": "client.key",
        }
    )

    query(config)

    assert mtls.requests[0].client_subject == "gpuobs-collector"


def test_without_the_client_certificate_the_server_refuses(mtls, tls) -> None:
    config = PrometheusConfig.parse({"url": mtls.url, "ca_file": "ca.crt", "retries": 0})

    with pytest.raises(PrometheusError, match="unreachable"):
        query(config)
    assert mtls.requests == []


def test_a_client_key_not_bound_to_the_source_is_refused(mtls, tls, monkeypatch) -> None:
    monkeypatch.setenv("GPUOBS_SECRET_BINDINGS", "file:client.key=slurm")
    config = PrometheusConfig.parse(
        {
            "url": mtls.url,
            "ca_file": "ca.crt",
            "client_cert_file": "client.crt",
            "client_key_file": "client.key",
        }
    )

    with pytest.raises(PrometheusConfigError, match=r"client_key_file: .*bound to slurm"):
        query(config)
