"""``idle-allocation``: a running job that holds GPUs it does not use (docs/rules.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold, evidence_number
from diagnosis.core.rules.builtin.idle_held import MIN_FB
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.running_jobs import (
    NO_UTIL,
    at_least,
    below,
    job_evidence,
    min_runtime_threshold,
    running_jobs_with_stats,
)
from diagnosis.core.snapshot import GPU_KEY, WHOLE_GPU, ClusterSnapshot
from diagnosis.core.text import gettext_noop, message, no_tenant


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    min_runtime = thresholds["min_runtime"]
    max_util = thresholds["max_util"]
    jobs, not_judged = running_jobs_with_stats(snapshot, facts, min_runtime)
    util = jobs["util_mean"]
    not_judged[NO_UTIL] = int(util.isna().sum())
    # Idle with memory held is idle-held's finding, not this rule's (one idle job, one finding).
    idle = jobs[below(util, max_util) & ~at_least(jobs["fb_used_frac_mean"], thresholds["held_fb"])]
    if idle.empty:
        return Judgement((), not_judged)

    per_gpu = gpu_rows(snapshot, facts, idle.index)
    findings = []
    for job_id, job in zip(idle.index.tolist(), idle.to_dict("records"), strict=True):
        gpus = per_gpu.get(job_id, [])
        with_util = sum(1 for g in gpus if g["util"] is not None)
        unhealthy = [g["gpu"] for g in gpus if g["health"] != "ok"]
        not_ready = sorted({g["gpu"].split("/")[0] for g in gpus if g["node_state"] != "ready"})
        hours = job["runtime_s"] / 3600
        summary = message(
            gettext_noop(
                "Job %(job)s (%(tenant)s) holds %(gpus)s GPU(s) at %(util)s mean utilisation "
                "(< %(max_util)s) after %(hours)s h."
            )
            if not (unhealthy or not_ready)
            else gettext_noop(
                "Job %(job)s (%(tenant)s) holds %(gpus)s GPU(s) at %(util)s mean utilisation "
                "(< %(max_util)s) after %(hours)s h. Some of its GPUs are unhealthy or on "
                "nodes that are not ready."
            ),
            job=str(job_id),
            tenant=no_tenant(job["tenant"]),
            gpus=int(job["gpus"]),
            util=f"{job['util_mean']:.1%}",
            max_util=f"{max_util:.0%}",
            hours=f"{hours:.1f}",
        )
        evidence = {
            **job_evidence(job_id, job),
            "gpus_with_util": with_util,
            "util_mean": evidence_number(job["util_mean"]),
            "fb_used_frac_mean": evidence_number(job["fb_used_frac_mean"]),
            "max_util": max_util,
            "per_gpu": [
                {
                    "gpu": g["gpu"],
                    "util": g["util"],
                    "fb_used_frac": g["fb_used_frac"],
                    **{k: g[k] for k in ("mig", "index_guessed") if k in g},
                }
                for g in gpus
            ],
            "unhealthy_gpus": unhealthy,
            "nodes_not_ready": not_ready,
        }
        findings.append(RULE.finding(f"job:{job_id}", summary, evidence))
    return Judgement(tuple(findings), not_judged)


def gpu_rows(
    snapshot: ClusterSnapshot, facts: SnapshotFacts, job_ids: pd.Index
) -> dict[str, list[dict[str, Any]]]:
    """Per job (of ``job_ids``): its GPUs in allocation order with util, fb used, health and
    node state, ready for evidence."""
    alloc = snapshot.allocations
    alloc = alloc[alloc["job"].isin(job_ids)].sort_values(["job", "order"])
    state = facts.gpu_state[
        [
            *GPU_KEY,
            "uuid",
            "mig_profile",
            "index_guessed",
            "util_mean",
            "fb_used_frac_mean",
            "health",
            "node_state",
        ]
    ]
    rows = alloc.merge(state, on=GPU_KEY, how="left")
    out: dict[str, list[dict[str, Any]]] = {}
    columns = (
        "job",
        "node",
        "index",
        "mig_instance",
        "mig_profile",
        "uuid",
        "index_guessed",
        "util_mean",
        "fb_used_frac_mean",
        "health",
        "node_state",
    )
    for job, node, index, instance, profile, uuid, guessed, util, fb, health, node_state in zip(
        *(rows[c].tolist() for c in columns), strict=True
    ):
        entry = {
            "gpu": f"{node}/{int(index)}",
            "util": evidence_number(util),
            "fb_used_frac": evidence_number(fb),
            "health": health,
            "node_state": node_state,
        }
        if instance != WHOLE_GPU:
            entry["mig"] = {"instance": int(instance), "profile": profile, "uuid": uuid}
        if guessed:
            entry["index_guessed"] = True
        out.setdefault(job, []).append(entry)
    return out


RULE = Rule(
    id="idle-allocation",
    title="GPUs allocated but idle",
    severity="warning",
    subject_kind="job:",
    thresholds=(
        min_runtime_threshold(1800),
        Threshold(
            "max_util",
            0.05,
            "fires when the mean util.mean of the job's GPUs is below this",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "held_fb",
            MIN_FB,
            "jobs whose GPUs' mean fb_used_frac.mean is at least this are left to idle-held "
            "(keep equal to idle-held's min_fb)",
            unit="fraction",
            maximum=1.0,
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A running job started at least `min_runtime` ago whose GPUs' mean utilisation "
            "(the mean over its GPUs of their window `util.mean`) is below `max_util`. GPUs "
            "without a utilisation reading are left out of the mean; a job none of whose GPUs "
            "has one is not judged (counted under *not judged*), never called idle or healthy. "
            "A job whose GPUs' mean `fb_used_frac.mean` is at least `held_fb` is "
            "`idle-held`'s finding instead (memory loaded, compute idle: a notebook), so an "
            "idle job gets one finding; a job without a framebuffer reading stays here."
        ),
        why=(
            "An idle allocation holds GPUs other jobs are waiting for: every hour of it is a "
            "GPU-hour in the `allocated-idle` bucket of the breakdown. Typical causes: a "
            "notebook or debugging session left open, a job hung on a collective or on I/O, a "
            "service scaled for a peak that is not there."
        ),
        fix=(
            "Ask the owner (tenant in the evidence) whether the job is still needed; stop or "
            "shrink it, or give interactive sessions an idle timeout. If the job should be "
            "busy, check its logs for a hang (NCCL timeout, stuck data loader). Unhealthy GPUs "
            "or nodes that are not ready in the evidence point at a hardware cause instead."
        ),
        evidence=(
            "`util_mean`, `fb_used_frac_mean`, `runtime_s`, `gpus`, `gpus_with_util`, "
            "`per_gpu` (each GPU's `util` and `fb_used_frac`, null when not reported), "
            "`unhealthy_gpus`, `nodes_not_ready`, the job's `tenant`, `queue`, `pool`, `kind`."
        ),
        references=(
            "docs/accounting.md (`allocated-idle` bucket)",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE / DCGM_FI_DEV_GPU_UTIL (dcgm-exporter)",
        ),
    ),
    evaluate=evaluate,
    for_s=600,
    keep_firing_for_s=300,
    reads_gpu_metrics=True,
)
