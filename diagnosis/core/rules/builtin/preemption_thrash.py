"""``preemption-thrash``: a job preempted again and again within a few hours — each preemption
throws away the work since its last checkpoint (docs/rules.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.running_jobs import text
from diagnosis.core.snapshot import ClusterSnapshot, format_time
from diagnosis.core.text import gettext_noop, no_tenant
from diagnosis.core.text import message as summary_text

UNDATED = "preemption counter spans more than the window and the events do not date them"


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    window_s = thresholds["window"]
    least = thresholds["min_preemptions"]
    since = snapshot.as_of - pd.Timedelta(seconds=float(window_s))
    events = snapshot.events
    preempted = events[
        (events["kind"] == "preempted").to_numpy()
        & events["job"].notna().to_numpy()
        & (events["time"] >= since).to_numpy()
        & (events["time"] <= snapshot.as_of).to_numpy()
    ]
    jobs = snapshot.jobs
    dated = preempted.groupby("job").size().reindex(jobs.index, fill_value=0)
    # The job's own counter is dated too when the whole job lies inside the window.
    recent = (jobs["submitted"] >= since).to_numpy()
    counter = jobs["preemptions"].to_numpy()
    in_window = dated.to_numpy().copy()
    in_window[recent] = (dated.to_numpy()[recent]).clip(min=counter[recent])
    hit = in_window >= least
    undated = ~hit & ~recent & (counter >= least)
    not_judged = {UNDATED: int(undated.sum())}
    if not hit.any():
        return Judgement((), not_judged)

    thrashing = jobs.loc[hit, ["tenant", "queue", "priority", "state", "preemptions"]].copy()
    thrashing["tenant"] = text(thrashing["tenant"])
    thrashing["queue"] = text(thrashing["queue"])
    by_job: dict[str, list[dict[str, Any]]] = {}
    hit_ids = set(thrashing.index)
    for job, moment, reason, message in zip(
        preempted["job"].tolist(),
        preempted["time"].tolist(),
        text(preempted["reason"]).tolist(),
        text(preempted["message"]).tolist(),
        strict=True,
    ):
        if job in hit_ids:
            by_job.setdefault(job, []).append(
                {"time": format_time(moment), "reason": reason, "message": message}
            )
    counts = dict(zip(jobs.index.tolist(), in_window.tolist(), strict=True))
    findings = []
    for job_id, job in zip(thrashing.index.tolist(), thrashing.to_dict("records"), strict=True):
        count = int(counts[job_id])
        preemptions = sorted(by_job.get(job_id, []), key=lambda e: e["time"] or "")
        summary = summary_text(
            gettext_noop(
                "Job %(job)s (%(tenant)s) was preempted %(count)s times in the last %(hours)s h; "
                "each restart loses the work since its last checkpoint."
            ),
            job=str(job_id),
            tenant=no_tenant(job["tenant"]),
            count=count,
            hours=f"{window_s / 3600:g}",
        )
        evidence = {
            "job": job_id,
            "tenant": job["tenant"],
            "queue": job["queue"],
            "priority": int(job["priority"]),
            "state": job["state"],
            "preemptions_in_window": count,
            "preemptions_total": int(job["preemptions"]),
            "window_s": int(window_s),
            "min_preemptions": int(least),
            "preemptions": preemptions,
            "preempted_by": sorted({e["reason"] for e in preemptions if e["reason"]}),
        }
        findings.append(RULE.finding(f"job:{job_id}", summary, evidence))
    return Judgement(tuple(findings), not_judged)


RULE = Rule(
    id="preemption-thrash",
    title="Job preempted over and over",
    severity="warning",
    subject_kind="job:",
    thresholds=(
        Threshold(
            "min_preemptions",
            3,
            "fires when the job was preempted at least this many times in the window",
        ),
        Threshold("window", 21600, "the look-back window preemptions are counted in", unit="s"),
    ),
    doc=RuleDoc(
        detects=(
            "A job (any state) preempted at least `min_preemptions` times within the last "
            "`window` seconds. Preemptions are the snapshot's `preempted` events of the job "
            "dated inside the window; for a job submitted inside the window its own "
            "`preemptions` counter counts too (all of them happened inside it), whichever "
            "is larger. A job submitted before the window whose counter reaches "
            "`min_preemptions` but whose events in the window do not is not judged "
            "(counted): the counter cannot say when they happened."
        ),
        why=(
            "Every preemption kills the job's pods; it restarts from its last checkpoint and "
            "repeats the work since then, on top of the restart itself (scheduling, image "
            "pull, loading the model and data). A job preempted every hour with a two-hour "
            "checkpoint interval never progresses, and the GPUs it held in between did work "
            "that was thrown away. It usually means priorities or quotas that let two "
            "workloads take the same GPUs from each other in turn."
        ),
        fix=(
            "Look at who preempted it (`preempted_by`): give the job a priority class that "
            "the preemptor cannot preempt, or a non-preemptible guarantee (Kueue nominal "
            "quota without `borrowWithinCohort` preemption; Volcano `preemptable: false` / "
            "queue `reclaimable: false`; Slurm `PreemptExemptTime` to protect a job's first "
            "minutes). Checkpoint more often than it is preempted. If the preemptor is "
            "itself preempted back, fix the priority or quota cycle between the two queues."
        ),
        evidence=(
            "`preemptions_in_window`, `preemptions_total` (the job's counter), `window_s`, "
            "`min_preemptions`, `preemptions` (each event's `time`, `reason`, `message`), "
            "`preempted_by` (the distinct reasons), the job's `tenant`, `queue`, `priority`, "
            "`state`."
        ),
        references=(
            "Slurm `PreemptExemptTime`; Kueue preemption policies; Volcano `preempt` action",
        ),
    ),
    evaluate=evaluate,
    for_s=0,
    keep_firing_for_s=1800,
)
