"""Time the diagnosis rules and the GPU-hour accounting on big synthetic snapshots.

    PYTHONPATH=. python bench/rules.py                  # 16,384 GPUs, then growth to 131,072
    PYTHONPATH=. python bench/rules.py --sizes 16384    # one size
    PYTHONPATH=. python bench/rules.py --runs 3         # best of 3 rule runs per size
    PYTHONPATH=. python bench/rules.py --no-diagnose    # skip the manage.py diagnose process

Budget (docs/architecture.md#performance-budget): all rules on a 16,384-GPU snapshot (2,048 nodes,
20,000 jobs)
<= 1 s, growing linearly to 131,072 GPUs. The process is pinned to one CPU (where the OS allows
it) so the figures are single-core figures; CPU seconds are printed beside wall seconds because
they do not count time lost to other processes on a busy machine.

Each snapshot: nodes of 8 GPUs in three pools, 1% of them not ready; every node's free GPUs
below 4 (fragmentation for 4- and 8-GPU requests); running multi-node gangs on whole nodes,
small jobs filling the rest; pairs of partial gangs deadlocked on a shared node, partial gangs
that cannot complete; about 70% of the jobs pending (some multi-node gangs), the others running,
completed or failed; metrics on every GPU, a few unhealthy GPUs and Xids. The document is
written to ``bench/out/`` (git-ignored).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diagnosis.core import snapshot as snapshot_format  # noqa: E402
from diagnosis.core.accounting import account  # noqa: E402
from diagnosis.core.rules.engine import run_rules  # noqa: E402
from diagnosis.core.rules.registry import all_rules  # noqa: E402

OUT = ROOT / "bench" / "out"
BASE_GPUS = 16384
BASE_JOBS = 20000
BUDGET_S = 1.0
AS_OF = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)
POOLS = (("a100", "A100-SXM4-80GB", 0.5), ("h100", "H100-SXM5-80GB", 0.3), ("l40s", "L40S", 0.2))
TENANTS = tuple(f"team-{c}" for c in "abcdefgh")
XID_CODES = (13, 31, 43, 48, 63, 74, 79, 92, 94, 95, 119)
GPUS_PER_NODE = 8


def stamp(seconds_ago: float) -> str:
    return (AS_OF - timedelta(seconds=float(seconds_ago))).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Jobs:
    """Accumulates job documents and the per-GPU util level of every allocated GPU."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.items: list[dict[str, Any]] = []
        self.gpu_level: dict[tuple[str, int], float] = {}

    def add(
        self,
        pool: str,
        state: str,
        pods: int,
        gpus_per_pod: int,
        allocation: list[tuple[str, list[int]]] = (),
        *,
        gang: bool | None = None,
        min_member: int | None = None,
        submitted_ago: float,
        started_ago: float | None = None,
        ended_ago: float | None = None,
        partial_since_ago: float | None = None,
    ) -> dict[str, Any]:
        rng = self.rng
        tenant = TENANTS[int(rng.integers(len(TENANTS)))]
        job: dict[str, Any] = {
            "id": f"job-{len(self.items):06d}",
            "name": f"{tenant}-{len(self.items)}",
            "tenant": tenant,
            "queue": tenant,
            "pool": pool,
            "kind": "training" if rng.random() < 0.7 else "inference",
            "priority": int(rng.choice([0, 0, 0, 50, 100])),
            "state": state,
            "submitted": stamp(submitted_ago),
            "started": None if started_ago is None else stamp(started_ago),
            "ended": None if ended_ago is None else stamp(ended_ago),
            "pods": pods,
            "gpus_per_pod": gpus_per_pod,
            "gang": pods > 1 if gang is None else gang,
            "min_member": pods if min_member is None else min_member,
            "allocation": [{"node": n, "gpus": g} for n, g in allocation],
            "partial_since": None if partial_since_ago is None else stamp(partial_since_ago),
            "preemptions": 0,
        }
        if pods * gpus_per_pod >= 8 and rng.random() < 0.5:
            job["parallelism"] = {"tp": 8 if gpus_per_pod >= 8 else gpus_per_pod}
        if state == "running" and job["kind"] == "training" and rng.random() < 0.3:
            job["achieved_tflops_per_gpu"] = round(float(rng.uniform(20, 250)), 1)
        if allocation:
            draw = rng.random()
            level = 0.02 if draw < 0.05 else 0.35 if draw < 0.15 else 0.9
            if state == "pending":
                level = 0.0
            for node, gpus in allocation:
                for index in gpus:
                    self.gpu_level[(node, index)] = level
        self.items.append(job)
        return job


def build_document(total_gpus: int, *, seed: int = 0) -> dict[str, Any]:
    """A ``gpuobs.snapshot/v1`` document of ``total_gpus`` GPUs and jobs scaled from 20,000."""
    rng = np.random.default_rng(seed)
    n_nodes = total_gpus // GPUS_PER_NODE
    target_jobs = round(BASE_JOBS * total_gpus / BASE_GPUS)
    jobs = _Jobs(rng)
    nodes: list[dict[str, Any]] = []
    node_pool: list[str] = []
    topology = {"nvlink_domains": [list(range(8))], "numa": [0, 0, 0, 0, 1, 1, 1, 1]}

    first = 0
    for p, (pool, model, share) in enumerate(POOLS):
        count = n_nodes - first if p == len(POOLS) - 1 else round(n_nodes * share)
        names = [f"{pool}-{i:05d}" for i in range(count)]
        states = rng.choice(
            ["ready", "cordoned", "drained", "down"], size=count, p=[0.99, 0.005, 0.003, 0.002]
        )
        for name, state in zip(names, states, strict=True):
            nodes.append(
                {
                    "name": name,
                    "pool": pool,
                    "gpu_model": model,
                    "gpus": GPUS_PER_NODE,
                    "state": str(state),
                    "cpu_util": round(float(rng.uniform(0.05, 0.95)), 3),
                    "topology": topology,
                }
            )
            node_pool.append(pool)
        first += count
        ready = [n for n, s in zip(names, states, strict=True) if s == "ready"]
        _fill_pool(jobs, rng, pool, ready)

    # pending jobs (with no allocation) up to ~70% of all jobs, completed / failed the rest
    pending = max(0, round(0.7 * target_jobs) - sum(j["state"] == "pending" for j in jobs.items))
    pool_names = [p for p, _, _ in POOLS]
    pool_share = np.array([s for _, _, s in POOLS])
    for _ in range(pending):
        pool = pool_names[int(rng.choice(len(pool_names), p=pool_share))]
        shape = rng.random()
        if shape < 0.3:
            pods, size = 1, 1
        elif shape < 0.45:
            pods, size = 1, 2
        elif shape < 0.65:
            pods, size = 1, 4
        elif shape < 0.9:
            pods, size = 1, 8
        else:
            pods, size = int(rng.integers(2, 9)), 8
        jobs.add(pool, "pending", pods, size, submitted_ago=float(rng.uniform(0, 24 * 3600)))
    while len(jobs.items) < target_jobs:
        pool = pool_names[int(rng.choice(len(pool_names), p=pool_share))]
        started = float(rng.uniform(0, 24 * 3600))
        jobs.add(
            pool,
            "completed" if rng.random() < 0.85 else "failed",
            1,
            int(rng.choice([1, 2, 4, 8])),
            submitted_ago=started + float(rng.uniform(0, 6 * 3600)),
            started_ago=started,
            ended_ago=float(rng.uniform(0, started)),
        )

    gpus = _gpu_entries(rng, nodes, jobs.gpu_level)
    queues = [
        {
            "name": tenant,
            "tenant": tenant,
            "weight": int(rng.integers(1, 8)),
            "deserved_gpus": total_gpus // len(TENANTS),
            "capability_gpus": total_gpus // 2,
        }
        for tenant in TENANTS
    ]
    return {
        "format": snapshot_format.FORMAT,
        "cluster": f"bench-{total_gpus}",
        "as_of": stamp(0),
        "window_s": 900,
        "scheduler": {"kind": "sim", "placement": dict.fromkeys(pool_names, "spread")},
        "nodes": nodes,
        "gpus": gpus,
        "queues": queues,
        "jobs": jobs.items,
        "events": [],
    }


def _fill_pool(jobs: _Jobs, rng: np.random.Generator, pool: str, ready: list[str]) -> None:
    """Running and partially bound jobs on a pool's ready nodes; every node keeps < 4 free."""
    order = rng.permutation(len(ready))
    nodes = [ready[i] for i in order]
    n = len(nodes)
    n_big = int(0.35 * n)
    n_pairs = max(1, int(0.0025 * n))
    n_holds = max(1, int(0.005 * n))
    big, rest = nodes[:n_big], nodes[n_big:]
    pair_nodes, rest = rest[:n_pairs], rest[n_pairs:]
    hold_nodes, small = rest[:n_holds], rest[n_holds:]

    def running(pods: int, size: int, allocation: list[tuple[str, list[int]]]) -> None:
        started = float(rng.uniform(600, 48 * 3600))
        jobs.add(
            pool,
            "running",
            pods,
            size,
            allocation,
            submitted_ago=started + float(rng.uniform(0, 3 * 3600)),
            started_ago=started,
        )

    # multi-node gangs on whole nodes
    i = 0
    while i < len(big):
        pods = min(int(rng.choice([2, 4, 8, 16])), len(big) - i)
        running(pods, 8, [(node, list(range(8))) for node in big[i : i + pods]])
        i += pods
    # pairs of partial gangs sharing a node: a deadlock each
    for node in pair_nodes:
        for half in (range(0, 4), range(4, 8)):
            held = float(rng.uniform(900, 4 * 3600))
            jobs.add(
                pool,
                "pending",
                2,
                4,
                [(node, list(half))],
                submitted_ago=held + 60,
                partial_since_ago=held,
            )
    # big partial gangs that cannot complete even with every other gang's GPUs
    for node in hold_nodes:
        held = float(rng.uniform(900, 4 * 3600))
        jobs.add(
            pool,
            "pending",
            48 + n // 10,  # more pods than all the other gangs' GPUs could take
            4,
            [(node, [0, 1, 2, 3])],
            submitted_ago=held + 60,
            partial_since_ago=held,
        )
        running(1, 2, [(node, [4, 5])])
        running(1, 1, [(node, [6])])
    # small jobs: 5 to 8 GPUs used per node, as pods of 4, 2 and 1
    used = rng.choice([5, 6, 7, 8], size=len(small), p=[0.3, 0.3, 0.3, 0.1])
    for node, count in zip(small, used.tolist(), strict=True):
        index = 0
        for size in (4, 2, 1, 1):
            if count - index >= size:
                running(1, size, [(node, list(range(index, index + size)))])
                index += size
        if index < count:  # 8 = 4 + 2 + 1 + 1 handled above; nothing left over
            running(1, count - index, [(node, list(range(index, count)))])


def _gpu_entries(
    rng: np.random.Generator, nodes: list[dict[str, Any]], level: dict[tuple[str, int], float]
) -> list[dict[str, Any]]:
    """Metrics for every GPU: util around its job's level (0 when free), tensor activity, memory,
    power, temperature, PCIe and NVLink traffic; 0.2% unhealthy, 0.3% with Xids."""
    names = [n["name"] for n in nodes for _ in range(GPUS_PER_NODE)]
    count = len(names)
    index = np.tile(np.arange(GPUS_PER_NODE), len(nodes))
    base = np.array([level.get((name, int(i)), 0.0) for name, i in zip(names, index, strict=True)])
    mean = np.clip(base + rng.normal(0, 0.03, count), 0, 1)
    spread = np.where(base == 0.35, 0.6, 0.1)
    p10 = np.clip(mean - spread / 2, 0, 1)
    p90 = np.clip(mean + spread / 2, 0, 1)
    tensor = np.clip(mean * rng.uniform(0.1, 0.6, count), 0, 1)
    fb = np.where(base > 0, rng.uniform(0.2, 0.95, count), 0.0)
    power = 60 + 340 * mean
    temp = 35 + 45 * mean
    pcie = rng.uniform(1e8, 5e9, count)
    nvlink = rng.uniform(0, 5e10, count) * mean
    unhealthy = rng.random(count) < 0.002
    with_xid = rng.random(count) < 0.003
    rows = np.column_stack([mean, p10, p90, tensor, fb, power, temp, pcie, nvlink]).round(4)
    gpus = []
    for g, (name, i) in enumerate(zip(names, index.tolist(), strict=True)):
        m, lo, hi, ta, fu, pw, tc, px, nv = rows[g].tolist()
        entry: dict[str, Any] = {
            "node": name,
            "index": i,
            "uuid": f"GPU-{g:08x}",
            "health": "unhealthy" if unhealthy[g] else "ok",
            "util": {"mean": m, "p10": lo, "p90": hi},
            "tensor_active": {"mean": ta},
            "fb_used_frac": {"mean": fu},
            "power_w": {"mean": pw},
            "temp_c": {"max": tc},
            "pcie_rx_Bps": {"mean": px},
            "nvlink_Bps": {"mean": nv},
        }
        if with_xid[g]:
            entry["xid"] = [
                {"code": int(rng.choice(XID_CODES)), "time": stamp(float(rng.uniform(0, 900)))}
            ]
        gpus.append(entry)
    return gpus


# ----------------------------------------------------------------------------------------------


def measure(total_gpus: int, runs: int, diagnose: bool) -> dict[str, Any]:
    started = time.perf_counter()
    document = build_document(total_gpus)
    generate_s = time.perf_counter() - started
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"snapshot-{total_gpus}.json"
    text = json.dumps(document, separators=(",", ":"))
    path.write_text(text)
    del document

    started = time.perf_counter()
    snapshot = snapshot_format.load_file(path)
    load_s = time.perf_counter() - started

    best = None
    rules_cpu_s = float("inf")
    for _ in range(runs):
        started, cpu = time.perf_counter(), time.process_time()
        diagnosis = run_rules(snapshot)
        total, cpu = time.perf_counter() - started, time.process_time() - cpu
        rules_cpu_s = min(rules_cpu_s, cpu)
        if best is None or total < best[0]:
            best = (total, diagnosis)
    rules_s, diagnosis = best
    if diagnosis.errors:
        for error in diagnosis.errors:
            print(f"  rule error: {error.rule}: {error.error}: {error.message}")

    started, cpu = time.perf_counter(), time.process_time()
    accounting = account(diagnosis)
    account_s, account_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    json.dumps(accounting.as_dict(), allow_nan=False)

    diagnose_s = None
    if diagnose:
        diagnose_s = time_diagnose(path)

    by_rule: dict[str, int] = {}
    for finding in diagnosis.findings:
        by_rule[finding.rule] = by_rule.get(finding.rule, 0) + 1
    return {
        "gpus": total_gpus,
        "nodes": len(snapshot.nodes),
        "jobs": len(snapshot.jobs),
        "pending": int((snapshot.jobs["state"] == "pending").sum()),
        "doc_mb": len(text) / 1e6,
        "generate_s": generate_s,
        "load_s": load_s,
        "rules_s": rules_s,
        "rules_cpu_s": rules_cpu_s,
        "per_rule_s": dict(diagnosis.seconds),
        "account_s": account_s,
        "account_cpu_s": account_cpu_s,
        "diagnose_s": diagnose_s,
        "findings": by_rule,
        "errors": len(diagnosis.errors),
    }


def time_diagnose(path: Path) -> float | None:
    manage = ROOT / "manage.py"
    if not manage.exists():
        print("  (manage.py does not exist yet: skipping the diagnose process)")
        return None
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(manage), "diagnose", str(path), "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        print(f"  manage.py diagnose exited {done.returncode}: {done.stderr.decode()[-500:]}")
        return None
    report = json.loads(done.stdout)
    print(
        f"  manage.py diagnose --json: {wall:.2f} s, {len(report.get('findings', []))} findings,"
        f" {len(done.stdout) / 1e6:.1f} MB of JSON"
        + ("" if "accounting" in report else " (no accounting in its output yet)")
    )
    return wall


def pin_to_one_cpu() -> str:
    try:
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):
        return "not pinned (this OS does not allow it)"
    return f"pinned to CPU {cpu}"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def report(results: list[dict[str, Any]]) -> bool:
    rules = list(all_rules())
    print()
    print("Wall seconds (rules: best of the runs), CPU seconds in brackets:")
    print(
        "| GPUs | nodes | jobs | pending | doc MB | load s | rules s | accounting s | diagnose s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['gpus']:,} | {r['nodes']:,} | {r['jobs']:,} | {r['pending']:,} | "
            f"{r['doc_mb']:.1f} | {_fmt(r['load_s'])} | {_fmt(r['rules_s'], 3)} "
            f"({_fmt(r['rules_cpu_s'], 3)}) | {_fmt(r['account_s'], 3)} "
            f"({_fmt(r['account_cpu_s'], 3)}) | {_fmt(r['diagnose_s'])} |"
        )
    print()
    print("Per rule, seconds (shared facts are paid by the first rule that reads them):")
    print("| rule | " + " | ".join(f"{r['gpus']:,}" for r in results) + " |")
    print("|---|" + "---:|" * len(results))
    for rule in rules:
        cells = " | ".join(f"{r['per_rule_s'].get(rule, 0.0):.3f}" for r in results)
        print(f"| {rule} | {cells} |")
    print()
    print("Findings per rule:")
    for r in results:
        print(f"  {r['gpus']:,} GPUs: {json.dumps(r['findings'], sort_keys=True)}")
    base = results[0]
    if len(results) > 1:
        print()
        print(f"Growth relative to {base['gpus']:,} GPUs (linear = the GPU ratio):")
        print("| GPUs | × GPUs | × load | × rules | × rules CPU | × accounting CPU | × diagnose |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in results:

            def ratio(key: str, r: dict[str, Any] = r) -> str:
                if r[key] is None or not base[key]:
                    return "—"
                return f"{r[key] / base[key]:.2f}"

            print(
                f"| {r['gpus']:,} | {r['gpus'] / base['gpus']:.0f} | {ratio('load_s')} | "
                f"{ratio('rules_s')} | {ratio('rules_cpu_s')} | {ratio('account_cpu_s')} | "
                f"{ratio('diagnose_s')} |"
            )
    ok = True
    for r in results:
        if r["gpus"] == BASE_GPUS:
            ok = r["rules_s"] <= BUDGET_S and not r["errors"]
            verdict = "within" if ok else "OVER"
            print(
                f"\nAll rules at {BASE_GPUS:,} GPUs: {r['rules_s']:.3f} s, {verdict} the "
                f"{BUDGET_S:.0f} s budget"
                + (f"; {r['errors']} rule error(s)" if r["errors"] else "")
            )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[16384, 32768, 65536, 131072], metavar="GPUS"
    )
    parser.add_argument("--runs", type=int, default=3, help="best of N rule runs per size")
    parser.add_argument("--no-diagnose", action="store_true", help="skip manage.py diagnose")
    args = parser.parse_args(argv)
    print(f"bench/rules.py: {pin_to_one_cpu()}")
    results = []
    for size in args.sizes:
        print(f"== {size:,} GPUs")
        result = measure(size, args.runs, diagnose=not args.no_diagnose)
        print(
            f"  document {result['doc_mb']:.1f} MB generated in {result['generate_s']:.1f} s; "
            f"load {result['load_s']:.2f} s; rules {result['rules_s']:.3f} s; "
            f"accounting {result['account_s']:.3f} s"
        )
        results.append(result)
    return 0 if report(results) else 1


if __name__ == "__main__":
    sys.exit(main())
