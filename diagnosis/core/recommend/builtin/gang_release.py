"""``gang-release``: release the partial gang whose requeue unblocks the most GPUs, and advise the
admission setting that keeps gangs from holding GPUs partially again.

For each ``gang-deadlock`` finding, one member is chosen (target ``job:<id>``, change
``{"from": "partial", "to": "requeued"}``): the one whose GPUs, with the free ones, let the most
of the other members' GPUs complete and run (greedily, smallest need first: the GPUs unblocked);
ties go to the member with the least progress (fewest pods bound, then held least long), then the
lowest priority, then the id. Releasing it costs no work (a partial gang has not started), and
the scheduler requeues it (admitted whole the next time). For a ``gang-partial-hold`` finding the
gang itself is released: its GPUs return to the pool. The ``basis`` lists every candidate with
its score, so the choice can be checked.

The impact is a static account (``gpus_released``, ``gpus_unblocked`` and the GPU-hours the
deadlock has cost so far); nothing is replayed. Besides, one advisory per pool (target
``pool:<p>``) gives the exact admission setting for the cluster's scheduler that prevents the
partial hold: the one the snapshot's ``scheduler.gang_advice`` carries (each scheduler adapter
declares its own: Kueue ``waitForPodsReady``, Volcano's ``gang`` plugin, KAI's PodGroup
``minMember``, Slurm's whole-job allocation), else a generic one (:data:`GENERIC_POLICY`).

Pure core: no Django.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from diagnosis.core.recommend.base import (
    ADVISORY,
    GANG_RELEASE,
    NOT_SIMULATED,
    Draft,
    FindingRef,
    Generator,
    RecommendContext,
)
from diagnosis.core.rules.base import Finding

CHANGE = {"from": "partial", "to": "requeued"}

# The admission setting that stops partial gangs when the snapshot does not say the scheduler's
# own (``scheduler.gang_advice``, which each adapter declares): an older snapshot, a scheduler
# that declares none.
GENERIC_POLICY = (
    "Admit gangs all-or-nothing (Kueue `waitForPodsReady: {enable: true, timeout: 5m, "
    "requeuingStrategy: {timestamp: Eviction}}`; Volcano `gang` plugin with PodGroup "
    "`minMember`; Slurm allocates jobs whole) and set a gang timeout that releases a partial "
    "gang's GPUs."
)


def _priority(context: RecommendContext, job: str) -> int:
    jobs = context.snapshot.jobs
    if job in jobs.index and "priority" in jobs.columns:
        return int(jobs.at[job, "priority"])
    return 0


def _need(member: Mapping[str, Any]) -> int:
    return int(member.get("missing_pods") or 0) * int(member.get("gpus_per_pod") or 0)


def _total(member: Mapping[str, Any]) -> int:
    return int(member.get("min_member") or 0) * int(member.get("gpus_per_pod") or 0)


def unblocked_by(
    released: Mapping[str, Any], members: Sequence[Mapping[str, Any]], free_gpus: int
) -> tuple[int, list[str]]:
    """The GPUs of the other members that can complete once ``released`` gives its GPUs back
    (with the pool's free ones), smallest need first, and which members those are."""
    pool = free_gpus + int(released.get("gpus_held") or 0)
    done: list[str] = []
    gpus = 0
    others = sorted((m for m in members if m["id"] != released["id"]), key=_need)
    for member in others:
        need = _need(member)
        if need <= pool:
            pool -= need
            gpus += _total(member)
            done.append(str(member["id"]))
    return gpus, done


def choose(
    members: Sequence[Mapping[str, Any]], free_gpus: int, priority: Mapping[str, int]
) -> tuple[Mapping[str, Any], list[dict[str, Any]]]:
    """The member to release and every candidate's score (best first)."""
    scored = []
    for member in members:
        gpus, done = unblocked_by(member, members, free_gpus)
        scored.append(
            {
                "id": str(member["id"]),
                "gpus_unblocked": gpus,
                "completes": done,
                "bound_pods": int(member.get("bound_pods") or 0),
                "hold_s": float(member.get("hold_s") or 0),
                "priority": int(priority.get(str(member["id"]), 0)),
                "gpus_held": int(member.get("gpus_held") or 0),
            }
        )
    scored.sort(
        key=lambda s: (-s["gpus_unblocked"], s["bound_pods"], s["hold_s"], s["priority"], s["id"])
    )
    chosen = next(m for m in members if str(m["id"]) == scored[0]["id"])
    return chosen, scored


def _why(best: Mapping[str, Any], scored: Sequence[Mapping[str, Any]]) -> str:
    text = (
        f"Requeue {best['id']}: its {best['gpus_held']} GPUs let "
        f"{', '.join(best['completes']) or 'no other gang'} complete "
        f"({best['gpus_unblocked']} GPUs unblocked)"
    )
    if len(scored) > 1:
        runner = scored[1]
        if runner["gpus_unblocked"] == best["gpus_unblocked"]:
            text += (
                f"; it has the least progress ({best['bound_pods']} pods bound, held "
                f"{best['hold_s'] / 60:.0f} min; {runner['id']}: {runner['bound_pods']} pods, "
                f"{runner['hold_s'] / 60:.0f} min) and priority {best['priority']}"
            )
        else:
            text += f" (releasing {runner['id']} would unblock {runner['gpus_unblocked']})"
    return text + ". A partial gang has not started: releasing it loses no work."


def _impact(released: int, unblocked: int, idle_gpu_hours: float) -> dict[str, Any]:
    others = f" and unblocks {unblocked} GPUs of the other gang(s)" if unblocked else " to the pool"
    return {
        "method": "static",
        "verdict": NOT_SIMULATED,
        "headline": (
            f"releases {released} idle GPUs{others}; the partial hold has cost up to "
            f"{idle_gpu_hours:.1f} GPU-hours so far (GPUs held now x time held)"
        ),
        "gpus_released": released,
        "gpus_unblocked": unblocked,
        "idle_gpu_hours_at_most": round(idle_gpu_hours, 2),
        "gpus_involved": released + unblocked,
    }


def _held_gpu_hours(members: Sequence[Mapping[str, Any]]) -> float:
    return sum(int(m.get("gpus_held") or 0) * float(m.get("hold_s") or 0) for m in members) / 3600


def _release(context: RecommendContext, finding: Finding) -> Draft:
    evidence = finding.evidence
    members = list(evidence.get("members") or [])
    free = int(evidence.get("pool_free_gpus") or 0)
    priority = {str(m["id"]): _priority(context, str(m["id"])) for m in members}
    chosen, scored = choose(members, free, priority)
    best = scored[0]
    return Draft(
        kind=GANG_RELEASE,
        target=f"job:{chosen['id']}",
        change={**CHANGE, "reason": f"gpuobs: releases gang deadlock {finding.subject}"},
        findings=(FindingRef.of(finding),),
        summary=(
            f"Release {chosen['id']} to end the deadlock of "
            f"{', '.join(str(m['id']) for m in members)}: {best['gpus_unblocked']} GPUs can then "
            "run."
        ),
        advisory=_why(best, scored),
        static_impact=_impact(
            int(chosen.get("gpus_held") or 0), best["gpus_unblocked"], _held_gpu_hours(members)
        ),
        tradeoffs=(f"{chosen['id']} waits again in its queue, admitted whole the next time.",),
        basis={"rule": "gang-deadlock", "pool": evidence.get("pool"), "candidates": scored},
    )


def _release_partial(context: RecommendContext, finding: Finding) -> Draft:
    evidence = finding.evidence
    job = finding.subject.removeprefix("job:")
    held = int(evidence.get("gpus_held") or 0)
    hours = held * float(evidence.get("hold_s") or 0) / 3600
    return Draft(
        kind=GANG_RELEASE,
        target=finding.subject,
        change={**CHANGE, "reason": "gpuobs: partial gang holds GPUs it cannot use"},
        findings=(FindingRef.of(finding),),
        summary=(
            f"Release partial gang {job}: it holds {held} GPUs with {evidence.get('bound')} pods "
            "bound and its missing pods do not fit."
        ),
        advisory=(
            f"Requeue {job}: its {held} GPUs return to the pool ({evidence.get('pool_free_gpus')} "
            "free now) for jobs that can run; it is admitted whole the next time. It has not "
            "started: releasing it loses no work."
        ),
        static_impact=_impact(held, 0, hours),
        tradeoffs=(f"{job} waits again in its queue, admitted whole the next time.",),
        basis={"rule": "gang-partial-hold", "pool": evidence.get("pool")},
    )


def _policy(context: RecommendContext, target: str, findings: list[Finding]) -> Draft:
    kind = str(context.snapshot.scheduler.get("kind") or "")
    setting = context.snapshot.gang_advice() or GENERIC_POLICY
    held = sum(int(f.evidence.get("gpus_held") or 0) for f in findings)
    return Draft(
        kind=ADVISORY,
        target=target,
        change={},
        findings=tuple(FindingRef.of(f) for f in findings),
        summary=f"{len(findings)} partial gang hold(s) in {target} keep {held} GPUs idle.",
        advisory=f"For the admin, to prevent it: {setting}",
        static_impact={
            "method": "none",
            "verdict": NOT_SIMULATED,
            "headline": "advisory: the admission setting that prevents partial gangs",
            "gpus_involved": held,
        },
        basis={"rule": "gang-deadlock", "scheduler": kind or None, "setting": setting},
    )


def generate(context: RecommendContext) -> list[Draft]:
    drafts: list[Draft] = []
    by_pool: dict[str, list[Finding]] = {}
    for finding in context.findings("gang-deadlock"):
        if finding.evidence.get("members"):
            drafts.append(_release(context, finding))
        by_pool.setdefault(_pool_target(context, finding), []).append(finding)
    for finding in context.findings("gang-partial-hold"):
        drafts.append(_release_partial(context, finding))
        by_pool.setdefault(_pool_target(context, finding), []).append(finding)
    drafts += [_policy(context, target, found) for target, found in sorted(by_pool.items())]
    return drafts


def _pool_target(context: RecommendContext, finding: Finding) -> str:
    pool = finding.evidence.get("pool")
    return f"pool:{pool}" if pool else f"cluster:{context.snapshot.cluster}"


GENERATOR = Generator(
    id="gang-release",
    kind=GANG_RELEASE,
    title="Release a deadlocked or partial gang, and the admission setting that prevents it",
    rules=("gang-deadlock", "gang-partial-hold"),
    doc=(
        "For a `gang-deadlock`, requeue the member whose GPUs let the most of the others' GPUs "
        "run (ties: least progress, lowest priority); for a `gang-partial-hold`, requeue the "
        "gang. Applied through the scheduler (Volcano/KAI: delete the PodGroup's pods; Kueue: "
        "deactivate the Workload; Slurm: `scontrol requeue`). Plus, per pool, the exact "
        "admission setting that prevents partial gangs (Kueue `waitForPodsReady`, Volcano "
        "`gang`, KAI `minMember`, Slurm whole-job allocation)."
    ),
    generate=generate,
)
