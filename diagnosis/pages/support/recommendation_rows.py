"""The rows of a recommendations list (issue #26.7): one-pod advice of one rule in one pool is one
row with its count (the demo's 15 one-pod NUMA advisories of 19 open recommendations were 15
rows), and open recommendations are ranked by what is at stake -- the GPU-hours the impact
estimate puts at stake, then the GPUs involved, newest first among equals."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from diagnosis.choices import RecommendationKind
from diagnosis.models import Recommendation


@dataclass
class Row:
    """One row: a recommendation, or a group of one-pod advice (``members``, the first shown)."""

    first: Recommendation
    members: list[Recommendation] = field(default_factory=list)

    @property
    def grouped(self) -> bool:
        return len(self.members) > 1

    @property
    def count(self) -> int:
        return max(1, len(self.members))

    @property
    def rule(self) -> str:
        return str((self.first.impact or {}).get("rule") or "")

    @property
    def pool(self) -> str:
        return str((self.first.impact or {}).get("pool") or "")

    @property
    def gpus(self) -> int:
        return sum(
            int((r.impact or {}).get("gpus_involved") or 0) for r in self.members or [self.first]
        )

    @property
    def stake(self) -> tuple[float, int]:
        recs = self.members or [self.first]
        gpu_h = sum(float((r.impact or {}).get("stake_gpu_h") or 0.0) for r in recs)
        return gpu_h, self.gpus


def _one_pod_advice(rec: Recommendation) -> tuple[str, str] | None:
    """The (rule, pool) a one-pod advisory is grouped under (None: shown on its own)."""
    impact = rec.impact or {}
    if rec.kind != RecommendationKind.ADVISORY or impact.get("pods") != 1:
        return None
    return str(impact.get("rule") or ""), str(impact.get("pool") or "")


def list_rows(recommendations: Iterable[Recommendation], *, rank: bool) -> list[Row]:
    """The list's rows, in the order given, or ranked by what is at stake (``rank``)."""
    rows: list[Row] = []
    groups: dict[tuple[str, str], Row] = {}
    for rec in recommendations:
        key = _one_pod_advice(rec)
        if key is None:
            rows.append(Row(rec))
            continue
        if key not in groups:
            groups[key] = Row(rec)
            rows.append(groups[key])
        groups[key].members.append(rec)
    if rank:  # a stable sort: the newest first among equals, as given
        rows.sort(key=lambda row: row.stake, reverse=True)
    return rows
