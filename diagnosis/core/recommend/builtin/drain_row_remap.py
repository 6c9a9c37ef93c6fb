"""``drain-row-remap``: cordon and drain a node whose GPU's memory row remapper needs a reset (a
pending remap), has failed, or remapped rows for new uncorrectable errors (the
``ecc-row-remap`` rule).

Same change and the same static capacity account as ``drain-node`` (which answers critical
Xids); the reason names the remapper's state, e.g.
``gpuobs: pending row remap on gpu-117/3 (reset the GPU once drained)``. Nodes already
``drained`` or ``down`` get nothing.
"""

from __future__ import annotations

from diagnosis.core.recommend.base import DRAIN_NODE, Draft, FindingRef, Generator, RecommendContext
from diagnosis.core.recommend.builtin.drain_node import (
    MAX_REASON_CHARS,
    PoolLayout,
    capacity_account,
    drainable_nodes,
)
from diagnosis.core.rules.base import Finding


def generate(context: RecommendContext) -> list[Draft]:
    nodes = context.snapshot.nodes
    drafts = []
    drainable = drainable_nodes(context, "ecc-row-remap")
    layout = PoolLayout.of(context) if drainable else None
    for node, findings in drainable:
        reason = remap_reason(findings)
        failed = any(f.evidence.get("row_remap_failure") for f in findings)
        then = "send the GPU for service (RMA)" if failed else "reset the GPU (nvidia-smi -r)"
        impact, tradeoffs = capacity_account(context, node, findings, layout)
        drafts.append(
            Draft(
                kind=DRAIN_NODE,
                target=f"node:{node}",
                change={"from": str(nodes.at[node, "state"]), "to": "drained", "reason": reason},
                findings=tuple(FindingRef.of(f) for f in findings),
                summary=f"Cordon and drain node {node} ({reason.removeprefix('gpuobs: ')}); "
                f"then {then}.",
                static_impact=impact,
                tradeoffs=tradeoffs,
                basis={"rule": "ecc-row-remap", "remap_failure": failed},
            )
        )
    return drafts


def remap_reason(findings: list[Finding]) -> str:
    """``gpuobs: pending row remap on n/3; row remap failure on n/5``, at most 200 characters."""
    parts = []
    for finding in findings:
        evidence = finding.evidence
        if evidence.get("row_remap_failure"):
            what = "row remap failure"
        elif evidence.get("row_remap_pending"):
            what = "pending row remap"
        else:
            what = "new uncorrectable remapped rows"
        parts.append(f"{what} on {evidence['gpu']}")
    text = "gpuobs: " + "; ".join(parts)
    if len(text) > MAX_REASON_CHARS:
        text = text[: MAX_REASON_CHARS - 3].rstrip("; ") + "..."
    return text


GENERATOR = Generator(
    id="drain-row-remap",
    kind=DRAIN_NODE,
    title="Drain a node whose GPU memory needs a row remap",
    rules=("ecc-row-remap",),
    doc=(
        "For a node with an `ecc-row-remap` finding (pending row remap, remap failure, new "
        "uncorrectable remapped rows): cordon + drain with the reason "
        "`gpuobs: pending row remap on <node>/<gpu>`, then reset the GPU (or, after a remap "
        "failure, send it for service). The capacity account is `drain-node`'s."
    ),
    generate=generate,
)
