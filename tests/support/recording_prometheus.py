"""A loopback stand-in for a Prometheus-compatible query endpoint that records what it is sent.

It answers ``/api/v1/query`` and ``/api/v1/query_range`` with the response envelope of the
Prometheus HTTP API (prometheus.io/docs/prometheus/latest/querying/api/, "Format overview",
"Instant queries", "Range queries"): ``{"status": "success", "data": {"resultType": "vector" |
"matrix", "result": [...]}}``, plus ``"warnings"`` when set, which is how Thanos Query reports a
partial response (a store that did not answer) and Mimir a partial one. Each request's headers
and, over TLS, the client certificate's subject are kept, so a test sees what gpuobs sent: the
tenant header, the bearer token, the request id.

``tls_material`` makes a CA, a server certificate for 127.0.0.1 and a client certificate signed
by that CA (cryptography, already a pinned dependency), so the server can require mutual TLS as
Mimir's or a gateway's ``-server.http-tls-client-auth=RequireAndVerifyClientCert`` does.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SAMPLE_TIME = 1_764_662_400.0


def vector_answer(warnings: list[str] | None = None) -> dict[str, Any]:
    """An instant query's answer: one ``DCGM_FI_DEV_GPU_UTIL`` series (dcgm-exporter's labels)."""
    body: dict[str, Any] = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {
                    "metric": {"Hostname": "gpu-001", "gpu": "0", "UUID": "GPU-5f1a"},
                    "value": [SAMPLE_TIME, "93"],
                }
            ],
        },
    }
    if warnings:
        body["warnings"] = warnings
    return body


def matrix_answer(start: float, step: float, points: int) -> dict[str, Any]:
    values = [[start + i * step, str(90 + i)] for i in range(points)]
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"Hostname": "gpu-001", "gpu": "0"}, "values": values}],
        },
    }


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    form: dict[str, list[str]]
    client_subject: str | None


@dataclass
class RecordingPrometheus:
    """The server; ``requests`` are what it got, ``warnings`` what each answer carries."""

    tls: ssl.SSLContext | None = None
    warnings: list[str] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)

    def start(self) -> RecordingPrometheus:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                peer = self.connection.getpeercert() if owner.tls else None
                subject = None
                if peer:
                    subject = dict(pair[0] for pair in peer["subject"]).get("commonName")
                owner.requests.append(Seen(self.path, dict(self.headers), form, subject))
                if self.path == "/api/v1/query":
                    answer = vector_answer(owner.warnings)
                elif self.path == "/api/v1/query_range":
                    start, end, step = (float(form[k][0]) for k in ("start", "end", "step"))
                    answer = matrix_answer(start, step, round((end - start) / step) + 1)
                else:
                    self.send_error(404)
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if self.tls is not None:
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass(frozen=True)
class TlsMaterial:
    """PEM files: ``ca.crt``, ``server.crt``/``server.key``, ``client.crt``/``client.key``."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    def server_context(self, *, require_client_cert: bool) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.path("server.crt"), self.path("server.key"))
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.path("ca.crt"))
        return context


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if not ca:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def tls_material(directory: Path) -> TlsMaterial:
    """A fresh CA with one server (127.0.0.1) and one client (``gpuobs-collector``) certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("test-ca", ca_key, None, ca_key, ca=True)
    files = {"ca.crt": ca.public_bytes(serialization.Encoding.PEM)}
    for role, subject in (("server", "127.0.0.1"), ("client", "gpuobs-collector")):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(subject, key, ca.subject, ca_key, server=role == "server")
        files[f"{role}.crt"] = cert.public_bytes(serialization.Encoding.PEM)
        files[f"{role}.key"] = _key_pem(key)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return TlsMaterial(directory)
