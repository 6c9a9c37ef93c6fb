"""Time one Prometheus collection at cluster scale, and the column-wise range parser.

    PYTHONPATH=. python bench/prometheus.py                 # 16,384 GPUs (2,048 nodes x 8)
    PYTHONPATH=. python bench/prometheus.py --gpus 4096     # a smaller cluster
    PYTHONPATH=. python bench/prometheus.py --runs 5        # median of 5 collections

A real Prometheus (Debian's ``prometheus``; ``promtool`` backfills it) is loaded with an hour of
15 s dcgm-exporter history for every GPU: the 13 fields a profiling-enabled exporter writes, with
its labels. Then one collection (``collect_document``: every family query, the Xid detail range
query, parsing, statistics, the snapshot document) is measured: queries sent, bytes received
(decoded and on the wire, gzip), wall time and this process's CPU time. Budget
(docs/architecture.md#performance-budget): queries constant in cluster size, app-side CPU <= 2 s at
16,384 GPUs.

Then the same range response (a 15 s hour of ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` for GPU 0 of
every node) is parsed by prometheus-api-client's ``MetricRangeDataFrame`` and by the source's
column-wise parser (target >= 10x faster), both from the response bytes.

History is generated in time slices by two worker processes (so the blocks do not overlap);
everything lives in a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import requests
from prometheus_api_client import MetricRangeDataFrame

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diagnosis.core import snapshot as snapshot_format  # noqa: E402
from diagnosis.edge.sources.dcgm import fields as dcgm  # noqa: E402
from diagnosis.edge.sources.dcgm.exporter import GpuIdentity, label_text  # noqa: E402
from diagnosis.edge.sources.prometheus import PrometheusConfig, collect_document  # noqa: E402
from diagnosis.edge.sources.prometheus.wire import parse_matrix  # noqa: E402
from tests.support.processes import (  # noqa: E402
    free_port,
    prometheus_args,
    start_logged,
    stop_group,
    wait_until,
)

STEP = 15
POINTS = 241  # an hour, both ends
GPUS_PER_NODE = 8
FIELDS = (
    dcgm.GR_ENGINE_ACTIVE,
    dcgm.GPU_UTIL,
    dcgm.TENSOR_ACTIVE,
    dcgm.FB_USED,
    dcgm.FB_FREE,
    dcgm.FB_RESERVED,
    dcgm.POWER_USAGE,
    dcgm.GPU_TEMP,
    dcgm.PCIE_RX_BYTES,
    dcgm.PCIE_TX_BYTES,
    dcgm.NVLINK_TX_BYTES,
    dcgm.NVLINK_RX_BYTES,
    dcgm.XID_ERRORS,
)


def node_name(n: int) -> str:
    return f"gpu-{n:05d}"


def prefixes(gpus: int) -> list[str]:
    out = []
    for g in range(gpus):
        node, index = divmod(g, GPUS_PER_NODE)
        uuid = f"GPU-{g:08x}-0000-4000-8000-{node:012x}"
        identity = GpuIdentity(node_name(node), index, uuid, "A100-SXM4-80GB")
        out.append("{" + label_text(identity.labels("Hostname", extra={"cluster": "bench"})) + "} ")
    return out


def field_values(field: str, util: np.ndarray, g: np.ndarray) -> np.ndarray:
    if field == dcgm.GR_ENGINE_ACTIVE:
        return util
    if field == dcgm.GPU_UTIL:
        return np.rint(util * 100)
    if field == dcgm.TENSOR_ACTIVE:
        return util * 0.45
    if field == dcgm.FB_USED:
        return np.rint(81920 * (0.3 + 0.6 * (g % 7) / 7))[:, None] + 0 * util
    if field == dcgm.FB_FREE:
        return 81920 - 512 - np.rint(81920 * (0.3 + 0.6 * (g % 7) / 7))[:, None] + 0 * util
    if field == dcgm.FB_RESERVED:
        return 512 + 0 * util
    if field == dcgm.POWER_USAGE:
        return 60 + 340 * util
    if field == dcgm.GPU_TEMP:
        return np.rint(31 + 40 * util)
    if field in (dcgm.PCIE_RX_BYTES, dcgm.PCIE_TX_BYTES):
        return np.rint(2e8 + 1.5e9 * util)
    if field in (dcgm.NVLINK_TX_BYTES, dcgm.NVLINK_RX_BYTES):
        return np.rint(1.6e10 * util)
    return np.where(
        (g % 997 == 0)[:, None] & (np.arange(util.shape[1]) > util.shape[1] // 2), 79, 0
    )


def write_slice(args: tuple[int, int, int, float, str, str]) -> tuple[str, int, float]:
    """One time slice of every GPU's history, written and loaded by promtool; returns the block
    folder, samples and seconds."""
    first, last, gpus, t_start, folder, promtool = args
    rng = np.random.default_rng(first)
    times = t_start + STEP * np.arange(first, last)
    stamps = [str(int(t)) for t in times]
    labels = prefixes(gpus)
    path = Path(folder) / f"slice-{first}.om"
    started = time.perf_counter()
    g = np.arange(gpus)
    base = 0.2 + 0.75 * ((g * 2654435761) % 1000) / 1000.0
    util = np.clip(base[:, None] + 0.05 * rng.standard_normal((gpus, len(times))), 0, 1)
    samples = 0
    with open(path, "w", encoding="utf-8") as out:
        for field in FIELDS:
            _, text = dcgm.FIELD_HELP[field]
            out.write(f"# HELP {field} {text}\n# TYPE {field} gauge\n")
            values = field_values(field, util, g)
            integer = field != dcgm.GR_ENGINE_ACTIVE and field not in (
                dcgm.TENSOR_ACTIVE,
                dcgm.POWER_USAGE,
            )
            for row in range(gpus):
                prefix = field + labels[row]
                shown = (
                    [str(int(v)) for v in values[row].tolist()]
                    if integer
                    else [f"{v:.6f}" for v in values[row].tolist()]
                )
                out.write(
                    "".join([f"{prefix}{v} {s}\n" for v, s in zip(shown, stamps, strict=True)])
                )
                samples += len(stamps)
        out.write("# EOF\n")
    blocks = Path(folder) / f"blocks-{first}"
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(path), str(blocks)],
        check=True,
        capture_output=True,
    )
    path.unlink()
    return str(blocks), samples, time.perf_counter() - started


def backfill(gpus: int, base: Path, t0: float, workers: int) -> tuple[Path, int, float]:
    promtool = shutil.which("promtool")
    data = base / "tsdb"
    data.mkdir()
    slices = max(2, workers * 2)
    bounds = np.linspace(0, POINTS, slices + 1).astype(int)
    jobs = [
        (int(bounds[i]), int(bounds[i + 1]), gpus, t0 - STEP * (POINTS - 1), str(base), promtool)
        for i in range(slices)
    ]
    started = time.perf_counter()
    samples = 0
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for blocks, count, _ in pool.map(write_slice, jobs):
            samples += count
            for block in Path(blocks).iterdir():
                block.rename(data / block.name)
            shutil.rmtree(blocks)
    return data, samples, time.perf_counter() - started


def start_prometheus(base: Path, data: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    (base / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    process = start_logged(
        prometheus_args(shutil.which("prometheus"), base, data, port),
        base / "prometheus.log",
        mode="wb",
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError((base / "prometheus.log").read_text()[-2000:])
        return requests.get(f"{url}/-/ready", timeout=2).status_code == 200

    wait_until(ready, "Prometheus to be ready", timeout=300)
    return process, url


def scheduler_doc(gpus: int) -> dict:
    nodes = gpus // GPUS_PER_NODE
    return {
        "format": "gpuobs.snapshot/v1",
        "cluster": "bench",
        "as_of": "2026-01-01T00:00:00Z",
        "nodes": [
            {
                "name": node_name(n),
                "pool": f"pool-{n % 3}",
                "gpu_model": "A100-SXM4-80GB",
                "gpus": GPUS_PER_NODE,
                "state": "ready",
            }
            for n in range(nodes)
        ],
        "jobs": [],
        "queues": [],
        "events": [],
    }


def measure_collection(url: str, gpus: int, t0: float, runs: int, *, shards: bool) -> dict:
    """One collection, the whole cluster at once or (``shards``) each of its three pools as a
    shard, run one after another in this process as the embedded mode does."""
    config = PrometheusConfig.parse(
        {
            "url": url,
            "matchers": {"cluster": "bench"},
            "scrape_interval_s": STEP,
            "timeout_s": 120,
            "deadline_s": 600,
            "shard_min_gpus": 1 if shards else 10**9,
        }
    )
    scheduler = scheduler_doc(gpus)
    as_of = datetime.fromtimestamp(t0, UTC)
    walls, cpus, reports = [], [], []
    for _ in range(runs):
        cpu, wall = time.process_time(), time.perf_counter()
        document = collect_document(config, scheduler, as_of=as_of)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        reports.append(document["collection"])
    snapshot_format.load(document)  # the document is a valid snapshot
    report = reports[-1]
    return {
        "shards": report["shards"],
        "gpus_answered": report["gpus_answered"],
        "coverage": report["coverage"],
        "queries": report["queries"],
        "bytes": report["bytes"],
        "wire_bytes": report["wire_bytes"],
        "wall_s_median": round(statistics.median(walls), 3),
        "cpu_s_median": round(statistics.median(cpus), 3),
        "wall_s_first": round(walls[0], 3),
        "cpu_s_first": round(cpus[0], 3),
        "xid_gpus": sum(1 for g in document["gpus"] if g.get("xid")),
    }


def measure_parsing(url: str, t0: float, runs: int) -> dict:
    start = t0 - STEP * (POINTS - 1)
    body = requests.post(
        f"{url}/api/v1/query_range",
        data={
            "query": f'{dcgm.GR_ENGINE_ACTIVE}{{cluster="bench",gpu="0"}}',
            "start": str(start),
            "end": str(t0),
            "step": str(STEP),
        },
        timeout=300,
    ).content

    def library() -> int:
        frame = MetricRangeDataFrame(json.loads(body)["data"]["result"])
        return len(frame)

    decoded = json.loads(body)["data"]["result"]

    def library_decoded() -> int:
        return len(MetricRangeDataFrame(decoded))

    def columnwise() -> int:
        matrix, _ = parse_matrix(body, start, STEP, POINTS)
        return int(np.count_nonzero(~np.isnan(matrix.values)))

    def best(function) -> tuple[float, int]:
        times, result = [], 0
        for _ in range(runs):
            started = time.process_time()
            result = function()
            times.append(time.process_time() - started)
        return min(times), result

    lib_s, lib_n = best(library)
    dec_s, _ = best(library_decoded)
    col_s, col_n = best(columnwise)
    assert lib_n == col_n, (lib_n, col_n)
    return {
        "response_bytes": len(body),
        "samples": col_n,
        "MetricRangeDataFrame_s": round(lib_s, 4),
        "MetricRangeDataFrame_from_decoded_json_s": round(dec_s, 4),
        "columnwise_s": round(col_s, 4),
        "ratio": round(lib_s / col_s, 1),
        "ratio_vs_decoded": round(dec_s / col_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=16384)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--data", type=Path, help="keep the backfilled Prometheus here and reuse it next time"
    )
    args = parser.parse_args()
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("bench/prometheus.py: needs prometheus and promtool (apt-get install prometheus)")
        return 1
    gpus = args.gpus // GPUS_PER_NODE * GPUS_PER_NODE
    t0 = float(int(time.time()) // STEP * STEP)
    base = args.data or Path(tempfile.mkdtemp(prefix="gpuobs-bench-prometheus-"))
    meta = base / "meta.json"
    process = None
    try:
        if args.data and meta.is_file() and json.loads(meta.read_text())["gpus"] == gpus:
            t0, samples = (json.loads(meta.read_text())[k] for k in ("t0", "samples"))
            data = base / "tsdb"
            print(f"reusing the backfilled Prometheus in {base} ({gpus} GPUs)")
        else:
            if args.data:
                shutil.rmtree(base, ignore_errors=True)
                base.mkdir(parents=True)
            data, samples, seconds = backfill(gpus, base, t0, args.workers)
            meta.write_text(json.dumps({"gpus": gpus, "t0": t0, "samples": samples}))
            print(f"backfilled {gpus} GPUs: {samples:,} samples in {seconds:.1f} s")
        process, url = start_prometheus(base, data)
        collections = [
            measure_collection(url, gpus, t0, args.runs, shards=shards) for shards in (False, True)
        ]
        for collection in collections:
            budget = "within" if collection["cpu_s_median"] <= 2.0 else "OVER"
            print(
                f"one collection of {gpus} GPUs in {collection['shards']} shard(s): "
                f"{collection['queries']} queries, {collection['bytes'] / 1e6:.1f} MB "
                f"({collection['wire_bytes'] / 1e6:.1f} MB on the wire), "
                f"{collection['wall_s_median']:.2f} s wall, {collection['cpu_s_median']:.2f} s "
                f"app CPU (median of {args.runs}; {budget} the 2 s budget), coverage "
                f"{collection['coverage']:.1%}"
            )
        parsing = measure_parsing(url, t0, args.runs)
        print(
            f"range response of {parsing['samples']:,} samples "
            f"({parsing['response_bytes'] / 1e6:.1f} MB): MetricRangeDataFrame "
            f"{parsing['MetricRangeDataFrame_s']:.3f} s, column-wise "
            f"{parsing['columnwise_s']:.3f} s: {parsing['ratio']}x (target >= 10x; "
            f"{parsing['ratio_vs_decoded']}x against the library given decoded JSON)"
        )
        print(
            json.dumps(
                {
                    "gpus": gpus,
                    "samples": samples,
                    "collections": collections,
                    "parsing": parsing,
                }
            )
        )
    finally:
        if process is not None:
            stop_group(process, timeout=30)
        if not args.data:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
