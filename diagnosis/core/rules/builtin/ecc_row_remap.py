"""``ecc-row-remap``: a GPU whose memory row remapper reports a pending remap, a remap failure,
or new rows remapped for uncorrectable ECC errors in the window (docs/rules.md). The answer is a
drain: a pending remap takes effect only after a GPU reset, a failure
means the GPU needs service."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from diagnosis.core.rules.base import Finding, Judgement, Rule, RuleDoc, evidence_number
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.text import gettext_noop, message

NO_REMAP = "no row-remapper fields reported"
COLUMNS = ("row_remap_pending", "row_remap_failure", "row_remap_uncorrectable")


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    state = facts.gpu_state
    values = {c: state[c].to_numpy(dtype=float) for c in COLUMNS}
    reported = np.zeros(len(state), dtype=bool)
    for column in COLUMNS:
        reported |= ~np.isnan(values[column])
    not_judged = {NO_REMAP: int((~reported).sum())}
    pending = values["row_remap_pending"] >= 1
    failure = values["row_remap_failure"] >= 1
    new_rows = values["row_remap_uncorrectable"] > 0
    hit = pending | failure | new_rows
    if not hit.any():
        return Judgement((), not_judged)

    rows = state[hit]
    findings: list[Finding] = []
    for node, index, is_pending, is_failure, rows_new, job, health in zip(
        rows["node"].tolist(),
        rows["index"].tolist(),
        pending[hit].tolist(),
        failure[hit].tolist(),
        values["row_remap_uncorrectable"][hit].tolist(),
        rows["job"].tolist(),
        rows["health"].tolist(),
        strict=True,
    ):
        holder = None if job is None or job != job else str(job)
        gpu = f"{node}/{int(index)}"
        if is_failure:
            what = message(gettext_noop("a row remap failure"))
            action = gettext_noop("drain the node and have the GPU serviced (RMA)")
        elif is_pending:
            what = message(gettext_noop("a pending row remap"))
            action = gettext_noop("drain the node, then reset the GPU")
        else:
            what = message(
                gettext_noop("%(rows)s new row(s) remapped for uncorrectable errors"),
                rows=int(rows_new),
            )
            action = gettext_noop("drain the node and reset the GPU at the next chance")
        if holder:
            summary = message(
                gettext_noop("GPU %(gpu)s reports %(what)s under job %(job)s: %(action)s."),
                gpu=gpu,
                what=what,
                job=holder,
                action=message(action),
            )
        else:
            summary = message(
                gettext_noop("GPU %(gpu)s reports %(what)s: %(action)s."),
                gpu=gpu,
                what=what,
                action=message(action),
            )
        evidence = {
            "gpu": gpu,
            "node": node,
            "index": int(index),
            "row_remap_pending": bool(is_pending),
            "row_remap_failure": bool(is_failure),
            "uncorrectable_remapped_rows_new": evidence_number(rows_new),
            "job": holder,
            "health": health,
            "action": action,
        }
        severity = "critical" if is_failure else "warning"
        findings.append(RULE.finding(f"gpu:{gpu}", summary, evidence, severity=severity))
    return Judgement(tuple(findings), not_judged)


RULE = Rule(
    id="ecc-row-remap",
    title="GPU memory rows remapped or failing to remap",
    severity="warning",
    subject_kind="gpu:",
    thresholds=(),
    doc=RuleDoc(
        detects=(
            "A GPU whose row remapper (A100 and newer) reports, in the window: a pending "
            "remap (`row_remap.pending` ≥ 1, DCGM_FI_DEV_ROW_REMAP_PENDING), a remap failure "
            "(`row_remap.failure` ≥ 1, DCGM_FI_DEV_ROW_REMAP_FAILURE), or rows newly remapped "
            "for uncorrectable ECC errors (`row_remap.uncorrectable` > 0: the growth of "
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS over the window). Critical on a failure, "
            "warning otherwise. Nothing to tune: any of these is a fact about the memory. A "
            "GPU reporting none of the three fields is not judged (counted), never called "
            "healthy."
        ),
        why=(
            "An uncorrectable ECC error kills the process that touched the row (Xid 48/94/95) "
            "and marks the row for remapping; the remap takes effect only when the GPU is "
            "reset, so until then the same bad row can fail the next job placed there. A "
            "failed remap (the bank's spare rows are used up) means the GPU cannot repair "
            "itself: jobs keep dying on it until it is replaced. Draining first costs the "
            "node's capacity for minutes; not draining costs every job that lands there."
        ),
        fix=(
            "Drain the node (gpuobs proposes it: the `drain-node` recommendation), wait for "
            "its jobs to leave, then reset the GPU (`nvidia-smi -r -i <index>`, or reboot) so "
            "the pending remap is applied; check `nvidia-smi -q -d ROW_REMAPPER` shows no "
            "pending remap and no failure before returning the node. On a remap failure, or "
            "when remaps keep coming, open a service case (RMA) with NVIDIA's field "
            "diagnostic."
        ),
        evidence=(
            "`row_remap_pending`, `row_remap_failure` (booleans), "
            "`uncorrectable_remapped_rows_new` (rows remapped in the window; null when not "
            "reported), the GPU's `node`, `index`, `health`, the `job` holding it, and the "
            "`action`."
        ),
        references=(
            "DCGM_FI_DEV_ROW_REMAP_PENDING (field 396), DCGM_FI_DEV_ROW_REMAP_FAILURE (395), "
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS (393): NVIDIA/DCGM dcgm_fields (renamed "
            "DCGM_FI_DEV_ROW_REMAP_FAILED / _UNCORRECTABLE_TOTAL in DCGM 4); dcgm-exporter "
            "etc/default-counters.csv",
            "NVIDIA A100 GPU Memory Error Management: row remapping",
        ),
    ),
    evaluate=evaluate,
    for_s=0,
    keep_firing_for_s=1800,
    reads_gpu_metrics=True,
)
