"""``gang-deadlock``: partial gangs of one pool that each wait for GPUs the others hold.

The sets are found by :meth:`~diagnosis.core.rules.facts.SnapshotFacts.deadlock_sets` (shared with
``gang-partial-hold``, which leaves their members to this rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.text import gettext_noop, message


def gang_evidence(job_id: str, row: Any) -> dict[str, Any]:
    """What a person needs to check one partial gang: bound/min_member, GPUs held, hold time."""
    return {
        "id": job_id,
        "bound": f"{int(row.bound_pods)}/{int(row.min_member)}",
        "bound_pods": int(row.bound_pods),
        "min_member": int(row.min_member),
        "missing_pods": int(row.missing_pods),
        "gpus_per_pod": int(row.gpus_per_pod),
        "gpus_held": int(row.held_gpus),
        "hold_s": round(float(row.hold_s), 1),
        "held_since": None if pd.isna(row.held_since) else row.held_since.isoformat(),
    }


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    sets = facts.deadlock_sets(thresholds["min_hold"])
    if not sets:
        return Judgement()
    gangs = facts.partial_gang_placement
    # every member's row at once (one frame, one itertuples), not a lookup per set
    every = [job_id for members in sets for job_id in members]
    picked = gangs.iloc[gangs.index.get_indexer(every)]
    tuples = list(picked.itertuples(index=False))
    pools = picked["pool"].to_numpy(dtype=object)
    scope_free_of = picked["scope_free"].to_numpy()
    held_of = picked["held_gpus"].to_numpy()
    hold_of = picked["hold_s"].to_numpy()
    findings = []
    first = 0
    for members in sets:
        end = first + len(members)
        pool = pools[first]
        scope_free = int(scope_free_of[first])
        held = int(held_of[first:end].sum())
        hold_max = float(hold_of[first:end].max())
        evidence = {
            "pool": None if pd.isna(pool) else str(pool),
            "pool_free_gpus": scope_free,
            "gpus_held": held,
            "members": [
                gang_evidence(job_id, row)
                for job_id, row in zip(members, tuples[first:end], strict=True)
            ],
        }
        first = end
        where = (
            message(gettext_noop("jobs without a pool"))
            if pd.isna(pool)
            else message(gettext_noop("pool %(pool)s"), pool=str(pool))
        )
        summary = message(
            gettext_noop(
                "%(count)s partial gangs in %(where)s (%(members)s) hold %(held)s GPUs and each "
                "waits for GPUs the others hold; %(free)s GPUs are free (held for up to "
                "%(minutes)s min)."
            ),
            count=len(members),
            where=where,
            members=", ".join(members),
            held=held,
            free=scope_free,
            minutes=f"{hold_max / 60:.0f}",
        )
        findings.append(RULE.finding("jobs:" + "+".join(members), summary, evidence))
    return Judgement(findings=tuple(findings))


RULE = Rule(
    id="gang-deadlock",
    title="Partial gangs deadlocked on each other's GPUs",
    severity="critical",
    subject_kind="jobs:",
    thresholds=(
        Threshold(
            "min_hold",
            600,
            "How long each partial gang must have held its GPUs (since `partial_since`, or "
            "`submitted` when absent).",
            unit="s",
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A set D of at least two *partial gangs* (pending gang jobs with `0 < bound pods < "
            "min_member`) of one pool, each holding its GPUs for at least `min_hold`, where no "
            "member's missing pods (`min_member - bound`) are placeable on the free GPUs, but "
            "every member's missing pods would be placeable on the free GPUs plus the GPUs held "
            "by the other members of D (per node: `free(n) + held by the others on n`).\n\n"
            "How the sets are found: whether every member would fit with the others' GPUs can "
            "only get better as D grows, so the largest such set is unique. It is found by "
            "starting from every candidate (partial gang held long enough that cannot complete "
            "on free GPUs) and removing, round by round, every member that would not fit with "
            "the GPUs of the remaining others, until a round removes nothing. That set is then "
            "split so that unrelated deadlocks are reported apart: gangs holding GPUs on a "
            "common node start in one part, and a part in which some member would not fit with "
            "the GPUs of its own part is merged with the parts holding GPUs on the nodes where "
            "that member would find room, until every part is a deadlock on its own (at worst "
            "the whole set, which is one). So two pairs of gangs, each pair stuck on its own "
            "node, are two findings, each naming the gangs of which one must give way. A gang "
            "that would not fit even with all the others' GPUs is not in a set: it is reported "
            "by `gang-partial-hold`."
        ),
        why=(
            "Critical by default: no member can ever start on its own, every member's GPUs are "
            "held idle, and the set stays stuck until one gang gives up its pods — schedulers "
            "without gang admission (or with a long timeout) will wait forever, while other "
            "work cannot use the held GPUs either. It costs the pool `gpus_held` GPUs for as "
            "long as it lasts, and it does not resolve with time the way a plain partial hold "
            "may when running jobs end."
        ),
        fix=(
            "Release one member (preempt or delete the gang with the lowest priority or the "
            "fewest bound pods) so the others can complete. To prevent it: admit gangs "
            "atomically (Volcano `gang` plugin with `minAvailable`, Kueue `waitForPodsReady` "
            "with a timeout and requeueing, Slurm allocates jobs whole) and set a gang "
            "scheduling timeout so a partial gang releases its pods."
        ),
        evidence=(
            "`members`: per gang `bound` (bound pods/min_member), `missing_pods`, "
            "`gpus_per_pod`, `gpus_held`, `hold_s` and `held_since`; `gpus_held` in all; the "
            "`pool` and its free GPUs (`pool_free_gpus`)."
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
