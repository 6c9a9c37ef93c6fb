"""``idle-quota``: a queue with guaranteed GPUs that holds (or borrows beyond its guarantee) GPUs
it leaves idle while other queues of its pools wait for GPUs those would cover — reclaim
candidates (docs/rules.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold, evidence_number
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.running_jobs import below, text
from diagnosis.core.snapshot import GPU_KEY, ClusterSnapshot
from diagnosis.core.text import gettext_noop, message

NO_UTIL = "holds GPUs, but no utilisation metric on any of them"


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    max_util = thresholds["max_util"]
    min_runtime = thresholds["min_runtime"]
    queues = snapshot.queues
    guaranteed = queues[queues["deserved_gpus"].fillna(0).to_numpy() > 0]
    not_judged = {NO_UTIL: 0}
    if guaranteed.empty:
        return Judgement((), not_judged)

    # The GPUs the guaranteed queues' running jobs hold, of jobs past their start-up.
    jobs = snapshot.jobs
    runtime = (snapshot.as_of - jobs["started"]).dt.total_seconds()
    settled = jobs[
        (jobs["state"] == "running").to_numpy()
        & (runtime >= min_runtime).to_numpy()
        & jobs["queue"].isin(guaranteed.index).to_numpy()
    ]
    gpus = facts.allocations_with(
        snapshot.allocations["job"].isin(settled.index).to_numpy(),
        facts.gpu_state[[*GPU_KEY, "pool", "util_mean"]],
    )
    gpus["queue"] = gpus["job"].map(settled["queue"]).to_numpy()
    if gpus.empty:
        return Judgement((), not_judged)
    per_queue = gpus.groupby("queue", sort=True).agg(
        held=("job", "size"), util_known=("util_mean", "count"), util=("util_mean", "mean")
    )
    not_judged[NO_UTIL] = int((per_queue["util_known"] == 0).sum())
    idle = per_queue[below(per_queue["util"], max_util).to_numpy()]
    if idle.empty:
        return Judgement((), not_judged)

    # Pending jobs of other queues that the idle GPUs would cover (by count), in the pools the
    # idle queue holds GPUs in (a job with no pool may use any).
    idle_pools = gpus[gpus["queue"].isin(idle.index)][["queue", "pool"]].drop_duplicates()
    pending = facts.pending_placement
    pending = pending[pending["request"].to_numpy() > 0]
    waiting = pd.DataFrame(
        {
            "pool": pending["scope"].to_numpy(dtype=object),
            "waiting_queue": text(pending["queue"]).to_numpy(dtype=object),
            "request": pending["request"].to_numpy(dtype=np.int64),
            "job": pending.index.to_numpy(dtype=object),
        }
    )
    in_pool = idle_pools.merge(waiting[waiting["pool"].notna()], on="pool")
    anywhere = idle_pools.merge(waiting[waiting["pool"].isna()].drop(columns="pool"), how="cross")
    candidates = pd.concat([in_pool, anywhere], ignore_index=True)
    candidates["held"] = candidates["queue"].map(idle["held"]).to_numpy()
    candidates = candidates[
        (candidates["waiting_queue"] != candidates["queue"]).to_numpy()
        & (candidates["request"] <= candidates["held"]).to_numpy()
    ].drop_duplicates(["queue", "job"])
    if candidates.empty:
        return Judgement((), not_judged)

    waits: dict[str, dict[str | None, list[int]]] = {}
    for queue, other, request in zip(
        candidates["queue"].tolist(),
        candidates["waiting_queue"].tolist(),
        candidates["request"].tolist(),
        strict=True,
    ):
        waits.setdefault(queue, {}).setdefault(other, []).append(int(request))
    idle_jobs: dict[str, list[str]] = {}
    for queue, job in zip(gpus["queue"].tolist(), gpus["job"].tolist(), strict=True):
        listed = idle_jobs.setdefault(queue, [])
        if job not in listed:
            listed.append(job)
    hours = snapshot.window_s / 3600
    held_of = idle["held"].to_dict()
    util_of = idle["util"].to_dict()
    deserved_of = guaranteed["deserved_gpus"].to_dict()
    tenant_of = text(guaranteed["tenant"]).to_dict()
    findings = []
    for queue in sorted(waits):
        held = int(held_of[queue])
        deserved = float(deserved_of[queue])
        borrowed = max(0.0, held - deserved)
        waiting_queues = [
            {"queue": other, "pending_jobs": len(requests), "smallest_request": min(requests)}
            for other, requests in sorted(waits[queue].items(), key=lambda kv: str(kv[0]))
        ]
        summary = message(
            gettext_noop(
                "Queue %(queue)s holds %(held)s GPU(s), %(borrowed)s of them borrowed beyond its "
                "guarantee at %(util)s mean utilisation while %(jobs)s job(s) of %(queues)s "
                "other queue(s) wait for GPUs those would cover."
            )
            if borrowed
            else gettext_noop(
                "Queue %(queue)s holds %(held)s GPU(s) at %(util)s mean utilisation while "
                "%(jobs)s job(s) of %(queues)s other queue(s) wait for GPUs those would cover."
            ),
            queue=str(queue),
            held=held,
            **({"borrowed": f"{borrowed:.0f}"} if borrowed else {}),
            util=f"{util_of[queue]:.1%}",
            jobs=sum(w["pending_jobs"] for w in waiting_queues),
            queues=len(waiting_queues),
        )
        evidence = {
            "queue": queue,
            "tenant": tenant_of[queue],
            "deserved_gpus": evidence_number(deserved),
            "held_gpus": held,
            "borrowed_gpus": evidence_number(borrowed),
            "util_mean": evidence_number(util_of[queue]),
            "idle_gpu_hours": evidence_number(held * hours),
            "max_util": max_util,
            "reclaimable_gpus": held,
            "idle_jobs": sorted(idle_jobs.get(queue, [])),
            "waiting_queues": waiting_queues,
        }
        severity = "warning" if borrowed else "info"
        findings.append(RULE.finding(f"queue:{queue}", summary, evidence, severity=severity))
    return Judgement(tuple(findings), not_judged)


RULE = Rule(
    id="idle-quota",
    title="Guaranteed GPUs held idle while other queues wait",
    severity="warning",
    subject_kind="queue:",
    thresholds=(
        Threshold(
            "max_util",
            0.05,
            "fires when the mean util.mean of the GPUs the queue's jobs hold is below this",
            unit="fraction",
            maximum=1.0,
        ),
        Threshold(
            "min_runtime",
            1800,
            "only GPUs of the queue's jobs started at least this long ago count (start-up is "
            "not idleness)",
            unit="s",
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A queue with a guarantee (`deserved_gpus` > 0) whose running jobs, started at "
            "least `min_runtime` ago, hold GPUs with a mean `util.mean` below `max_util`, "
            "while pending jobs of **other** queues, in a pool where those GPUs are (a job "
            "with no pool may use any), ask for no more GPUs than the queue holds there. "
            "GPUs are compared by count, not by shape. Warning when the queue holds more "
            "than its guarantee (it borrows what it does not use), info when it is within "
            "it. The rule is stored as firing only after an hour of consecutive hits (`for` "
            "1 h): the idleness has lasted an hour. A queue without a guarantee is left to "
            "`idle-allocation`; a queue whose held GPUs have no utilisation reading is not "
            "judged (counted)."
        ),
        why=(
            "Quota systems (Kueue ClusterQueue nominal quota and borrowing, Volcano "
            "`deserved` and reclaim, KAI's guaranteed quota) let a queue keep or borrow GPUs "
            "other teams need. An idle queue that keeps them turns guaranteed capacity into "
            "idle GPU-hours while the waiting queues starve — and the scheduler does not "
            "reclaim borrowed quota unless reclaim is enabled."
        ),
        fix=(
            "Reclaim: ask the queue's owner to release the jobs in `idle_jobs`, or let the "
            "scheduler take the GPUs back — Kueue `preemption.reclaimWithinCohort: Any` "
            "(and `borrowWithinCohort`) on the ClusterQueues of the cohort; Volcano's "
            "`reclaim` action with the `proportion` plugin and `reclaimable: true` on the "
            "queue; KAI's reclaim of over-quota resources. If the guarantee is larger than "
            "the team needs, lower its `deserved` / nominal quota."
        ),
        evidence=(
            "`queue`, `tenant`, `deserved_gpus`, `held_gpus`, `borrowed_gpus` (held beyond "
            "the guarantee), `util_mean`, `idle_gpu_hours` (held GPUs × the window), "
            "`reclaimable_gpus`, `idle_jobs`, `waiting_queues` (each: `queue`, "
            "`pending_jobs`, `smallest_request`), `max_util`."
        ),
        references=(
            "Kueue ClusterQueue `preemption.reclaimWithinCohort`, `borrowingLimit`",
            "Volcano `reclaim` action, Queue `spec.reclaimable`, `proportion` plugin",
        ),
    ),
    evaluate=evaluate,
    for_s=3600,
    keep_firing_for_s=600,
    reads_gpu_metrics=True,
)
