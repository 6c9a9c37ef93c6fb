"""``low-mfu``: a busy training job that gets little of its GPUs' peak FLOP/s
(docs/rules.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold, evidence_number
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.running_jobs import (
    NO_UTIL,
    at_least,
    below,
    min_runtime_threshold,
    running_jobs_with_stats,
)
from diagnosis.core.snapshot import GPU_KEY, ClusterSnapshot
from diagnosis.core.text import gettext_noop, message, no_tenant

# The columns a finding reads (the other columns of the jobs frame are not turned into dicts).
READ = [
    "tenant",
    "queue",
    "pool",
    "runtime_s",
    "gpus",
    "mfu",
    "method",
    "util_mean",
    "tensor_active_mean",
    "achieved_tflops_per_gpu",
    "peak_tflops",
]
REPORTED = "reported_tflops"
PROXY = "tensor_active_proxy"
NO_MFU = "no MFU or tensor activity"
NO_PEAK = "reported TFLOP/s but unknown GPU model peak, and no tensor activity"


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    jobs, not_judged = running_jobs_with_stats(
        snapshot, facts, thresholds["min_runtime"], kind="training"
    )
    util = jobs["util_mean"]
    not_judged[NO_UTIL] = int(util.isna().sum())
    busy = jobs[at_least(util, thresholds["min_util"])].copy()

    busy["peak_tflops"] = _peak_per_job(snapshot, facts, busy.index)
    tflops = busy["achieved_tflops_per_gpu"]
    tensor = busy["tensor_active_mean"]
    reported = tflops.notna() & busy["peak_tflops"].notna() & (busy["peak_tflops"] > 0)
    proxy = ~reported & tensor.notna()
    busy["mfu"] = np.where(reported, tflops / busy["peak_tflops"], tensor)
    busy["method"] = np.where(reported, REPORTED, np.where(proxy, PROXY, ""))
    not_judged[NO_PEAK] = int((~reported & ~proxy & tflops.notna()).sum())
    not_judged[NO_MFU] = int((~reported & ~proxy & tflops.isna()).sum())

    low = busy[(reported | proxy) & below(busy["mfu"], thresholds["min_mfu"])]
    models = _models_per_job(snapshot, facts, low.index)
    findings = []
    for job_id, job in zip(low.index.tolist(), low[READ].to_dict("records"), strict=True):
        method = job["method"]
        model_names = models.get(job_id, [])
        note = None
        if method == PROXY and not math.isnan(job["achieved_tflops_per_gpu"]):
            note = (
                f"the job reports {job['achieved_tflops_per_gpu']:g} TFLOP/s per GPU but the "
                f"peak of {', '.join(model_names) or 'its GPU model'} is unknown: "
                f"tensor-core activity is used instead"
            )
        how = (
            gettext_noop("reported TFLOP/s")
            if method == REPORTED
            else gettext_noop("tensor-core activity, a proxy")
        )
        summary = message(
            gettext_noop(
                "Training job %(job)s (%(tenant)s) keeps its %(gpus)s GPU(s) %(util)s busy but "
                "reaches an MFU of %(mfu)s (< %(min_mfu)s, from %(how)s)."
            ),
            job=str(job_id),
            tenant=no_tenant(job["tenant"]),
            gpus=int(job["gpus"]),
            util=f"{job['util_mean']:.0%}",
            mfu=f"{job['mfu']:.0%}",
            min_mfu=f"{thresholds['min_mfu']:.0%}",
            how=message(how),
        )
        evidence = {
            "job": job_id,
            "tenant": job["tenant"],
            "queue": job["queue"],
            "pool": job["pool"],
            "runtime_s": int(job["runtime_s"]),
            "gpus": int(job["gpus"]),
            "mfu": float(job["mfu"]),
            "method": method,
            "util_mean": evidence_number(job["util_mean"]),
            "tensor_active_mean": evidence_number(job["tensor_active_mean"]),
            "achieved_tflops_per_gpu": evidence_number(job["achieved_tflops_per_gpu"]),
            "gpu_model": ", ".join(model_names) or None,
            "peak_tflops": evidence_number(job["peak_tflops"]),
            "min_mfu": thresholds["min_mfu"],
            "note": note,
        }
        findings.append(RULE.finding(f"job:{job_id}", summary, evidence))
    return Judgement(tuple(findings), not_judged)


def _peak_per_job(snapshot: ClusterSnapshot, facts: SnapshotFacts, job_ids: pd.Index) -> pd.Series:
    """Per job: the mean over its GPUs of their model's peak dense BF16 TFLOP/s; NaN when any of
    its GPUs is of a model whose peak is unknown."""
    gpus = snapshot.gpus[GPU_KEY].assign(peak=facts.peak_tflops_per_gpu().to_numpy())
    alloc = _held_gpus(snapshot, facts, job_ids, gpus)
    peak = alloc["peak"].astype("float64")
    by_job = peak.groupby(alloc["job"].to_numpy())
    mean = by_job.mean()
    mean[peak.isna().groupby(alloc["job"].to_numpy()).any()] = np.nan
    return mean.reindex(job_ids)


def _held_gpus(
    snapshot: ClusterSnapshot, facts: SnapshotFacts, job_ids: pd.Index, gpus: pd.DataFrame
) -> pd.DataFrame:
    """The allocations of ``job_ids`` with the columns of the GPUs they hold (``gpus``, aligned
    with ``snapshot.gpus``)."""
    return facts.allocations_with(snapshot.allocations["job"].isin(job_ids).to_numpy(), gpus)


def _models_per_job(
    snapshot: ClusterSnapshot, facts: SnapshotFacts, job_ids: pd.Index
) -> dict[str, list[str]]:
    """The distinct GPU models each job (of ``job_ids``) runs on."""
    alloc = _held_gpus(snapshot, facts, job_ids, snapshot.gpus[[*GPU_KEY, "gpu_model"]])
    pairs = pd.DataFrame(
        {"job": alloc["job"].to_numpy(), "model": alloc["gpu_model"].to_numpy()}
    ).drop_duplicates()
    models: dict[str, list[str]] = {}
    for job, model in zip(pairs["job"], pairs["model"], strict=True):
        if isinstance(model, str):
            models.setdefault(job, []).append(model)
    return {job: sorted(names) for job, names in models.items()}


RULE = Rule(
    id="low-mfu",
    title="Busy training job with low model FLOPs utilisation",
    severity="info",
    subject_kind="job:",
    thresholds=(
        min_runtime_threshold(900),
        Threshold(
            "min_util",
            0.6,
            "only jobs whose GPUs' mean util.mean is at least this are judged",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "min_mfu",
            0.25,
            "fires when the job's MFU (or its tensor-activity proxy) is below this",
            unit="fraction",
            maximum=1.0,
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A running `training` job started at least `min_runtime` ago whose GPUs are busy "
            "(mean `util.mean` ≥ `min_util`) but whose model FLOPs utilisation is below "
            "`min_mfu`. MFU is `achieved_tflops_per_gpu / peak` when the job reports its "
            "TFLOP/s and the peak dense BF16 TFLOP/s of its GPU model is known (method "
            "`reported_tflops`); otherwise the mean `tensor_active.mean` of its GPUs stands in "
            "for it (method `tensor_active_proxy`; also when the job reports TFLOP/s on a GPU "
            "model whose peak is unknown, with a note saying so). A job with neither is not "
            "judged."
        ),
        why=(
            "High utilisation only says a kernel was running; MFU says how much of the GPU's "
            "arithmetic the job turns into training progress. A busy job at low MFU pays full "
            "price for its GPU-hours and gets a fraction of the work: often recoverable with "
            "software settings alone."
        ),
        fix=(
            "Profile one step (PyTorch profiler, Nsight Systems). Usual remedies: BF16/FP8 "
            "mixed precision, fused kernels (FlashAttention, fused optimisers), larger "
            "micro-batches or gradient accumulation, activation checkpointing to afford them, "
            "overlap of communication with compute, `torch.compile`, and a parallelism layout "
            "that keeps tensor parallelism inside NVLink (see `topology-misplacement`)."
        ),
        evidence=(
            "`mfu`, `method` (`reported_tflops` or `tensor_active_proxy`), `util_mean`, "
            "`tensor_active_mean`, `achieved_tflops_per_gpu`, `gpu_model`, `peak_tflops`, "
            "`note` (why a proxy was used although TFLOP/s were reported), `runtime_s`, `gpus`."
        ),
        references=(
            "docs/snapshot.md (peak BF16 TFLOP/s table)",
            "Chowdhery et al., PaLM (2022), appendix B: model FLOPs utilisation",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (dcgm-exporter)",
        ),
    ),
    evaluate=evaluate,
    for_s=900,
    keep_firing_for_s=600,
    reads_gpu_metrics=True,
)
