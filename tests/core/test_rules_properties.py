"""Properties every rule and the accounting keep on any valid snapshot.

Random documents of ``gpuobs.snapshot/v1`` (nodes in a few pools and states, unhealthy GPUs,
metrics, queues, jobs in every state with valid allocations, partial gangs) go through
:func:`diagnosis.core.snapshot.load`; then:

- no rule raises (the run's errors are empty), and every finding's evidence is plain JSON;
- every finding's subject names an object of the snapshot;
- a gang is in one deadlock at most, and never also reported as a partial hold;
- the accounting puts every GPU in one bucket, and the buckets sum to capacity for the
  cluster, each pool and each tenant.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.accounting import BUCKETS, account
from diagnosis.core.rules.engine import run_rules
from tests.support.builders import AS_OF, rfc3339

POOLS = ["a100", "h100", "l40s"]
MODELS = {"a100": "A100-SXM4-80GB", "h100": "H100-SXM5-80GB", "l40s": "L40S"}
TENANTS = ["team-a", "team-b", "team-c"]
fraction = st.floats(0.0, 1.0, allow_nan=False)


def ago(seconds: int) -> str:
    return rfc3339(AS_OF - timedelta(seconds=seconds))


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    pools = draw(st.lists(st.sampled_from(POOLS), min_size=1, max_size=3, unique=True))
    crowded = draw(st.booleans())  # few nodes, many gangs: contention, deadlocks
    nodes = []
    for i in range(draw(st.integers(1, 3) if crowded else st.integers(0, 6))):
        pool = pools[0] if crowded else draw(st.sampled_from(pools))
        gpus = 8 if crowded else draw(st.sampled_from([0, 1, 2, 4, 8, 8, 8]))
        node: dict[str, Any] = {
            "name": f"{pool}-{i:03d}",
            "pool": pool,
            "gpu_model": MODELS[pool],
            "gpus": gpus,
            "state": draw(st.sampled_from(["ready"] * 4 + ["cordoned", "drained", "down"])),
        }
        if draw(st.booleans()):
            node["cpu_util"] = draw(fraction)
        if gpus and draw(st.booleans()):
            half = max(1, gpus // 2)
            node["topology"] = {
                "nvlink_domains": [list(range(half)), list(range(half, gpus))] if half < gpus
                else [list(range(gpus))],
                "numa": [0] * half + [1] * (gpus - half),
            }  # fmt: skip
        nodes.append(node)

    gpus = []
    for node in nodes:
        for index in range(node["gpus"]):
            if not draw(st.integers(0, 3)):
                continue  # not reported
            entry: dict[str, Any] = {"node": node["name"], "index": index}
            if not draw(st.integers(0, 9)):
                entry["health"] = "unhealthy"
            if draw(st.integers(0, 4)):
                p10, mean, p90 = sorted(draw(st.lists(fraction, min_size=3, max_size=3)))
                entry["util"] = {"mean": mean, "p10": p10, "p90": p90}
            if draw(st.booleans()):
                entry["tensor_active"] = {"mean": draw(fraction)}
                entry["fb_used_frac"] = {"mean": draw(fraction)}
            if draw(st.booleans()):  # the hidden-waste fields (issue 20)
                entry["power_w"] = {"mean": draw(st.floats(20.0, 700.0))}
                entry["dram_active"] = {"mean": draw(fraction)}
            if not draw(st.integers(0, 3)):
                entry["power_limit_w"] = {"max": draw(st.sampled_from([250.0, 400.0, 700.0]))}
                entry["throttle_thermal"] = {"frac": draw(fraction)}
                entry["throttle_power"] = {"frac": draw(fraction)}
                entry["row_remap"] = {
                    "pending": draw(st.integers(0, 1)),
                    "failure": draw(st.integers(0, 1)),
                    "uncorrectable": draw(st.integers(0, 3)),
                }
            if draw(st.integers(0, 5)) == 0:
                code = draw(st.sampled_from([13, 31, 43, 48, 63, 79, 94, 95, 119, 999]))
                entry["xid"] = [{"code": code, "time": ago(draw(st.integers(0, 3600)))}]
            gpus.append(entry)

    queues = []
    for name in draw(st.lists(st.sampled_from([*TENANTS, "shared"]), max_size=3, unique=True)):
        queue: dict[str, Any] = {"name": name, "tenant": name if name in TENANTS else "team-a"}
        if draw(st.booleans()):
            queue["deserved_gpus"] = draw(st.integers(0, 32))
        if draw(st.booleans()):
            queue["capability_gpus"] = draw(st.integers(0, 64))
        queues.append(queue)

    free = {node["name"]: list(range(node["gpus"])) for node in nodes}
    jobs = []
    for j in range(draw(st.integers(0, 14))):
        states = ["pending", "pending", "running", "running", "completed"]
        state = draw(
            st.sampled_from(["pending", "pending", "pending", "running"] if crowded else states)
        )
        pods = draw(st.integers(2 if crowded else 1, 4))
        gang = pods > 1 and (crowded or draw(st.booleans()))
        min_member = draw(st.integers(2 if crowded else 1, pods)) if gang else pods
        gpus_per_pod = draw(st.sampled_from([2, 4] if crowded else [0, 1, 2, 4, 4, 8]))
        pool = pools[0] if crowded else draw(st.sampled_from([*pools, None]))
        submitted = draw(st.integers(0, 12 * 3600))
        job: dict[str, Any] = {
            "id": f"job-{j}",
            "tenant": draw(st.sampled_from(TENANTS)),
            "queue": draw(st.sampled_from([*TENANTS, "shared", None])),
            "pool": pool,
            "kind": draw(st.sampled_from(["training", "inference", None])),
            "priority": draw(st.sampled_from([0, 0, 10, 100])),
            "state": state,
            "submitted": ago(submitted),
            "pods": pods,
            "gpus_per_pod": gpus_per_pod,
            "gang": gang,
            "min_member": min_member,
        }
        if state != "pending" or draw(st.integers(0, 5)) == 0:
            job["started"] = ago(draw(st.integers(0, submitted)))
        if draw(st.integers(0, 3)) == 0:
            job["parallelism"] = {"tp": draw(st.sampled_from([1, 2, 4, 8]))}
        if draw(st.integers(0, 3)) == 0:
            job["achieved_tflops_per_gpu"] = draw(st.floats(0, 400))
        to_bind = 0
        if state == "running":
            to_bind = pods
        elif state == "pending" and gang and min_member > 1:
            to_bind = draw(st.integers(1 if crowded else 0, min_member - 1))
            if to_bind and draw(st.booleans()):
                job["partial_since"] = ago(draw(st.integers(0, submitted)))
        allocation = []
        candidates = [n for n in nodes if pool is None or n["pool"] == pool]
        for _ in range(to_bind):
            roomy = [n["name"] for n in candidates if len(free[n["name"]]) >= gpus_per_pod]
            if not roomy or gpus_per_pod == 0:
                break
            name = draw(st.sampled_from(roomy))
            taken, free[name] = free[name][:gpus_per_pod], free[name][gpus_per_pod:]
            allocation.append({"node": name, "gpus": taken})
        job["allocation"] = allocation
        if not draw(st.integers(0, 4)):
            job["preemptions"] = draw(st.integers(0, 5))
        jobs.append(job)

    return {
        "format": snapshot_format.FORMAT,
        "cluster": "prop",
        "as_of": rfc3339(AS_OF),
        "window_s": draw(st.sampled_from([60, 900, 3600])),
        "scheduler": {"kind": "sim", "placement": dict.fromkeys(pools, "spread")},
        "nodes": nodes,
        "gpus": gpus,
        "queues": queues,
        "jobs": jobs,
        "events": [
            {"time": ago(draw(st.integers(0, 8 * 3600))), "kind": "preempted", "job": job["id"]}
            for job in jobs
            for _ in range(draw(st.integers(0, 3)) if job["state"] != "completed" else 0)
        ],
    }


def subject_exists(subject: str, snap) -> bool:
    kind, _, name = subject.partition(":")
    if kind == "cluster":
        return name == snap.cluster
    if kind == "pool":
        return name in set(snap.nodes["pool"])
    if kind == "node":
        return name in snap.nodes.index
    if kind == "job":
        return name in snap.jobs.index
    if kind == "jobs":
        ids = name.split("+")
        return len(ids) >= 2 and ids == sorted(ids) and all(i in snap.jobs.index for i in ids)
    if kind == "gpu":
        node, _, index = name.rpartition("/")
        gpus = snap.gpus
        return bool(((gpus["node"] == node) & (gpus["index"] == int(index))).any())
    if kind == "queue":
        return name in snap.queues.index
    if kind == "tenant":
        return name in set(snap.jobs["tenant"].dropna()) | set(snap.queues["tenant"])
    return False


# Each example runs every rule (~0.1 s of pandas overhead); shrinking a failure would take
# minutes, so a failure is reported as drawn (Hypothesis prints the document).
def plain_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


SETTINGS = settings(
    max_examples=80,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(documents())
def test_rules_and_accounting_hold_on_any_valid_snapshot(document):
    snap = snapshot_format.load(document)

    diagnosis = run_rules(snap)
    result = account(diagnosis)

    # No rule fails; every finding names a real object and carries plain JSON.
    assert diagnosis.errors == ()
    for finding in diagnosis.findings:
        assert subject_exists(finding.subject, snap), finding.subject
        assert plain_json(finding.evidence), f"{finding.rule} {finding.subject}: {finding.evidence}"

    # A gang is in one deadlock at most, and never also a partial hold.
    members = [f.subject[5:].split("+") for f in diagnosis.by_rule("gang-deadlock")]
    deadlocked = [job for group in members for job in group]
    assert len(deadlocked) == len(set(deadlocked))
    held = {f.subject[4:] for f in diagnosis.by_rule("gang-partial-hold")}
    assert not held & set(deadlocked)

    # Every GPU in one bucket; buckets sum to capacity for the cluster, each pool, each tenant.
    assert len(result.gpu_bucket) == snap.total_gpus == result.cluster.gpus
    assert set(result.gpu_bucket) <= set(BUCKETS)
    for scope in [result.cluster, *result.pools.values(), *result.tenants.values()]:
        assert sum(scope.buckets.values()) == scope.gpus
        assert all(count >= 0 for count in scope.buckets.values())
    assert sum(b.gpus for b in result.pools.values()) == snap.total_gpus
    assert sum(b.gpus for b in result.tenants.values()) == snap.total_gpus
    for bucket in BUCKETS:
        in_pools = sum(b.buckets[bucket] for b in result.pools.values())
        assert in_pools == result.cluster.buckets[bucket]
    json.dumps(result.as_dict(), allow_nan=False)

    # Unavailable is exactly the GPUs of nodes not ready or unhealthy; free buckets stay
    # within each pool's usable GPUs.
    gpus = snap.gpus
    unusable = (gpus["health"] != "ok") | (gpus["node"].map(snap.nodes["state"]) != "ready")
    assert result.cluster.buckets["unavailable"] == int(unusable.sum())
    for pool, breakdown in result.pools.items():
        free = sum(breakdown.buckets[b] for b in BUCKETS[BUCKETS.index("free-fragmented") :])
        assert free <= int((~unusable & (gpus["pool"] == pool)).sum())
