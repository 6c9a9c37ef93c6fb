"""``data-starvation``: a job whose GPUs wait for input (docs/rules.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold, evidence_numbers
from diagnosis.core.rules.facts import SnapshotFacts
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

NO_FB = "no framebuffer-used metric on any of its GPUs"
NO_TRIGGER_METRICS = "burst (p10/p90) or host-CPU metric missing, and the other does not fire"


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    jobs, not_judged = running_jobs_with_stats(snapshot, facts, thresholds["min_runtime"])
    util = jobs["util_mean"]
    not_judged[NO_UTIL] = int(util.isna().sum())
    in_band = at_least(util, thresholds["min_util"]) & below(util, thresholds["max_util"])
    band = jobs[in_band]

    fb = band["fb_used_frac_mean"]
    not_judged[NO_FB] = int(fb.isna().sum())
    loaded = band[at_least(fb, thresholds["min_fb_used"])]

    spread = loaded["util_spread"]
    host_cpu = loaded["host_cpu_max"]
    bursty = at_least(spread, thresholds["min_burst_spread"])
    cpu_bound = at_least(host_cpu, thresholds["min_host_cpu"])
    fires = bursty | cpu_bound
    # Neither trigger is true, but one of them could not be checked: it might have fired.
    unknown = ~fires & (spread.isna() | host_cpu.isna())
    not_judged[NO_TRIGGER_METRICS] = int(unknown.sum())

    starved = loaded[fires]
    findings = []
    for job_id, job, is_bursty, is_cpu in zip(
        starved.index.tolist(),
        starved.to_dict("records"),
        bursty[fires],
        cpu_bound[fires],
        strict=True,
    ):
        trigger = "both" if is_bursty and is_cpu else "bursty" if is_bursty else "host-cpu"
        spread, cpu = f"{job['util_spread']:.2f}", f"{job['host_cpu_max']:.0%}"
        why = {
            "bursty": message(gettext_noop("bursty (p90 - p10 = %(spread)s)"), spread=spread),
            "host-cpu": message(gettext_noop("its host CPU is at %(cpu)s"), cpu=cpu),
            "both": message(
                gettext_noop("bursty (p90 - p10 = %(spread)s) and its host CPU is at %(cpu)s"),
                spread=spread,
                cpu=cpu,
            ),
        }[trigger]
        summary = message(
            gettext_noop(
                "Job %(job)s (%(tenant)s) keeps %(memory)s of GPU memory but averages "
                "%(util)s utilisation, %(why)s: its GPUs wait for input."
            ),
            job=str(job_id),
            tenant=no_tenant(job["tenant"]),
            memory=f"{job['fb_used_frac_mean']:.0%}",
            util=f"{job['util_mean']:.0%}",
            why=why,
        )
        evidence = {
            **job_evidence(job_id, job),
            "nodes": int(job["nodes"]),
            "trigger": trigger,
            **evidence_numbers(
                job,
                "util_mean",
                "util_p10",
                "util_p90",
                "util_spread",
                "fb_used_frac_mean",
                "host_cpu_max",
                "pcie_rx_Bps_mean",
            ),
            "thresholds": dict(thresholds),
        }
        findings.append(RULE.finding(f"job:{job_id}", summary, evidence))
    return Judgement(tuple(findings), not_judged)


RULE = Rule(
    id="data-starvation",
    title="GPUs starved of input data",
    severity="warning",
    subject_kind="job:",
    thresholds=(
        min_runtime_threshold(900),
        Threshold(
            "min_fb_used",
            0.05,
            "the job must hold at least this much GPU memory (mean fb_used_frac.mean)",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "min_util",
            0.05,
            "lower end (inclusive) of the mean-utilisation band; below it the job is idle",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "max_util",
            0.60,
            "upper end (exclusive) of the mean-utilisation band",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "min_burst_spread",
            0.5,
            "bursty when the mean over its GPUs of util.p90 - util.p10 is at least this",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "min_host_cpu",
            0.9,
            "CPU-bound when the busiest of its nodes has cpu_util at least this",
            unit="fraction",
            maximum=1.0,
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A running job started at least `min_runtime` ago that holds GPU memory (mean "
            "`fb_used_frac.mean` ≥ `min_fb_used`) but whose mean `util.mean` lies in "
            "[`min_util`, `max_util`), and either its utilisation is bursty (mean of "
            "`util.p90 - util.p10` ≥ `min_burst_spread`: compute waits for input, then "
            "sprints) or the busiest of its nodes has `cpu_util` ≥ `min_host_cpu` (the input "
            "pipeline is CPU-bound). Jobs whose metrics cannot settle it are counted under "
            "*not judged*: no utilisation, no framebuffer metric, or neither trigger true while "
            "one of them is unknown."
        ),
        why=(
            "The GPUs are allocated and loaded with a model, yet spend much of the window "
            "waiting for the next batch: GPU-hours land in the `allocated-data-starved` bucket "
            "of the breakdown. Feeding the GPUs faster usually recovers them with no extra "
            "hardware."
        ),
        fix=(
            "Raise the data loader's parallelism (PyTorch `DataLoader(num_workers=..., "
            "pin_memory=True, prefetch_factor=...)`, `tf.data` `.prefetch(AUTOTUNE)` and "
            "parallel `map`), move decoding / augmentation to the GPU (NVIDIA DALI), cache or "
            "pre-shard the data set on local NVMe, and ask for more CPU cores per GPU when the "
            "host CPU is saturated. Low PCIe RX in the evidence means the data never reaches "
            "the GPU fast enough; check the storage path first."
        ),
        evidence=(
            "`trigger` (`bursty`, `host-cpu` or `both`), `util_mean`, `util_p10`, `util_p90`, "
            "`util_spread`, `fb_used_frac_mean`, `host_cpu_max`, `pcie_rx_Bps_mean`, "
            "`runtime_s`, `gpus`, `nodes`, the job's `tenant`, and the thresholds used."
        ),
        references=(
            "docs/accounting.md (`allocated-data-starved`)",
            "PyTorch DataLoader docs: num_workers, pin_memory, prefetch_factor",
            "NVIDIA DALI: GPU-accelerated data loading",
        ),
    ),
    evaluate=evaluate,
    for_s=600,
    keep_firing_for_s=300,
    reads_gpu_metrics=True,
)
