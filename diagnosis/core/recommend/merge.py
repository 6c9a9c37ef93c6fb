"""One recommendation per ``(kind, target)``: the generators' output merged before it is stored.

Several rules may speak about one target -- a job that is both misplaced and data-starved gets
an advisory from each rule -- while the store keeps one open recommendation per ``(cluster,
kind, target)`` (a unique constraint). :func:`one_per_target` makes that hold by construction:

- drafts with the same change (advice has none) become one: the motivating findings of all,
  their summaries and advice in order, the largest ``gpus_involved``, the rules behind each;
- drafts with different changes for one target cannot both be made: the first one (the
  engine's order: preselected first, then the generators' order) stands and the others are
  listed in its ``basis.conflicting`` so nothing is silently lost.

Pure core: no Django.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from diagnosis.core.recommend.base import FindingRef, Recommendation


def change_key(change: Mapping[str, Any]) -> str:
    """A change as a stable string (the identity of "the same change"): what it writes, not its
    ``reason`` (a gang release motivated by a partial hold one cycle and a deadlock the next is
    one change, issue #26.7)."""
    return json.dumps(
        {k: v for k, v in change.items() if k != "reason"}, sort_keys=True, default=str
    )


def one_per_target(recommendations: Iterable[Recommendation]) -> tuple[Recommendation, ...]:
    """``recommendations`` with at most one per ``(kind, target)``, in first-seen order."""
    groups: dict[tuple[str, str], list[Recommendation]] = {}
    for rec in recommendations:
        groups.setdefault((rec.kind, rec.target), []).append(rec)
    return tuple(_merge(group) for group in groups.values())


def _merge(group: list[Recommendation]) -> Recommendation:
    if len(group) == 1:
        return group[0]
    ranked = sorted(group, key=lambda r: not r.preselect)  # stable: generators' order kept
    first = ranked[0]
    same = [r for r in ranked if change_key(r.change) == change_key(first.change)]
    conflicting = [r for r in ranked if change_key(r.change) != change_key(first.change)]
    findings = tuple(dict.fromkeys(f for r in same for f in r.findings))
    basis: dict[str, Any] = dict(first.basis)
    rules = _unique(_rules_of(r) for r in same)
    if len(rules) > 1:
        basis["rules"] = rules
    if conflicting:
        basis["conflicting"] = [
            {"generator": r.generator, "change": dict(r.change), "summary": r.summary}
            for r in conflicting
        ]
    impact = dict(first.impact)
    involved = [r.impact.get("gpus_involved") for r in same if r.impact.get("gpus_involved")]
    if involved:
        impact["gpus_involved"] = max(int(v) for v in involved)
    advice = _unique(r.advisory for r in same if r.advisory)
    return replace(
        first,
        findings=_refs(findings),
        summary=" ".join(_unique(r.summary for r in same)),
        advisory="\n\n".join(advice) if advice else None,
        impact=impact,
        harm=tuple(_unique(h for r in same for h in r.harm)),
        tradeoffs=tuple(_unique(t for r in same for t in r.tradeoffs)),
        basis=basis,
    )


def _rules_of(rec: Recommendation) -> str:
    rule = rec.basis.get("rule")
    return str(rule) if rule else ",".join(sorted({f.rule for f in rec.findings}))


def _unique(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


def _refs(findings: tuple[FindingRef, ...]) -> tuple[FindingRef, ...]:
    """The findings without repeating a ``(rule, subject)`` (the first severity kept)."""
    seen: dict[tuple[str, str], FindingRef] = {}
    for ref in findings:
        seen.setdefault((ref.rule, ref.subject), ref)
    return tuple(seen.values())
