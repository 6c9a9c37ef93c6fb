"""``idle-held``: a running job that keeps GPU memory loaded while its GPUs compute nothing — the
notebook left open (docs/rules.md).

It takes over from ``idle-allocation`` where memory is held: a job idle-held fires on (mean
``fb_used_frac.mean`` at least ``min_fb``) is left out of ``idle-allocation`` (whose ``held_fb``
threshold has the same default), so one idle job gets one finding. Its GPUs stay in the
``allocated-idle`` bucket of the breakdown either way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold, evidence_numbers
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.job_gpus import evidence_by_job, job_gpu_rows
from diagnosis.core.rules.running_jobs import (
    NO_UTIL,
    at_least,
    below,
    job_evidence,
    min_runtime_threshold,
    running_jobs_with_stats,
)
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.text import gettext_noop, message, no_tenant

NO_FB = "idle, but no framebuffer metric on any of its GPUs"
MIN_FB = 0.10  # the default of min_fb, and of idle-allocation's held_fb


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    min_fb = thresholds["min_fb"]
    max_util = thresholds["max_util"]
    jobs, not_judged = running_jobs_with_stats(snapshot, facts, thresholds["min_runtime"])
    util = jobs["util_mean"]
    fb = jobs["fb_used_frac_mean"]
    not_judged[NO_UTIL] = int(util.isna().sum())
    idle = below(util, max_util)
    not_judged[NO_FB] = int((idle & fb.isna()).sum())
    held = jobs[idle & at_least(fb, min_fb)]
    if held.empty:
        return Judgement((), not_judged)

    rows = job_gpu_rows(snapshot, facts, held.index, ["util_mean", "fb_used_frac_mean"])
    per_gpu = evidence_by_job(rows, {"util": "util_mean", "fb_used_frac": "fb_used_frac_mean"})
    findings = []
    for job_id, job in zip(held.index.tolist(), held.to_dict("records"), strict=True):
        hours = job["runtime_s"] / 3600
        summary = message(
            gettext_noop(
                "Job %(job)s (%(tenant)s, %(kind)s) keeps %(memory)s of the memory of %(gpus)s "
                "GPU(s) loaded at %(util)s mean utilisation after %(hours)s h."
            ),
            job=str(job_id),
            tenant=no_tenant(job["tenant"]),
            kind=job["kind"] or message(gettext_noop("no kind")),
            memory=f"{job['fb_used_frac_mean']:.0%}",
            gpus=int(job["gpus"]),
            util=f"{job['util_mean']:.1%}",
            hours=f"{hours:.1f}",
        )
        evidence = {
            **job_evidence(job_id, job),
            **evidence_numbers(job, "util_mean", "fb_used_frac_mean"),
            "max_util": max_util,
            "min_fb": min_fb,
            "per_gpu": per_gpu.get(job_id, []),
        }
        findings.append(RULE.finding(f"job:{job_id}", summary, evidence))
    return Judgement(tuple(findings), not_judged)


RULE = Rule(
    id="idle-held",
    title="GPU memory held by an idle job",
    severity="warning",
    subject_kind="job:",
    thresholds=(
        min_runtime_threshold(1800),
        Threshold(
            "min_fb",
            MIN_FB,
            "fires when the mean fb_used_frac.mean of the job's GPUs is at least this (keep "
            "idle-allocation's held_fb equal to it)",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "max_util",
            0.05,
            "fires when the mean util.mean of the job's GPUs is below this",
            unit="fraction",
            maximum=1.0,
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A running job started at least `min_runtime` ago whose GPUs' mean "
            "`fb_used_frac.mean` is at least `min_fb` while their mean `util.mean` is below "
            "`max_util`: memory loaded (a model, a kernel's tensors), compute idle. This is "
            "the memory-holding part of `idle-allocation`, which leaves such jobs to this "
            "rule (its `held_fb` threshold, default equal to `min_fb`): one idle job, one "
            "finding. Not judged (counted): a job with no utilisation reading on any GPU; an "
            "idle job with no framebuffer reading (`idle-allocation` judges it)."
        ),
        why=(
            "Interactive sessions — Jupyter kernels, debuggers, an `ipython` with a model "
            "loaded — keep their GPUs and memory for hours between bursts of work. The GPUs "
            "cannot go to a waiting job, and because memory is in use they do not look free "
            "to people scanning `nvidia-smi`. Their GPU-hours are `allocated-idle`."
        ),
        fix=(
            "Ask the owner to save and shut the kernel, or give interactive sessions an idle "
            "culler: JupyterHub `jupyterhub-idle-culler --timeout=3600`, Jupyter Server "
            "`MappingKernelManager.cull_idle_timeout` with `cull_connected`; a time limit on "
            "interactive partitions (Slurm `MaxTime` on the partition); or move notebooks to "
            "MIG slices or time-sliced GPUs so an idle one holds a fraction of a GPU."
        ),
        evidence=(
            "`util_mean`, `fb_used_frac_mean`, `max_util`, `min_fb`, `runtime_s`, `gpus`, "
            "`per_gpu` (each GPU's `util` and `fb_used_frac`, null when not reported), the "
            "job's `tenant`, `queue`, `pool`, `kind`."
        ),
        references=(
            "DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_FREE, DCGM_FI_PROF_GR_ENGINE_ACTIVE "
            "(dcgm-exporter)",
            "jupyterhub/jupyterhub-idle-culler",
        ),
    ),
    evaluate=evaluate,
    for_s=600,
    keep_firing_for_s=300,
    reads_gpu_metrics=True,
)
