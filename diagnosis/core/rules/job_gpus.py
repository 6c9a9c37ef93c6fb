"""The GPUs of chosen jobs with their window statistics, one row per allocated GPU in allocation
order: the per-GPU frame several rules (hung-collective, idle-held) aggregate and cite in
evidence. Not a rule: it has no RULE."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from diagnosis.core.rules.base import evidence_number
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import GPU_KEY, ClusterSnapshot


def job_gpu_rows(
    snapshot: ClusterSnapshot,
    facts: SnapshotFacts,
    job_ids: pd.Index | Sequence[str],
    columns: Sequence[str],
) -> pd.DataFrame:
    """One row per GPU allocated to ``job_ids``: ``job``, ``pod``, ``order``, ``node``,
    ``index``, ``power_limit_w`` (see
    :attr:`SnapshotFacts.power_limit_per_gpu`) and the GPU ``columns`` (NaN where absent)."""
    alloc = snapshot.allocations
    state = facts.gpu_state[[*GPU_KEY, *columns]].copy()
    state["power_limit_w"] = facts.power_limit_per_gpu.to_numpy()
    rows = facts.allocations_with(alloc["job"].isin(job_ids).to_numpy(), state)
    return rows.sort_values(["job", "order"]).reset_index(drop=True)


def evidence_by_job(rows: pd.DataFrame, fields: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Per job, its GPUs as evidence: ``{"gpu": "<node>/<index>", <name>: <number or None>}``
    for every ``name -> column`` of ``fields``, in allocation order (one pass over the rows)."""
    names = list(fields)
    out: dict[str, list[dict[str, Any]]] = {}
    for job, node, index, *values in zip(
        rows["job"].tolist(),
        rows["node"].tolist(),
        rows["index"].tolist(),
        *(rows[fields[n]].tolist() for n in names),
        strict=True,
    ):
        entry: dict[str, Any] = {"gpu": f"{node}/{index}"}
        entry.update({n: evidence_number(v) for n, v in zip(names, values, strict=True)})
        out.setdefault(job, []).append(entry)
    return out
