"""Prometheus's own evaluation time of one collection with and without the recording rules.

    PYTHONPATH=. python bench/prometheus_rules.py                  # 16,384 GPUs (2,048 nodes x 8)
    PYTHONPATH=. python bench/prometheus_rules.py --gpus 2048      # a smaller cluster
    PYTHONPATH=. python bench/prometheus_rules.py --data /tmp/rr   # keep and reuse the backfill

A real Prometheus (Debian's ``prometheus``) is backfilled with an hour of 15 s history for every
GPU, written with the project's exporter labels (bench/prometheus.py's ``backfill``). The rule
file ``manage.py recording_rules`` generates for the collector's window (900 s, one group every
minute) is then evaluated once, in the history's last minute, by the real ``promtool tsdb
create-blocks-from rules`` against that Prometheus, and Prometheus is restarted with the recorded
blocks. (Live evaluation by the rule manager would need history ending "now"; backfilling 16k
GPUs takes minutes, 11 on a loaded 2-core machine, and by then the window is mostly empty and
past the 5-minute lookback, so the bench evaluates at a fixed time instead.)

At that evaluation's time, one after another with ``stats=all``: each family query of a
collection reading the raw series, the same reading the recorded series, and each rule's own
expression as an instant query (what the rule manager runs every interval); Prometheus's
``evalTotalTime`` and the samples it touched, summed. Then one whole collection
(``collect_document``) each way, wall and this process's CPU, and its per-GPU numbers compared.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._goals import goal  # noqa: E402
from bench.prometheus import GPUS_PER_NODE, backfill, scheduler_doc, start_prometheus  # noqa: E402
from diagnosis.edge.sources.prometheus import PrometheusConfig, collect_document  # noqa: E402
from diagnosis.edge.sources.prometheus.metrics import forget_detections  # noqa: E402
from diagnosis.edge.sources.prometheus.queries import family_queries  # noqa: E402
from diagnosis.edge.sources.prometheus.recording import (  # noqa: E402
    MARKER,
    expected_fingerprints,
    rule_groups_document,
    rules_yaml,
)
from tests.support.processes import (  # noqa: E402
    stop_group,
)

WINDOW_S = 900
STEP = 15
INTERVAL_S = 60.0  # the shipped rules' interval


def record(base: Path, url: str, t0: float) -> tuple[Path, float]:
    """The rules evaluated once in the minute before ``t0`` by promtool: their blocks, seconds."""
    (base / "rules.yml").write_text(rules_yaml(WINDOW_S))
    out = base / "recorded"
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(
        [
            shutil.which("promtool"), "tsdb", "create-blocks-from", "rules", f"--url={url}",
            f"--start={int(t0 - 60)}", f"--end={int(t0)}", f"--output-dir={out}",
            str(base / "rules.yml"),
        ],
        check=True,
        capture_output=True,
        timeout=1800,
    )  # fmt: skip
    return out, time.perf_counter() - started


def evaluated_at(url: str, t0: float) -> float:
    body = requests.get(
        f"{url}/api/v1/query",
        params={"query": f"max(timestamp({MARKER}{WINDOW_S}s))", "time": str(t0)},
        timeout=60,
    ).json()
    return float(body["data"]["result"][0]["value"][1])


def prometheus_cost(url: str, queries: dict[str, str], at: float, runs: int = 1) -> dict:
    """Each query ``runs`` times with stats=all, one after another: Prometheus's own timings of
    its fastest run (the least disturbed by other work on the machine), summed."""
    total = {"evalTotalTime": 0.0, "execTotalTime": 0.0, "totalQueryableSamples": 0, "peak": 0}
    total["families"] = {}
    for family, text in queries.items():
        answers = []
        for _ in range(runs):
            body = requests.post(
                f"{url}/api/v1/query",
                data={"query": text, "time": f"{at:.3f}", "stats": "all"},
                timeout=600,
            ).json()
            if body.get("status") != "success":
                raise RuntimeError(body)
            answers.append(body["data"]["stats"])
        stats = min(answers, key=lambda a: a["timings"]["evalTotalTime"])
        total["evalTotalTime"] += stats["timings"]["evalTotalTime"]
        total["families"][family] = round(stats["timings"]["evalTotalTime"], 4)
        total["execTotalTime"] += stats["timings"]["execTotalTime"]
        total["totalQueryableSamples"] += stats["samples"]["totalQueryableSamples"]
        total["peak"] = max(total["peak"], stats["samples"]["peakSamples"])
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in total.items()}


def collection(url: str, gpus: int, at: float, mode: str) -> tuple[dict, float, float]:
    forget_detections()
    config = PrometheusConfig.parse(
        {
            "url": url,
            "matchers": {"cluster": "bench"},
            "scrape_interval_s": STEP,
            "timeout_s": 300,
            "deadline_s": 900,
            "shard_min_gpus": 10**9,
            "max_data_age_s": 3600,  # the history ends when the backfill began
            "recording_rules": mode,
        }
    )
    cpu, wall = time.process_time(), time.perf_counter()
    document = collect_document(config, scheduler_doc(gpus), as_of=datetime.fromtimestamp(at, UTC))
    return document, time.perf_counter() - wall, time.process_time() - cpu


def largest_difference(a: list[dict], b: list[dict]) -> float:
    """The largest relative difference of any number of two snapshots' GPU lists."""
    worst = 0.0

    def walk(x, y) -> None:
        nonlocal worst
        if isinstance(x, dict):
            assert x.keys() == y.keys(), (sorted(x), sorted(y))
            for key in x:
                walk(x[key], y[key])
        elif isinstance(x, list):
            assert len(x) == len(y)
            for p, q in zip(x, y, strict=True):
                walk(p, q)
        elif isinstance(x, float) and isinstance(y, float):
            if not (math.isnan(x) and math.isnan(y)):
                worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-12))
        else:
            assert x == y, (x, y)

    walk(a, b)
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=16384)
    parser.add_argument("--runs", type=int, default=3, help="of each query; the fastest counts")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--data", type=Path, help="keep the backfill here and reuse it")
    args = parser.parse_args()
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("bench/prometheus_rules.py: needs prometheus and promtool (apt install prometheus)")
        return 1
    gpus = args.gpus // GPUS_PER_NODE * GPUS_PER_NODE
    base = args.data or Path(tempfile.mkdtemp(prefix="gpuobs-bench-rules-"))
    meta = base / "meta.json"
    process = None
    print(f"load before: {os.getloadavg()[0]:.2f}")
    try:
        if args.data and meta.is_file() and json.loads(meta.read_text())["gpus"] == gpus:
            t0 = json.loads(meta.read_text())["t0"]
            print(f"reusing the backfill in {base} ({gpus} GPUs)")
        else:
            if args.data:
                shutil.rmtree(base, ignore_errors=True)
                base.mkdir(parents=True)
            t0 = float(int(time.time()) // STEP * STEP)
            _, samples, took = backfill(gpus, base, t0, args.workers)
            meta.write_text(json.dumps({"gpus": gpus, "t0": t0, "samples": samples}))
            print(f"backfilled {gpus} GPUs: {samples:,} samples in {took:.1f} s")
        data = base / "tsdb"
        process, url = start_prometheus(base, data)
        if not (base / "recorded-in").is_file():
            blocks, promtool_s = record(base, url, t0)
            stop_group(process, timeout=60)
            process = None
            for block in sorted(blocks.iterdir()):
                if (block / "meta.json").is_file():
                    shutil.move(str(block), data / block.name)
            (base / "recorded-in").write_text(f"{promtool_s:.2f}")
            process, url = start_prometheus(base, data)
        promtool_s = float((base / "recorded-in").read_text())
        at = evaluated_at(url, t0)
        config = PrometheusConfig.parse({"url": url, "matchers": {"cluster": "bench"}})
        selection, nodes = config.selection(), config.node_selection()
        raw_q = family_queries(selection, nodes, WINDOW_S)
        rec_q = family_queries(
            selection, nodes, WINDOW_S, recorded=set(expected_fingerprints(WINDOW_S))
        )
        (group,) = rule_groups_document(WINDOW_S)
        rules = {f"{i} {r['record']}": r["expr"] for i, r in enumerate(group["rules"])}
        print(f"load at the queries: {os.getloadavg()[0]:.2f}")
        raw_cost = prometheus_cost(url, raw_q, at, args.runs)
        rec_cost = prometheus_cost(url, rec_q, at, args.runs)
        rules_cost = prometheus_cost(url, rules, at, args.runs)
        raw_doc, raw_wall, raw_cpu = collection(url, gpus, at, "off")
        rec_doc, rec_wall, rec_cpu = collection(url, gpus, at, "require")
        difference = largest_difference(rec_doc["gpus"], raw_doc["gpus"])
        ratio = rec_cost["evalTotalTime"] / raw_cost["evalTotalTime"]
        rules_s = rules_cost["evalTotalTime"]
        print(
            f"{gpus} GPUs, window {WINDOW_S} s of 15 s samples, {len(rules)} rules in one group "
            f"every {INTERVAL_S:.0f} s (each query's fastest of {args.runs}); promtool "
            f"evaluated them once in {promtool_s:.1f} s wall"
        )
        print(
            f"Prometheus evaluating one collection's {len(raw_q)} family queries: raw "
            f"{raw_cost['evalTotalTime']:.3f} s ({raw_cost['totalQueryableSamples']:,} samples), "
            f"recorded {rec_cost['evalTotalTime']:.3f} s "
            f"({rec_cost['totalQueryableSamples']:,} samples): {ratio:.3f} x"
        )
        print(
            f"the rule group's own evaluation (its {len(rules)} expressions as instant queries): "
            f"{rules_s:.3f} s ({rules_cost['totalQueryableSamples']:,} samples) every "
            f"{INTERVAL_S:.0f} s: {rules_s / INTERVAL_S:.1%} of the time"
        )
        print(
            f"whole collection: raw {raw_wall:.2f} s wall, {raw_cpu:.2f} s app CPU; recorded "
            f"{rec_wall:.2f} s wall, {rec_cpu:.2f} s app CPU; queries "
            f"{raw_doc['collection']['queries']} / {rec_doc['collection']['queries']}; "
            f"coverage {raw_doc['collection']['coverage']:.1%} / "
            f"{rec_doc['collection']['coverage']:.1%}; largest relative difference of any "
            f"per-GPU number {difference:.2e}"
        )
        per_family = {f: (raw_cost["families"][f], rec_cost["families"][f]) for f in raw_q}
        print(f"per family, raw / recorded (s): {per_family}")
        print(f"load after: {os.getloadavg()[0]:.2f}")
        goal(
            f"Prometheus evaluation of one {gpus}-GPU collection, recorded over raw",
            ratio,
            0.25,
            "x",
            detail=f"raw {raw_cost['evalTotalTime']:.3f} s, recorded "
            f"{rec_cost['evalTotalTime']:.3f} s",
        )
        goal(
            f"the rule group's evaluation at {gpus} GPUs, share of its interval",
            rules_s / INTERVAL_S,
            0.5,
            "x",
            detail=f"{rules_s:.2f} s every {INTERVAL_S:.0f} s",
        )
        goal("per-GPU numbers recorded against raw, largest difference", difference, 1e-9, "")
        print(
            json.dumps(
                {
                    "gpus": gpus,
                    "rules": len(rules),
                    "raw": raw_cost,
                    "recorded": rec_cost,
                    "ratio": round(ratio, 4),
                    "rules_as_queries": rules_cost,
                    "promtool_s": promtool_s,
                    "collection_raw": {"wall_s": round(raw_wall, 3), "cpu_s": round(raw_cpu, 3)},
                    "collection_recorded": {
                        "wall_s": round(rec_wall, 3),
                        "cpu_s": round(rec_cpu, 3),
                    },
                    "largest_difference": difference,
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
