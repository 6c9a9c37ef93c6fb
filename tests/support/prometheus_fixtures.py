"""A real Prometheus for the tests (loaded through ``pytest_plugins`` in conftest.py).

The session's Prometheus is backfilled before it starts (``promtool tsdb create-blocks-from
openmetrics``) with an hour of 15 s history ending at :data:`History.t0`: small hand-made
clusters, each told apart by its ``cluster`` label, whose every value is known (steady GPUs under
both host label spellings, nodes with and without profiling fields, a bursty GPU, Xids appearing
mid-window, a GPU that stops reporting, stale data, MIG instances, pod labels that change, the
real dcgm-exporter excerpts of ``../shared/data/dcgm/`` when present, shared GPUs in both of
dcgm-exporter's shapes and a cardinality bomb: tests/support/dcgm_shared.py), and the built-in
simulator's ``small`` scenario as dcgm-exporter would have shown it. Tests read it at ``t0``.

Every process started here is stopped at the end (its process group is killed).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import numpy as np
import pytest
import requests

from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.edge.sources.dcgm.exporter import (
    GpuIdentity,
    MetricFamily,
    Series,
    SimExporter,
    write_openmetrics,
)
from diagnosis.edge.sources.prometheus.metrics import forget_detections
from tests.conftest import SHARED_DATA, require_binary, running_in_ci
from tests.support.dcgm_shared import plant_shared
from tests.support.processes import (
    free_port,
    prometheus_args,
    start_logged,
    stop_group,
    wait_until,
)

T = TypeVar("T")
STEP = 15
HOUR_POINTS = 241  # an hour of 15 s samples, both ends included
DCGM_DATA = SHARED_DATA / "dcgm"
SIM_SCENARIO_CLUSTER = "simsmall"


# -- the server ----------------------------------------------------------------------------------


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen
    base: Path

    def query(self, expression: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expression}
        if at is not None:
            params["time"] = str(at)
        response = requests.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        response.raise_for_status()
        return response.json()["data"]["result"]

    def log_tail(self, lines: int = 20) -> str:
        text = (self.base / "prometheus.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def pause(self) -> None:
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        stop_group(self.process)


def start_prometheus(
    base: Path,
    *,
    history: Path | None = None,
    config: str = "global:\n  scrape_interval: 15s\n",
    args: Sequence[str] = (),
    blocks: Path | None = None,
) -> PrometheusServer:
    """A Prometheus on a free loopback port with its data under ``base``, backfilled with
    ``history`` (OpenMetrics) and the TSDB blocks under ``blocks`` (``promtool tsdb
    create-blocks-from rules``'s output) before it starts; returns once ``/-/ready`` answers."""
    prometheus = require_binary("prometheus", "apt-get install prometheus")
    promtool = require_binary("promtool", "apt-get install prometheus")
    base.mkdir(parents=True, exist_ok=True)
    data = base / "tsdb"
    if history is not None:
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(history), str(data)],
            check=True,
            capture_output=True,
        )
    for block in sorted(blocks.iterdir()) if blocks is not None else ():
        shutil.copytree(block, data / block.name)
    (base / "prometheus.yml").write_text(config)
    port = free_port()
    process = start_logged(
        [*prometheus_args(prometheus, base, data, port), *args], base / "prometheus.log", mode="wb"
    )
    server = PrometheusServer(f"http://127.0.0.1:{port}", process, base)
    try:
        wait_until(lambda: _ready(server), what="Prometheus to be ready")
    except BaseException:
        server.stop()
        raise
    return server


def _ready(server: PrometheusServer) -> bool:
    if server.process.poll() is not None:
        raise RuntimeError(f"prometheus exited: {server.log_tail()}")
    return requests.get(f"{server.url}/-/ready", timeout=2).status_code == 200


@pytest.fixture(autouse=True)
def fresh_recording_rule_detections() -> None:
    """Each test's collections ask Prometheus for recording rules afresh (the answer is cached
    per process for a minute)."""
    forget_detections()


# -- planted history -----------------------------------------------------------------------------


@dataclass
class History:
    """An hour of samples on the 15 s grid ending at ``t0``, as OpenMetrics families."""

    t0: float
    families: dict[str, MetricFamily] = field(default_factory=dict)

    @property
    def times(self) -> np.ndarray:
        return self.t0 - STEP * (HOUR_POINTS - 1) + STEP * np.arange(HOUR_POINTS, dtype=float)

    def window(self, seconds: float = 900) -> np.ndarray:
        """Which samples lie in ``[t0 - seconds, t0]``."""
        return self.times >= self.t0 - seconds

    def add(self, name: str, labels: Mapping[str, str], values: Any, kind: str | None = None):
        values = np.broadcast_to(np.asarray(values, dtype=float), (HOUR_POINTS,)).copy()
        family = self.families.setdefault(name, MetricFamily(name, kind=kind))
        family.series.append(Series(dict(labels), self.times, values))

    def gpu(
        self,
        cluster: str,
        host: str,
        index: int,
        *,
        util: Any,
        host_label: str = "Hostname",
        profiling: bool = True,
        model: str = "A100-SXM4-80GB",
        mig: tuple[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        fb_total: float = 81920,
        fb_used: Any = None,
        power: Any = None,
        temp: Any = None,
        pcie_rx: Any = 1e9,
        nvlink: Any = 2e10,
        xid: Any = 0,
    ) -> None:
        """Every field dcgm-exporter writes for one GPU (or MIG instance), derived from ``util``
        unless given; NaN in ``util`` means "not reporting then" for every field."""
        util = np.broadcast_to(np.asarray(util, dtype=float), (HOUR_POINTS,))
        dark = np.isnan(util)
        identity = GpuIdentity(host, index, gpu_uuid(cluster, host, index), model)
        base = identity.labels(host_label, mig=mig, extra={"cluster": cluster})
        base.update(labels or {})

        def put(name: str, values: Any) -> None:
            values = np.broadcast_to(np.asarray(values, dtype=float), (HOUR_POINTS,))
            self.add(name, base, np.where(dark, np.nan, values))

        used = fb_total / 2 if fb_used is None else fb_used
        if profiling:
            put(dcgm.GR_ENGINE_ACTIVE, util)
            put(dcgm.TENSOR_ACTIVE, util / 2)
            put(dcgm.PCIE_RX_BYTES, pcie_rx)
            put(dcgm.PCIE_TX_BYTES, 5e8)
            put(dcgm.NVLINK_TX_BYTES, np.asarray(nvlink) / 2)
            put(dcgm.NVLINK_RX_BYTES, np.asarray(nvlink) / 2)
        else:
            put(dcgm.NVLINK_BANDWIDTH_TOTAL, np.asarray(nvlink) / 1e6)
        put(dcgm.GPU_UTIL, np.rint(util * 100))
        put(dcgm.FB_USED, used)
        put(dcgm.FB_FREE, fb_total - np.asarray(used) - (0 if mig else 512))
        if not mig:
            put(dcgm.FB_RESERVED, 512)
        put(dcgm.POWER_USAGE, 100 + 200 * util if power is None else power)
        put(dcgm.GPU_TEMP, 40 + index if temp is None else temp)
        if xid is not None:
            put(dcgm.XID_ERRORS, xid)

    def write(self, path: Path) -> int:
        with open(path, "w", encoding="utf-8") as out:
            return write_openmetrics(self.families.values(), out)


def gpu_uuid(cluster: str, host: str, index: int) -> str:
    digest = hashlib.blake2b(f"{cluster}/{host}/{index}".encode(), digest_size=16).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:]}"


# Expected per-GPU values of the planted clusters, read by the tests.
STEADY_UTIL = (0.9, 0.5, 0.0, 0.25)
LOWER_UTIL = (0.3, 0.6)
WEIRD_CLUSTER = 'we"ird\\clu\nster'
MIG_INSTANCES = (("3g.40gb", "1", 0.6, 40960, 20480), ("1g.10gb", "7", 0.7, 10240, 5120))
MIG_IDLE_INSTANCE = ("1g.10gb", "8", 0.0, 10240, 0)


def bursty_util(n: int = HOUR_POINTS) -> np.ndarray:
    """30% of samples near full, the rest near idle: compute waits for input."""
    k = np.arange(n)
    return np.where(k % 10 < 3, 0.9, 0.02)


def plant(history: History) -> None:
    """The hand-made clusters (see the module's docstring)."""
    t = history.times
    t0 = history.t0
    for i, util in enumerate(STEADY_UTIL):
        temp = np.where(t == t0 - 300, 80.0, 40.0 + i) if i == 0 else None
        history.gpu("steady", "st-0", i, util=util, temp=temp, pcie_rx=1e9 * (i + 1))
    for i, util in enumerate(LOWER_UTIL):
        history.gpu("lower", "lo-0", i, util=util, host_label="hostname")
    for i in range(2):
        history.gpu("mixed", "mx-prof", i, util=0.7)
        history.gpu("mixed", "mx-dev", i, util=0.4, profiling=False)
    history.gpu("bursty", "bu-0", 0, util=bursty_util())

    # Xids: GPU 0's gauge turns to 79 mid-window; GPU 1 holds an old 13 from before the
    # window; GPU 2 reports with err_code labels (a new series for Xid 48); GPU 3 through the
    # exporter's Xid counter (94).
    history.gpu("xid", "xi-0", 0, util=0.5, xid=np.where(t >= t0 - 300, 79, 0))
    history.gpu("xid", "xi-0", 1, util=0.5, xid=np.where(t >= t0 - 3000, 13, 0))
    history.gpu("xid", "xi-0", 2, util=0.5, xid=None)
    history.gpu("xid", "xi-0", 3, util=0.5, xid=0)
    labels = GpuIdentity("xi-0", 2, gpu_uuid("xid", "xi-0", 2), "A100-SXM4-80GB").labels(
        extra={"cluster": "xid"}
    )
    history.add(
        dcgm.XID_ERRORS,
        {**labels, "err_code": "0", "err_msg": "No Error"},
        np.where(t < t0 - 195, 0, np.nan),
    )
    history.add(
        dcgm.XID_ERRORS,
        {**labels, "err_code": "48", "err_msg": "DBE (Double Bit Error) ECC Error"},
        np.where(t >= t0 - 195, 48, np.nan),
    )
    labels3 = GpuIdentity("xi-0", 3, gpu_uuid("xid", "xi-0", 3), "A100-SXM4-80GB").labels(
        extra={"cluster": "xid"}
    )
    history.add(
        dcgm.XID_ERRORS_COUNT,
        {**labels3, "window_size_in_ms": "300000", "xid": "94"},
        np.where((t >= t0 - 105) & (t < t0 + 195), 1, 0),
    )

    # A GPU that stops reporting five minutes before t0 (9 of 10 answer).
    for i in range(8):
        history.gpu("gap", "ga-0", i, util=0.6)
    history.gpu("gap", "ga-1", 0, util=0.6)
    history.gpu("gap", "ga-1", 1, util=np.where(t <= t0 - 300, 0.6, np.nan))

    # Data that ended ten minutes before t0.
    for i in range(2):
        history.gpu("stale", "sa-0", i, util=np.where(t <= t0 - 600, 0.5, np.nan))

    # MIG: GPU 0 split into instances, GPU 1 whole.
    for profile, gi, util, total, used in (*MIG_INSTANCES, MIG_IDLE_INSTANCE):
        history.gpu(
            "mig",
            "mg-0",
            0,
            util=util,
            mig=(profile, gi),
            fb_total=total,
            fb_used=used,
            power=250,
            temp=60,
        )
    history.gpu("mig", "mg-0", 1, util=0.8)

    # Pod labels through a ServiceMonitor (exported_*), changing from train-a to train-b.
    exporter_pod = {"container": "exporter", "namespace": "gpu-operator", "pod": "dcgm-exp-x1"}
    for pod, util, when in (("train-a", 0.2, t < t0 - 450), ("train-b", 0.8, t >= t0 - 450)):
        history.gpu(
            "workload",
            "wl-0",
            0,
            util=np.where(when, util, np.nan),
            labels={
                **exporter_pod,
                "exported_container": "main",
                "exported_namespace": "team-x",
                "exported_pod": pod,
            },
        )

    # A cluster label that needs escaping, and a neighbour it must not match.
    history.gpu(WEIRD_CLUSTER, "wd-0", 0, util=0.123)
    history.gpu('we"ird', "wd-0", 0, util=0.999)

    # node-exporter on the steady node: idle CPU time grows 0.25 s per second.
    node = {"cluster": "steady", "instance": "st-0:9100", "job": "node"}
    history.add("node_uname_info", {**node, "nodename": "st-0"}, 1.0)
    for cpu in ("0", "1"):
        history.add(
            "node_cpu_seconds_total",
            {**node, "cpu": cpu, "mode": "idle"},
            1000 + 0.25 * (t - t[0]),
            kind="unknown",
        )


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
REAL_EXCERPTS = {
    "real-v100": "dcgm-exporter_metrics_sample_V100__issue250_excerpt.prom",
    "real-h100": "dcgm-exporter_metrics_sample_H100_MIG__issue512_excerpt.prom",
    "real-a100": "dcgm-exporter_metrics_sample_A100_MIG__dra-driver_issue166_excerpt.prom",
}


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The complete sample lines of a ``/metrics`` excerpt (truncated lines are skipped)."""
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match:
            labels = dict(_LABEL.findall(match.group(2)))
            samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def plant_real_excerpts(history: History) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """Each real excerpt's samples, held for the whole hour, under its own ``cluster`` label."""
    planted = {}
    if not DCGM_DATA.is_dir():
        return planted
    for cluster, name in REAL_EXCERPTS.items():
        path = DCGM_DATA / name
        if not path.is_file():
            continue
        samples = parse_exposition(path.read_text())
        for metric, labels, value in samples:
            history.add(metric, {**labels, "cluster": cluster}, value)
        planted[cluster] = samples
    return planted


# The real H100 MIG label sets (issue 512's excerpt) with the text-embedding pod's 1g.10gb
# instance (GPU_I_ID 7) running at 30%: the slice that used to come out as util 0.043 and idle.
H100_BUSY_CLUSTER = "real-h100-busy"
H100_BUSY_INSTANCE = ("7", 0.30)
ERAS_CLUSTER = "eras"
DRA_MIG_UUID = "MIG-7d0c3a52-1f4e-5b7a-9c11-2e6f0a8b4d21"
NVL_CLUSTER = "nvl72"
NVL_FABRIC_UUID = "a1b2c3d4-0000-4000-8000-00000000f72a"
NVL_CLIQUE_ID = 32766


def plant_hardware(history: History, excerpts: Mapping[str, list]) -> None:
    """Issue 14's series: the busy H100 MIG slice (from the real excerpt's labels, when
    present) and the dcgm-exporter label eras — ``Hostname="localhost"`` with the scrape
    target's ``node`` or ``instance`` label, and a DRA-labelled MIG instance."""
    for metric, labels, value in excerpts.get("real-h100", []):
        if labels.get("GPU_I_ID") == H100_BUSY_INSTANCE[0]:
            value = H100_BUSY_INSTANCE[1]
        history.add(metric, {**labels, "cluster": H100_BUSY_CLUSTER}, value)
    model = "H100 80GB HBM3"
    history.gpu(ERAS_CLUSTER, "localhost", 0, util=0.41, model=model, labels={"node": "er-0"})
    history.gpu(
        ERAS_CLUSTER,
        "localhost",
        1,
        util=0.42,
        model=model,
        host_label="hostname",
        labels={"instance": "er-1:9400"},
    )
    dra = {
        "dra_claim_name": "infer-gpu",
        "dra_claim_namespace": "team-y",
        "dra_pool_name": "er-2",
        "dra_device_name": "gpu-0-mig-2g20gb-3",
        "dra_mig_profile": "2g.20gb",
        "dra_mig_device_uuid": DRA_MIG_UUID,
        "GPU_I_ID": "3",
    }
    history.gpu(ERAS_CLUSTER, "er-2", 0, util=0.43, model=model, host_label="hostname", labels=dra)

    # GB200 NVL72: two trays of one rack, their GPUs' fabric clique (field 173) with the fabric
    # cluster UUID (field 172) as a label, and the topology textfile metric of tray 0.
    for tray in range(2):
        for index in range(4):
            history.gpu(NVL_CLUSTER, f"nvl-{tray}", index, util=0.9, model="GB200")
            identity = GpuIdentity(
                f"nvl-{tray}", index, gpu_uuid(NVL_CLUSTER, f"nvl-{tray}", index), "GB200"
            )
            labels = identity.labels(extra={"cluster": NVL_CLUSTER})
            history.add(
                dcgm.FABRIC_CLIQUE_ID,
                {**labels, dcgm.FABRIC_CLUSTER_UUID: NVL_FABRIC_UUID},
                NVL_CLIQUE_ID,
            )
    for index in range(4):
        history.add(
            dcgm.TOPOLOGY_TEXTFILE,
            {"cluster": NVL_CLUSTER, "hostname": "nvl-0", "gpu": str(index),
             "nvlink_domain": "0", "numa": str(index // 2), "instance": "nvl-0:9100"},
            1.0,
        )  # fmt: skip


def require_dcgm_data() -> None:
    if not DCGM_DATA.is_dir():
        message = f"{DCGM_DATA} is absent (the real dcgm-exporter excerpts)"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def sim_cluster(t0: float, *, name: str = SIM_SCENARIO_CLUSTER, url: str = "") -> SimpleNamespace:
    """The ``small`` scenario on a step clock whose first collection falls on ``t0``."""
    started = datetime.fromtimestamp(t0, UTC) - timedelta(hours=3)
    return SimpleNamespace(
        name=name,
        scheduler_kind="sim",
        scheduler_config={
            "scenario": "small",
            "seed": 1,
            "clock": "step",
            "step_s": 3 * 3600,
            "started_at": started.isoformat(),
        },
        metrics_kind="prometheus",
        metrics_config={
            "url": url,
            "matchers": {"cluster": SIM_SCENARIO_CLUSTER},
            "scrape_interval_s": STEP,
        },
        event_cursor="",
    )


def plant_simulator(history: History) -> None:
    """The simulator's ``small`` scenario, the hour before t0, as its exporter shows it."""
    cluster = sim_cluster(history.t0, name="simsmall-history")
    runtime = sim_runtime.runtime_for(cluster)
    try:
        with runtime.lock:
            runtime.simulator.run_until(3 * 3600)
        exporter = SimExporter(runtime)
        families = exporter.families(
            2 * 3600, 3 * 3600, STEP, extra={"cluster": SIM_SCENARIO_CLUSTER}
        )
    finally:
        sim_runtime.forget(cluster.name)
    for family in families:
        into = history.families.setdefault(family.name, MetricFamily(family.name))
        into.series.extend(family.series)


HEALTH_CLUSTER = "health"


def plant_health(history: History) -> None:
    """Hardware-health fields (issue 20) on ``he-0``, as dcgm-exporter names them
    (etc/default-counters.csv; the bits: NVIDIA/DCGM dcgm_fields, DCGM_CLOCKS_EVENT_REASON_*).
    GPU 0: power limit 300 W, SM clock 1100 of 1410 MHz, DRAM active 0.3, clock-event reasons
    HW_THERMAL (0x40) in the window's last 6 minutes (40% of it), a pending row remap and one row
    newly remapped for an uncorrectable error. GPU 1: the power violation counter grows 0.5 s a
    second (50% of the window) while the older field name reports SW_POWER_CAP (0x4) all the
    time, and SW_THERMAL (0x20) a quarter of the window. GPU 2: none of these fields."""
    t = history.times
    t0 = history.t0
    for index in range(3):
        history.gpu(HEALTH_CLUSTER, "he-0", index, util=0.9)
    ids = [
        GpuIdentity("he-0", i, gpu_uuid(HEALTH_CLUSTER, "he-0", i), "A100-SXM4-80GB").labels(
            "Hostname", extra={"cluster": HEALTH_CLUSTER}
        )
        for i in range(2)
    ]
    history.add(dcgm.POWER_MGMT_LIMIT, ids[0], 300.0)
    history.add(dcgm.SM_CLOCK, ids[0], 1100.0)
    history.add(dcgm.MAX_SM_CLOCK, ids[0], 1410.0)
    history.add(dcgm.DRAM_ACTIVE, ids[0], 0.3)
    history.add(dcgm.CLOCKS_EVENT_REASONS, ids[0], np.where(t > t0 - 360, 0x40, 0x0))
    history.add(dcgm.ROW_REMAP_PENDING, ids[0], 1.0)
    history.add(dcgm.ROW_REMAP_FAILURE, ids[0], 0.0)
    history.add(dcgm.UNCORRECTABLE_REMAPPED_ROWS, ids[0], np.where(t > t0 - 600, 3.0, 2.0))
    history.add(dcgm.POWER_VIOLATION, ids[1], (t - t[0]) * 0.5e6)
    quarter = np.where(t > t0 - 225, 0x20, 0x0)
    history.add(dcgm.CLOCK_THROTTLE_REASONS, ids[1], 0x4 | quarter)


@dataclass
class Planted:
    t0: float
    history: History
    path: Path
    excerpts: dict[str, list[tuple[str, dict[str, str], float]]]

    @property
    def as_of(self) -> datetime:
        return datetime.fromtimestamp(self.t0, UTC)


@pytest.fixture(scope="session")
def planted_history(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    base = tmp_path_factory.mktemp("prometheus-history")
    t0 = float(int(time.time()) // STEP * STEP)
    history = History(t0)
    plant(history)
    excerpts = plant_real_excerpts(history)
    plant_hardware(history, excerpts)
    plant_simulator(history)
    plant_health(history)
    plant_shared(history)
    history.write(base / "history.om")
    return Planted(t0, history, base / "history.om", excerpts)


@pytest.fixture(scope="session")
def prometheus(
    planted_history: Planted, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    """The session's Prometheus, backfilled with the planted history."""
    base = tmp_path_factory.mktemp("prometheus")
    server = start_prometheus(base, history=planted_history.path)
    yield server
    server.stop()


@pytest.fixture
def make_prometheus(
    planted_history: Planted, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., PrometheusServer]]:
    """A Prometheus of the test's own (to stop, pause or misconfigure), with the same history."""
    servers: list[PrometheusServer] = []

    def build(
        *, config: str | None = None, args: Sequence[str] = (), history: Path | None = None
    ) -> PrometheusServer:
        base = tmp_path_factory.mktemp("prometheus-own")
        options = {"config": config} if config is not None else {}
        server = start_prometheus(
            base, history=history or planted_history.path, args=args, **options
        )
        servers.append(server)
        return server

    yield build
    for server in servers:
        server.stop()
        shutil.rmtree(server.base, ignore_errors=True)


# -- a proxy that fails on purpose ---------------------------------------------------------------


class FaultyProxy:
    """An HTTP proxy in front of a real Prometheus that answers the first ``failures`` requests
    (all of them when None) with ``status`` and a Prometheus-style error body, and forwards the
    rest unchanged (gzip included)."""

    def __init__(self, target: str, *, status: int = 503, failures: int | None = None) -> None:
        proxy = self
        self.target = target
        self.status = status
        self.failures = failures
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.requests += 1
                if proxy.failures is None or proxy.requests <= proxy.failures:
                    payload = b'{"status":"error","errorType":"unavailable","error":"injected"}'
                    self.send_response(proxy.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                upstream = requests.post(
                    proxy.target + self.path,
                    data=body,
                    headers={
                        "Content-Type": self.headers.get("Content-Type", ""),
                        "Accept-Encoding": self.headers.get("Accept-Encoding", ""),
                    },
                    stream=True,
                    timeout=30,
                )
                raw = upstream.raw.read(decode_content=False)
                self.send_response(upstream.status_code)
                for name in ("Content-Type", "Content-Encoding"):
                    if upstream.headers.get(name):
                        self.send_header(name, upstream.headers[name])
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def faulty_proxy(prometheus: PrometheusServer) -> Iterator[Callable[..., FaultyProxy]]:
    proxies: list[FaultyProxy] = []

    def build(**options: Any) -> FaultyProxy:
        proxy = FaultyProxy(prometheus.url, **options)
        proxies.append(proxy)
        return proxy

    yield build
    for proxy in proxies:
        proxy.close()


@pytest.fixture
def make_sim_cluster(make_cluster: Callable[..., Any], planted_history: Planted) -> Iterator[Any]:
    """``make_sim_cluster(url, name="simprom", scenario="small", **metrics)``: a simulated
    scheduler (the ``small`` scenario unless named, first cycle at t0) whose GPU metrics come
    from the Prometheus at ``url``, with ``metrics`` added to its metrics config."""
    names = []

    def build(url: str, name: str = "simprom", scenario: str = "small", **metrics: Any) -> Any:
        spec = sim_cluster(planted_history.t0, name=name, url=url)
        names.append(name)
        return make_cluster(
            name,
            scheduler_kind="sim",
            scheduler_config={**spec.scheduler_config, "scenario": scenario},
            metrics_kind="prometheus",
            metrics_config={**spec.metrics_config, **metrics},
        )

    yield build
    for name in names:
        sim_runtime.forget(name)
