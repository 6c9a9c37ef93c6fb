"""``hung-collective``: a multi-GPU job whose GPUs look busy but compute nothing — the signature
of a hung NCCL collective (docs/rules.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold, evidence_numbers
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.job_gpus import evidence_by_job, job_gpu_rows
from diagnosis.core.rules.running_jobs import (
    at_least,
    at_most,
    below,
    job_evidence,
    running_jobs_with_stats,
)
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.text import gettext_noop, message, no_tenant

NO_UTIL_ALL = "utilisation not reported on every GPU"
NO_POWER = "no power reading with a known power limit"
NO_TENSOR = "no tensor activity metric"

GPU_COLUMNS = ["util_mean", "power_w_mean", "tensor_active_mean", "dram_active_mean"]


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    min_util = thresholds["min_util"]
    max_power_frac = thresholds["max_power_frac"]
    max_tensor = thresholds["max_tensor"]
    max_dram = thresholds["max_dram"]
    jobs, not_judged = running_jobs_with_stats(snapshot, facts, thresholds["min_runtime"])
    jobs = jobs[jobs["gpus"] >= thresholds["min_gpus"]]
    not_judged.update({NO_UTIL_ALL: 0, NO_POWER: 0, NO_TENSOR: 0})
    if jobs.empty:
        return Judgement((), not_judged)

    rows = job_gpu_rows(snapshot, facts, jobs.index, GPU_COLUMNS)
    rows["power_frac"] = rows["power_w_mean"] / rows["power_limit_w"].where(
        rows["power_limit_w"] > 0
    )
    grouped = rows.groupby("job", sort=False)
    per_job = grouped.agg(
        gpus=("node", "size"),
        util_known=("util_mean", "count"),
        util_min=("util_mean", "min"),
        util_mean=("util_mean", "mean"),
        power_frac=("power_frac", "mean"),
        power_w=("power_w_mean", "mean"),
        power_limit_w=("power_limit_w", "mean"),
        tensor=("tensor_active_mean", "mean"),
        dram=("dram_active_mean", "mean"),
        nodes=("node", "nunique"),
    ).reindex(jobs.index)

    # Every GPU spins: a GPU below min_util settles it (not hung); an unreported one leaves
    # "every GPU" open.
    some_low = below(per_job["util_min"], min_util).to_numpy()
    all_reported = (per_job["util_known"] == per_job["gpus"]).to_numpy()
    spinning = ~some_low & all_reported & at_least(per_job["util_min"], min_util).to_numpy()
    not_judged[NO_UTIL_ALL] = int((~some_low & ~all_reported).sum())

    power = per_job["power_frac"].to_numpy(dtype=float)
    tensor = per_job["tensor"].to_numpy(dtype=float)
    dram = per_job["dram"].to_numpy(dtype=float)
    power_low = at_most(power, max_power_frac)
    tensor_low = at_most(tensor, max_tensor)
    # DRAM activity, where reported, must be near zero too; where absent it is not required.
    dram_quiet = np.isnan(dram) | at_most(dram, max_dram)
    settled_busy = (~np.isnan(power) & ~power_low) | (~np.isnan(tensor) & ~tensor_low) | ~dram_quiet
    open_power = spinning & ~settled_busy & np.isnan(power)
    open_tensor = spinning & ~settled_busy & ~np.isnan(power) & np.isnan(tensor)
    not_judged[NO_POWER] = int(open_power.sum())
    not_judged[NO_TENSOR] = int(open_tensor.sum())
    hung = spinning & power_low & tensor_low & dram_quiet
    if not hung.any():
        return Judgement((), not_judged)

    hung_jobs = jobs[hung]
    stats = per_job[hung]
    per_gpu = evidence_by_job(
        rows[rows["job"].isin(hung_jobs.index)],
        {
            "util": "util_mean",
            "power_w": "power_w_mean",
            "power_limit_w": "power_limit_w",
            "tensor_active": "tensor_active_mean",
            "dram_active": "dram_active_mean",
        },
    )
    pods = snapshot.jobs["pods"]
    findings = []
    for job_id, job, stat in zip(
        hung_jobs.index.tolist(),
        hung_jobs.to_dict("records"),
        stats.to_dict("records"),
        strict=True,
    ):
        gpus = int(stat["gpus"])
        summary = message(
            gettext_noop(
                "Job %(job)s (%(tenant)s) shows %(util)s+ utilisation on all %(gpus)s GPUs at "
                "%(power)s of their power limit and %(tensor)s tensor activity: a hung "
                "collective, not work."
            ),
            job=str(job_id),
            tenant=no_tenant(job["tenant"]),
            util=f"{stat['util_min']:.0%}",
            gpus=gpus,
            power=f"{stat['power_frac']:.0%}",
            tensor=f"{stat['tensor']:.1%}",
        )
        evidence = {
            **job_evidence(job_id, job),
            "gpus": gpus,
            "pods": int(pods.get(job_id, 1)),
            "nodes": int(stat["nodes"]),
            **evidence_numbers(
                stat,
                "util_min",
                "util_mean",
                power_w_mean="power_w",
                power_limit_w_mean="power_limit_w",
                power_frac="power_frac",
                tensor_active_mean="tensor",
                dram_active_mean="dram",
            ),
            "min_util": min_util,
            "max_power_frac": max_power_frac,
            "max_tensor": max_tensor,
            "max_dram": max_dram,
            "per_gpu": per_gpu.get(job_id, []),
        }
        findings.append(RULE.finding(f"job:{job_id}", summary, evidence))
    return Judgement(tuple(findings), not_judged)


RULE = Rule(
    id="hung-collective",
    title="GPUs spinning in a hung collective",
    severity="critical",
    subject_kind="job:",
    thresholds=(
        Threshold(
            "min_runtime",
            900,
            "only jobs started at least this long ago are judged (the window means then "
            "cover a stretch of the hang, not the job's start-up)",
            unit="s",
        ),
        Threshold("min_gpus", 2, "only jobs holding at least this many GPUs are judged"),
        Threshold(
            "min_util",
            0.9,
            "fires only when every GPU's util.mean is at least this",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "max_power_frac",
            0.4,
            "fires only when the mean over the job's GPUs of power_w.mean / power limit is at "
            "most this (the limit: power_limit_w.max, else the model's TDP)",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "max_tensor",
            0.02,
            "fires only when the mean tensor_active.mean of the job's GPUs is at most this",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "max_dram",
            0.05,
            "where dram_active.mean is reported, fires only when its mean is at most this",
            unit="fraction",
            maximum=1.0,
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A running job holding at least `min_gpus` GPUs, started at least `min_runtime` "
            "ago, whose GPUs **all** show `util.mean` ≥ `min_util` while the mean over its "
            "GPUs of `power_w.mean` divided by the GPU's power limit is ≤ `max_power_frac`, "
            "the mean `tensor_active.mean` is ≤ `max_tensor` and, where reported, the mean "
            "`dram_active.mean` is ≤ `max_dram`. The power limit is the GPU's "
            "`power_limit_w.max` (DCGM_FI_DEV_POWER_MGMT_LIMIT) where reported, else the TDP "
            "of its model (`TDP_WATTS` beside the peak TFLOP/s table). The statistics are "
            "means over the snapshot's window (15 min by default), so a finding says the "
            "signature held over that stretch; `for` (10 min) keeps a single window from "
            "raising it. Not judged (counted): a job whose GPUs are all busy as far as "
            "reported but some GPU has no utilisation reading; a job with no power reading "
            "with a known limit; a job with no tensor activity metric. A job any of whose "
            "GPUs is below `min_util`, or whose known power, tensor or DRAM activity is "
            "above its threshold, is judged not hung."
        ),
        why=(
            "A rank stuck in an NCCL collective (a peer died, a network path broke, ranks "
            "disagree on the collective) keeps a kernel spinning on every GPU of the job: "
            "the utilisation counter reads ~100% while the GPUs draw little power and the "
            "tensor pipes and memory are idle. The job makes no progress and, unless "
            "NCCL's timeout is set, never ends, so every GPU-hour it holds is lost while "
            "dashboards show it as the busiest job of the cluster. The GPU-hour breakdown "
            "counts its GPUs as `allocated-hung`, not `allocated-busy`."
        ),
        fix=(
            "Tell the owner; take a stack dump of a rank (`py-spy dump --pid ...`) to see "
            "which collective it waits in, then cancel or requeue the job from its last "
            "checkpoint. Prevent the next one from hanging for hours: set the process "
            "group timeout (`torch.distributed.init_process_group(timeout=...)`) with "
            "`TORCH_NCCL_ASYNC_ERROR_HANDLING=1` (older: `NCCL_ASYNC_ERROR_HANDLING=1`) so "
            "a hung collective raises instead of spinning, and a watchdog on training "
            "progress. Check the job's nodes for Xids and NIC errors."
        ),
        evidence=(
            "`util_min`, `util_mean`, `power_w_mean`, `power_limit_w_mean`, `power_frac`, "
            "`tensor_active_mean`, `dram_active_mean` (null when not reported), the "
            "thresholds, `gpus`, `pods`, `nodes`, `runtime_s`, `per_gpu` (each GPU's "
            "`util`, `power_w`, `power_limit_w`, `tensor_active`, `dram_active`), the job's "
            "`tenant`, `queue`, `pool`, `kind`."
        ),
        references=(
            "docs/accounting.md (`allocated-hung`)",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE, DCGM_FI_DEV_POWER_USAGE, DCGM_FI_DEV_POWER_MGMT_LIMIT, "
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, DCGM_FI_PROF_DRAM_ACTIVE (dcgm-exporter "
            "etc/dcp-metrics-included.csv)",
            "PyTorch: torch.distributed.init_process_group `timeout`, "
            "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        ),
    ),
    evaluate=evaluate,
    for_s=600,
    keep_firing_for_s=300,
    reads_gpu_metrics=True,
)
