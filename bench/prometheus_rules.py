"""Prometheus's own evaluation time of one collection with and without the recording rules.

    PYTHONPATH=. python bench/prometheus_rules.py                  # 16,384 GPUs (2,048 nodes x 8)
    PYTHONPATH=. python bench/prometheus_rules.py --gpus 2048      # a smaller cluster
    PYTHONPATH=. python bench/prometheus_rules.py --data /tmp/rr   # keep and reuse the backfill

A real Prometheus (Debian's ``prometheus``) is backfilled with an hour of 15 s history ending now
for every GPU, written with the project's exporter labels (bench/prometheus.py's ``backfill``),
and started with the rule file ``manage.py recording_rules`` generates for the collector's window
(900 s). The rules evaluate live: the rule manager runs them every ``--interval`` over the last
15 minutes of that history, as it would on a production server, and ``/api/v1/rules`` reports the
group's own cost per evaluation. (``promtool tsdb create-blocks-from rules`` would backfill
recorded series too, but it evaluates through the query API from outside, so it measures no
rule-manager evaluation; one live evaluation is all a collection reads.)

Right after an evaluation, each family query of a collection is sent once reading the raw series
(at the history's end, so its window is full: the backfill takes minutes, and a live rule
evaluation's window holds only what is left of the history) and once reading the recorded series
(at the evaluation's time: instant vectors, the same cost whatever the window holds), one after
another, with ``stats=all``: Prometheus's ``evalTotalTime`` and the samples it touched, summed
over the families. The rules' own cost is reported twice: the rule manager's ``evaluationTime``
and each rule's expression as an instant query at the history's end (full window). Then one
whole collection (``collect_document``) each way at the evaluation's time, wall and this
process's CPU, and the per-GPU numbers compared.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._goals import goal  # noqa: E402
from bench.prometheus import GPUS_PER_NODE, backfill, scheduler_doc  # noqa: E402
from diagnosis.edge.sources.prometheus import PrometheusConfig, collect_document  # noqa: E402
from diagnosis.edge.sources.prometheus.metrics import forget_detections  # noqa: E402
from diagnosis.edge.sources.prometheus.queries import family_queries  # noqa: E402
from diagnosis.edge.sources.prometheus.recording import (  # noqa: E402
    expected_fingerprints,
    rules_yaml,
)
from tests.support.processes import (  # noqa: E402
    free_port,
    prometheus_args,
    start_logged,
    stop_group,
    wait_until,
)

WINDOW_S = 900
STEP = 15


def start(base: Path, data: Path, interval: str) -> tuple[object, str]:
    (base / "rules.yml").write_text(rules_yaml(WINDOW_S, interval))
    (base / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: 15s\n  evaluation_interval: {interval}\n"
        f"rule_files: [{base / 'rules.yml'}]\n"
    )
    port = free_port()
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


def group_state(url: str) -> dict:
    (group,) = requests.get(f"{url}/api/v1/rules?type=record", timeout=30).json()["data"]["groups"]
    return group


def next_evaluation(url: str, after: str, timeout: float) -> dict:
    """The group once an evaluation later than ``after`` finished (``lastEvaluation`` moved)."""
    found: dict = {}

    def moved() -> bool:
        group = group_state(url)
        if group["lastEvaluation"] != after and not group["lastEvaluation"].startswith("0001"):
            found.update(group)
            return True
        return False

    wait_until(moved, "the rule group's next evaluation", timeout=timeout)
    return found


def evaluated_at(url: str) -> float:
    marker = f"gpuobs_cluster:recording_rules:present{WINDOW_S}s"
    body = requests.get(
        f"{url}/api/v1/query", params={"query": f"max(timestamp({marker}))"}, timeout=30
    ).json()
    return float(body["data"]["result"][0]["value"][1])


def prometheus_cost(url: str, queries: dict[str, str], at: float) -> dict:
    """Each query once with stats=all, one after another: Prometheus's own timings, summed."""
    total = {"evalTotalTime": 0.0, "execTotalTime": 0.0, "totalQueryableSamples": 0, "peak": 0}
    total["families"] = {}
    for family, text in queries.items():
        body = requests.post(
            f"{url}/api/v1/query",
            data={"query": text, "time": f"{at:.3f}", "stats": "all"},
            timeout=600,
        ).json()
        if body.get("status") != "success":
            raise RuntimeError(body)
        stats = body["data"]["stats"]
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


def seconds(interval: str) -> float:
    return float(interval[:-1]) * {"s": 1, "m": 60}[interval[-1]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=16384)
    parser.add_argument("--interval", default="60s", help="the rule group's (s or m)")
    parser.add_argument("--evaluations", type=int, default=2, help="rule evaluations to time")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--data", type=Path, help="keep the backfill here and reuse it")
    args = parser.parse_args()
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print(
            "bench/prometheus_rules.py: needs prometheus and promtool (apt-get install prometheus)"
        )
        return 1
    gpus = args.gpus // GPUS_PER_NODE * GPUS_PER_NODE
    base = args.data or Path(tempfile.mkdtemp(prefix="gpuobs-bench-rules-"))
    meta = base / "meta.json"
    process = None
    print(f"load before: {os.getloadavg()[0]:.2f}")
    try:
        if args.data and meta.is_file() and json.loads(meta.read_text())["gpus"] == gpus:
            t0 = json.loads(meta.read_text())["t0"]
            print(
                f"reusing the backfill in {base} ({gpus} GPUs, ends {time.time() - t0:.0f} s ago)"
            )
        else:
            if args.data:
                shutil.rmtree(base, ignore_errors=True)
                base.mkdir(parents=True)
            t0 = float(int(time.time()) // STEP * STEP)
            _, samples, took = backfill(gpus, base, t0, args.workers)
            meta.write_text(json.dumps({"gpus": gpus, "t0": t0, "samples": samples}))
            print(f"backfilled {gpus} GPUs: {samples:,} samples in {took:.1f} s")
        process, url = start(base, base / "tsdb", args.interval)
        interval = seconds(args.interval)
        evaluations = []
        state = next_evaluation(url, "", timeout=interval + 600)
        evaluations.append(state["evaluationTime"])
        for _ in range(args.evaluations - 1):
            state = next_evaluation(url, state["lastEvaluation"], timeout=interval + 600)
            evaluations.append(state["evaluationTime"])
        health = {r["health"] for r in state["rules"]}
        at = evaluated_at(url)
        in_window = (min(at, t0) - (at - WINDOW_S)) / STEP
        config = PrometheusConfig.parse({"url": url, "matchers": {"cluster": "bench"}})
        families = set(expected_fingerprints(WINDOW_S))
        selection, nodes = config.selection(), config.node_selection()
        raw_q = family_queries(selection, nodes, WINDOW_S)
        rec_q = family_queries(selection, nodes, WINDOW_S, recorded=families)
        print(f"load at the queries: {os.getloadavg()[0]:.2f}")
        raw_cost = prometheus_cost(url, raw_q, t0)
        rec_cost = prometheus_cost(url, rec_q, at)
        rules = {f"{i} {r['name']}": r["query"] for i, r in enumerate(state["rules"])}
        rules_cost = prometheus_cost(url, rules, t0)
        raw_doc, raw_wall, raw_cpu = collection(url, gpus, at, "off")
        rec_doc, rec_wall, rec_cpu = collection(url, gpus, at, "require")
        difference = largest_difference(rec_doc["gpus"], raw_doc["gpus"])
        ratio = rec_cost["evalTotalTime"] / raw_cost["evalTotalTime"]
        rule_s = sorted(evaluations)[len(evaluations) // 2]
        print(
            f"{gpus} GPUs, window {WINDOW_S} s ({in_window:.0f} samples of 15 s per series in it), "
            f"{len(state['rules'])} rules in one group every {args.interval}, rules {health}"
        )
        print(
            f"Prometheus evaluating one collection's {len(raw_q)} family queries: raw (at the "
            f"history's end, full window) "
            f"{raw_cost['evalTotalTime']:.3f} s ({raw_cost['totalQueryableSamples']:,} samples), "
            f"recorded (at the rules' last evaluation) {rec_cost['evalTotalTime']:.3f} s "
            f"({rec_cost['totalQueryableSamples']:,} samples): {ratio:.3f} x"
        )
        print(
            f"the rule group's own evaluation by the rule manager: "
            f"{', '.join(f'{s:.2f}' for s in evaluations)} s (median {rule_s:.2f} s every "
            f"{interval:.0f} s, over {in_window:.0f} samples a series); its rules as queries at "
            f"the history's end (full window): {rules_cost['evalTotalTime']:.3f} s "
            f"({rules_cost['totalQueryableSamples']:,} samples)"
        )
        print(
            f"whole collection: raw {raw_wall:.2f} s wall, {raw_cpu:.2f} s app CPU; recorded "
            f"{rec_wall:.2f} s wall, {rec_cpu:.2f} s app CPU; queries "
            f"{raw_doc['collection']['queries']} / {rec_doc['collection']['queries']}; "
            f"coverage {raw_doc['collection']['coverage']:.1%} / "
            f"{rec_doc['collection']['coverage']:.1%}; largest relative difference of any "
            f"per-GPU number {difference:.2e}"
        )
        print(f"load after: {os.getloadavg()[0]:.2f}")
        goal(
            f"Prometheus evaluation of one {gpus}-GPU collection, recorded over raw",
            ratio,
            0.1,
            "x",
            detail=f"raw {raw_cost['evalTotalTime']:.3f} s, recorded "
            f"{rec_cost['evalTotalTime']:.3f} s",
        )
        full = max(rule_s, rules_cost["evalTotalTime"])
        goal(
            f"the rule group's evaluation at {gpus} GPUs, share of its interval",
            full / interval,
            0.5,
            "x",
            detail=f"{full:.2f} s every {interval:.0f} s",
        )
        goal(
            "per-GPU numbers recorded against raw, largest relative difference",
            difference,
            1e-9,
            "",
        )
        print(
            json.dumps(
                {
                    "gpus": gpus,
                    "rules": len(state["rules"]),
                    "raw": raw_cost,
                    "recorded": rec_cost,
                    "ratio": round(ratio, 4),
                    "rule_evaluations_s": evaluations,
                    "rules_as_queries": rules_cost,
                    "samples_in_live_window": round(in_window),
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
