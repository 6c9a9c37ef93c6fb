"""``placement-policy``: switch a fragmented pool's GPU placement from spread to binpack.

Fires for a pool with a ``fragmentation`` finding, or with at least ``min_partial_holds``
``gang-partial-hold`` findings (gangs holding GPUs while their missing pods do not fit), whose
placement is not binpack already. A fragmentation finding on ``cluster:`` (jobs without a pool in a
cluster of several pools) names no pool whose policy could change, and proposes nothing.

The impact replays the pool under its current placement and under binpack and reports the
blocked jobs' wait and the queues they belong to.
"""

from __future__ import annotations

from diagnosis.core.recommend.base import (
    PLACEMENT_POLICY,
    Draft,
    FindingRef,
    Generator,
    ImpactPlan,
    RecommendContext,
)
from diagnosis.core.rules.base import Finding
from diagnosis.core.simulate.policy import SetPlacement

PROPOSED = "binpack"
MAX_PLAN_JOBS = 50


def generate(context: RecommendContext) -> list[Draft]:
    by_pool: dict[str, list[Finding]] = {}
    for finding in context.findings("fragmentation"):
        if finding.subject.startswith("pool:"):
            by_pool.setdefault(finding.subject.removeprefix("pool:"), []).append(finding)
    holds: dict[str, list[Finding]] = {}
    for finding in context.findings("gang-partial-hold"):
        pool = finding.evidence.get("pool")
        if pool:
            holds.setdefault(str(pool), []).append(finding)
    for pool, found in holds.items():
        if len(found) >= context.settings.min_partial_holds:
            by_pool.setdefault(pool, []).extend(found)

    snapshot = context.snapshot
    drafts = []
    for pool in sorted(by_pool):
        current = snapshot.placement(pool)
        if current == PROPOSED:
            continue
        findings = by_pool[pool]
        jobs = _motivating_jobs(findings)[:MAX_PLAN_JOBS]
        known = snapshot.jobs.index.get_indexer(snapshot.jobs.index.intersection(jobs))
        queues = tuple(sorted(set(context.job_queues[known].tolist())))
        shares = context.shares
        was = current or "spread (assumed: the scheduler does not report its placement)"
        drafts.append(
            Draft(
                kind=PLACEMENT_POLICY,
                target=f"pool:{pool}",
                change={"from": current, "to": PROPOSED},
                findings=tuple(FindingRef.of(f) for f in findings),
                summary=f"Switch pool {pool}'s GPU placement from {was} to binpack: "
                + _why(findings),
                plan=ImpactPlan(
                    changes=(SetPlacement(pool, PROPOSED),),
                    jobs=tuple(jobs),
                    queues=queues,
                    fair_share={q: shares.target_share(q) for q in queues},
                    note="binpack from the replay's start; jobs already placed stay where they are",
                ),
                basis=_basis(findings, current),
            )
        )
    return drafts


def _motivating_jobs(findings: list[Finding]) -> list[str]:
    jobs: list[str] = []
    for finding in findings:
        if finding.rule == "fragmentation":
            jobs.extend(str(j["id"]) for j in finding.evidence.get("blocked_jobs", ()))
        else:
            jobs.append(finding.subject.removeprefix("job:"))
    return list(dict.fromkeys(jobs))


def _why(findings: list[Finding]) -> str:
    parts = []
    for finding in findings:
        if finding.rule == "fragmentation":
            e = finding.evidence
            parts.append(
                f"{e.get('blocked_job_count')} pending job(s) (asking {e.get('blocked_gpus')} "
                f"GPUs in all) cannot start although each would fit in the "
                f"{e.get('free_gpus')} free GPUs, were they not scattered over nodes "
                f"(frag_ratio {e.get('frag_ratio')})"
            )
    holds = [f for f in findings if f.rule == "gang-partial-hold"]
    if holds:
        held = sum(int(f.evidence.get("gpus_held") or 0) for f in holds)
        parts.append(f"{len(holds)} partial gang(s) hold {held} GPUs waiting for whole nodes")
    return "; ".join(parts) + "."


def _basis(findings: list[Finding], current: str | None) -> dict:
    frag = next((f for f in findings if f.rule == "fragmentation"), None)
    basis: dict = {"placement_reported": current is not None}
    if frag is not None:
        for key in ("free_gpus", "pool_gpus", "blocked_gpus", "frag_ratio", "fgd_fragment_pct"):
            basis[key] = frag.evidence.get(key)
    basis["partial_holds"] = sum(1 for f in findings if f.rule == "gang-partial-hold")
    return basis


GENERATOR = Generator(
    id="placement-policy",
    kind=PLACEMENT_POLICY,
    title="Binpack a fragmented pool",
    rules=("fragmentation", "gang-partial-hold"),
    doc=(
        "For a pool with a `fragmentation` finding (or at least `min_partial_holds` "
        "`gang-partial-hold` findings) whose placement is not binpack: spread → binpack "
        "(Volcano binpack plugin weight for `nvidia.com/gpu`; Kubernetes `NodeResourcesFit` "
        "`MostAllocated`; Slurm `CR_Pack_Nodes` / `LLN=NO`), so that small jobs fill partly "
        "used nodes and whole nodes come free for large pods."
    ),
    generate=generate,
)
