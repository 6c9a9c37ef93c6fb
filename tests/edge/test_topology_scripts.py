"""The shipped topology scripts (deploy/topology/): the node-exporter textfile producer writes
what the Prometheus source reads back as the node's topology, and the uploader POSTs the raw
``nvidia-smi topo -m`` text with the token (checked against a loopback server)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from diagnosis.edge.sources.dcgm.stats import hardware
from diagnosis.edge.topology import parse_topo_matrix
from tests.conftest import REPO_ROOT
from tests.edge.test_topology_nvidia_smi import real_file
from tests.support.prometheus_fixtures import parse_exposition

SCRIPTS = REPO_ROOT / "deploy" / "topology"
H100_SPLIT = "hgx_h100_topo_m__excerpts_partial.txt"
DGX = "dgx_a100_sxm4_80gb_topo_m__DeepEP_issue13.txt"


def test_textfile_reads_back_as_the_parsed_topology(tmp_path):
    source = real_file(DGX)
    subprocess.run(
        [sys.executable, str(SCRIPTS / "gpuobs-topology-textfile"), "--dir", str(tmp_path),
         "--hostname", "dgx-01", "--input", str(source)],
        check=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    samples = parse_exposition((tmp_path / "gpuobs_topology.prom").read_text())
    assert len(samples) == 8
    labels = [{**series, "src": "topology"} for _, series, _ in samples]
    found = hardware((labels, np.ones(len(labels))), {"dgx-01": 8})
    expected = parse_topo_matrix(source.read_text()).snapshot_topology()
    assert found.topology == {"dgx-01": expected}


def test_textfile_refuses_text_that_is_no_matrix(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text(real_file(H100_SPLIT).read_text())  # three matrices
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "gpuobs-topology-textfile"), "--dir", str(tmp_path),
         "--input", str(bad)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert result.returncode == 2
    assert "matrices" in result.stderr
    assert not (tmp_path / "gpuobs_topology.prom").exists()


class Receiver(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []
    status = 201

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.received.append((self.path, self.headers["Authorization"], body))
        self.send_response(Receiver.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"errors": ["no matrix"]}' if Receiver.status == 400 else b"{}")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver():
    Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize(
    ("status", "exit_code"), [(202, 0), (201, 0), (200, 0), (400, 2), (500, 1)]
)
def test_upload_posts_the_raw_text_with_the_token(receiver, tmp_path, status, exit_code):
    Receiver.status = status
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    env = {
        "PATH": os.environ["PATH"],
        "GPUOBS_URL": receiver + "/",
        "GPUOBS_CLUSTER": "dgx-pod",
        "GPUOBS_TOKEN_FILE": str(token),
        "NODE_NAME": "dgx-01",
        "TOPOLOGY_INPUT": str(real_file(DGX)),
    }
    result = subprocess.run(
        ["bash", str(SCRIPTS / "gpuobs-topology-upload")], env=env, capture_output=True
    )
    assert result.returncode == exit_code
    ((path, auth, body),) = Receiver.received
    assert path == "/api/v1/clusters/dgx-pod/nodes/dgx-01/topology"
    assert auth == "Token s3cret"
    assert body == real_file(DGX).read_bytes()
