"""``gang-partial-hold``: a partial gang holding GPUs idle while its missing pods cannot fit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold
from diagnosis.core.rules.builtin.gang_deadlock import gang_evidence
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.text import gettext_noop, message


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    min_hold = thresholds["min_hold"]
    gangs = facts.partial_gang_placement
    stuck = gangs[(gangs["hold_s"].to_numpy() >= min_hold) & ~gangs["can_complete"].to_numpy()]
    if stuck.empty:
        return Judgement()
    stuck = stuck[~stuck.index.isin(list(facts.deadlocked_jobs(min_hold)))]
    util = facts.job_gpu_stats["util_mean"]
    findings = []
    for job_id, row in zip(stuck.index, stuck.itertuples(index=False), strict=True):
        evidence = gang_evidence(str(job_id), row)
        del evidence["id"]
        mean_util = util.get(job_id, np.nan)
        slots = float(row.missing_slots)
        evidence.update(
            {
                "held_util_mean": None if pd.isna(mean_util) else round(float(mean_util), 4),
                "free_pod_slots": int(slots) if np.isfinite(slots) else None,
                "pool": None if pd.isna(row.pool) else str(row.pool),
                "pool_free_gpus": int(row.scope_free),
            }
        )
        summary = message(
            gettext_noop(
                "Gang %(job)s has held %(held)s GPUs for %(minutes)s min with "
                "%(bound)s/%(min_member)s pods bound; its %(missing)s missing pod(s) of "
                "%(per_pod)s GPUs do not fit on the free GPUs."
            ),
            job=str(job_id),
            held=int(row.held_gpus),
            minutes=f"{float(row.hold_s) / 60:.0f}",
            bound=int(row.bound_pods),
            min_member=int(row.min_member),
            missing=int(row.missing_pods),
            per_pod=int(row.gpus_per_pod),
        )
        findings.append(RULE.finding(f"job:{job_id}", summary, evidence))
    return Judgement(findings=tuple(findings))


RULE = Rule(
    id="gang-partial-hold",
    title="Partial gang holding GPUs it cannot use",
    severity="warning",
    subject_kind="job:",
    thresholds=(
        Threshold(
            "min_hold",
            600,
            "How long the partial gang must have held its GPUs (since `partial_since`, or "
            "`submitted` when absent).",
            unit="s",
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A *partial gang* — a pending gang job with `0 < bound pods < min_member` — that "
            "has held its GPUs for at least `min_hold` and whose missing pods "
            "(`min_member - bound`) are not placeable on the free GPUs of its pool, and that is "
            "not a member of a `gang-deadlock` set (found with this rule's own `min_hold`)."
        ),
        why=(
            "A gang runs only when all its `min_member` pods are bound; until then the pods it "
            "holds do no work, and the GPUs under them are lost to every other job. Schedulers "
            "that bind gangs pod by pod (or with a long gang timeout) can keep GPUs in this "
            "state for hours."
        ),
        fix=(
            "Give the gang its missing capacity (preempt lower-priority work, or binpack the "
            "pool so whole nodes free up), or release its pods and requeue it whole. Prevent "
            "it with atomic gang admission (Volcano `gang` plugin, Kueue `waitForPodsReady` "
            "with a timeout) and a gang scheduling timeout."
        ),
        evidence=(
            "`bound` (bound pods/min_member), `missing_pods`, `gpus_per_pod`, `gpus_held` (held "
            "idle) and their `held_util_mean`, `hold_s`, `held_since`; `free_pod_slots` (pods "
            "of its size the free GPUs could take now), the `pool` and `pool_free_gpus`."
        ),
        references=(
            "https://volcano.sh/en/docs/plugins/ (gang)",
            "https://kueue.sigs.k8s.io/docs/tasks/manage/setup_wait_for_pods_ready/",
        ),
    ),
    evaluate=evaluate,
    for_s=0,
    keep_firing_for_s=300,
)
