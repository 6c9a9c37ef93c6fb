"""Time the user's path as whole processes: ``manage.py snapshot import FILE --diagnose``.

    PYTHONPATH=. python bench/import_path.py                       # 16,384 GPUs, 12 cycles
    PYTHONPATH=. python bench/import_path.py --sizes 4096,16384 --cycles 6

bench/cycle.py times the stored cycle inside one process; a person (or a cron job) runs one
process a file, which also pays Python's and Django's start-up, reading and checking the JSON,
and, in the embedded mode (no ``REDIS_URL``), whatever tasks the cycle sends and the process runs
itself. The snapshot is bench/rules.py's, written once per cycle with ``as_of`` one minute later
(a steady cluster, as bench/cycle.py judges it), to a temporary directory.

Printed per size: the file's size, then per phase the median CPU seconds of whole processes
(user + system of the child, ``os.wait4``):

- start-up: ``manage.py check`` (Python, Django, the URLconf and the system checks);
- read + validate: ``manage.py snapshot validate FILE`` less the start-up;
- per cycle: ``snapshot import FILE --diagnose``, CPU and wall, with the stored cycle's own
  steps' seconds (``ClusterCycle.steps``) and the impact estimates that process ran (impacts
  estimated after it less before it). After #35 the validate figure includes importing pandas
  and the core (~1 s), which ``check`` no longer does.

The goal (issue #35): every cycle's process, the first one included, within 3 × the stored cycle
plus the start-up (process CPU seconds against the cycle's own seconds and ``check``'s CPU).
``--impacts inline`` runs the estimates inside the cycle, as the embedded mode did before
(``GPUOBS_EMBEDDED_IMPACTS``), for the before/after.

The database named by ``--database-url`` (default ``$BENCH_DATABASE_URL``, else
``gpuobs_import_bench`` on the local PostgreSQL) is dropped, created and migrated, and dropped at
the end unless ``--keep``; without a reachable PostgreSQL the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cycle import drop_database, fresh_database
from bench.rules import build_document

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpuobs_import_bench"
GOAL_FACTOR = 3.0
IMPACTS = "deferred"


def run_reaped(args: list[str], url: str) -> tuple[float, float, str]:
    """CPU (user + system, ``os.wait4``) and wall seconds of one whole ``manage.py`` process in
    the embedded mode (no ``REDIS_URL``), its output."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["DATABASE_URL"] = url
    env["GPUOBS_EMBEDDED_IMPACTS"] = IMPACTS
    read, write = os.pipe()
    started = time.perf_counter()
    pid = os.posix_spawn(
        sys.executable,
        [sys.executable, str(ROOT / "manage.py"), *args],
        env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, write, 1),
            (os.POSIX_SPAWN_DUP2, write, 2),
            (os.POSIX_SPAWN_CLOSE, read),
        ],
    )
    os.close(write)
    chunks = []
    with os.fdopen(read, "rb") as out:
        for chunk in iter(lambda: out.read(65536), b""):
            chunks.append(chunk)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    output = b"".join(chunks).decode(errors="replace")
    if status:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{output}")
    return usage.ru_utime + usage.ru_stime, wall, output


def estimated_impacts(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM diagnosis_recommendation WHERE impact->>'method' = 'simulated'"
        ).fetchone()
    return int(row[0])


def last_cycle_seconds(url: str) -> float:
    """The last stored cycle's own steps (``ClusterCycle.steps``: diagnose, snapshot, findings,
    tenancy, incidents, recommend), without what runs after it commits (``seconds`` includes the
    impact estimates where they run inline)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT steps FROM diagnosis_clustercycle ORDER BY id DESC LIMIT 1"
        ).fetchone()
    steps = row[0] or {}
    return sum(
        float(v) for k, v in steps.items() if k.endswith("_s") and isinstance(v, int | float)
    )


def run_size(gpus: int, cycles: int, url: str, repeats: int) -> dict[str, Any]:
    document = build_document(gpus)
    as_of = datetime.fromisoformat(str(document["as_of"]).replace("Z", "+00:00")).astimezone(UTC)
    with tempfile.TemporaryDirectory(prefix="gpuobs-import-bench-") as folder:
        files = []
        for i in range(cycles):
            document["as_of"] = (as_of + timedelta(minutes=i)).isoformat().replace("+00:00", "Z")
            path = Path(folder) / f"snapshot-{i + 1:02d}.json"
            path.write_text(json.dumps(document))
            files.append(path)
        size_mb = files[0].stat().st_size / 1e6
        print(
            f"\n== {gpus:,} GPUs: {len(document['nodes']):,} nodes, {len(document['jobs']):,} "
            f"jobs, {size_mb:.1f} MB of JSON, {cycles} cycles as whole processes, "
            f"impacts {IMPACTS} =="
        )
        startup = statistics.median(run_reaped(["check"], url)[0] for _ in range(repeats))
        validate = statistics.median(
            run_reaped(["snapshot", "validate", str(files[0])], url)[0] for _ in range(repeats)
        )
        print(f"start-up (manage.py check), median of {repeats}: {startup:.2f} s CPU")
        print(f"read + validate (snapshot validate - start-up): {validate - startup:.2f} s CPU")
        print(f"{'cycle':>5} {'cpu':>6} {'wall':>6} {'stored':>6} {'impacts':>7} {'goal':>6}")
        rows = []
        for i, path in enumerate(files, start=1):
            before = estimated_impacts(url)
            cpu, wall, _ = run_reaped(["snapshot", "import", str(path), "--diagnose"], url)
            stored = last_cycle_seconds(url)
            ran = estimated_impacts(url) - before
            goal = GOAL_FACTOR * stored + startup
            rows.append({"cycle": i, "cpu": cpu, "wall": wall, "stored": stored, "goal": goal})
            verdict = "ok" if cpu <= goal else "OVER"
            print(f"{i:>5} {cpu:>6.2f} {wall:>6.2f} {stored:>6.2f} {ran:>7} {goal:>6.2f} {verdict}")
    over = [r["cycle"] for r in rows if r["cpu"] > r["goal"]]
    print(
        f"-- {gpus:,} GPUs: median process {statistics.median(r['cpu'] for r in rows):.2f} s CPU, "
        f"{statistics.median(r['wall'] for r in rows):.2f} s wall; stored cycle "
        f"{statistics.median(r['stored'] for r in rows):.2f} s; start-up {startup:.2f} s CPU; "
        f"goal (process CPU <= {GOAL_FACTOR:g} x stored cycle + start-up) "
        + ("met by every cycle" if not over else f"missed by cycles {over}")
    )
    return {"gpus": gpus, "startup": startup, "validate": validate, "rows": rows, "over": over}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16384", help="GPU counts, comma-separated")
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3, help="runs of check and validate")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--impacts", choices=["deferred", "inline"], default="deferred")
    args = parser.parse_args()
    global IMPACTS
    IMPACTS = args.impacts
    for gpus in [int(s) for s in args.sizes.split(",")]:
        if not fresh_database(args.database_url):
            return 0
        run_reaped(["migrate", "--no-input", "-v", "0"], args.database_url)
        try:
            run_size(gpus, args.cycles, args.database_url, args.repeats)
        finally:
            if not args.keep:
                drop_database(args.database_url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
