"""Runs every generator on a snapshot's diagnosis and gives each draft its impact.

A failing generator becomes an error value and never hides the others; a replay that fails
leaves its recommendation with an impact that says so (and not preselected).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from diagnosis.core.recommend.base import (
    DRAIN_NODE,
    IMPROVES,
    KINDS,
    NOT_SIMULATED,
    Draft,
    Generator,
    Recommendation,
    RecommendContext,
    RecommendSettings,
    plain,
)
from diagnosis.core.recommend.impact import SeedOutcome, pending_impact, simulated_impact
from diagnosis.core.recommend.registry import all_generators
from diagnosis.core.rules.engine import Diagnosis, run_rules
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot, format_time


@dataclass(frozen=True)
class GeneratorFailure:
    generator: str
    error: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"generator": self.generator, "error": self.error, "message": self.message}


@dataclass(frozen=True)
class RecommendationRun:
    snapshot: ClusterSnapshot
    settings: RecommendSettings
    recommendations: tuple[Recommendation, ...]
    errors: tuple[GeneratorFailure, ...] = ()
    seconds: Mapping[str, float] = field(default_factory=dict)
    diagnosis: Diagnosis | None = None

    def as_dict(self) -> dict[str, Any]:
        return plain(
            {
                "cluster": self.snapshot.cluster,
                "as_of": format_time(self.snapshot.as_of),
                "recommendations": [r.as_dict() for r in self.recommendations],
                "errors": [e.as_dict() for e in self.errors],
                "impact_settings": {
                    "seeds": list(self.settings.seeds),
                    "horizon_s": self.settings.horizon_s,
                    "simulate": self.settings.simulate,
                },
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            }
        )


def recommend(
    snapshot: ClusterSnapshot,
    diagnosis: Diagnosis | None = None,
    settings: RecommendSettings | None = None,
    *,
    generators: Mapping[str, Generator] | None = None,
    skip_impact: Callable[[Draft], str | None] | None = None,
    defer_impact: bool = False,
) -> RecommendationRun:
    """The recommendations for ``snapshot`` (diagnosed here unless ``diagnosis`` is given), each
    with its impact, ordered drains first, then placement, queue weights and advice.

    ``skip_impact`` may name, for a draft, why its replay is not needed (the cycle keeps the
    impact of an open recommendation with the same change); such a draft's impact then says
    ``not simulated`` with that reason and it is not preselected. With ``defer_impact`` no
    replay runs here: a draft to simulate gets a pending impact (its plan and stake,
    :func:`~diagnosis.core.recommend.impact.pending_impact`) for an impact task to estimate."""
    settings = settings or RecommendSettings()
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    if diagnosis is None:
        diagnosis = run_rules(snapshot)
        seconds["rules"] = time.perf_counter() - started
    facts = diagnosis.facts if diagnosis.facts is not None else SnapshotFacts(snapshot)
    context = RecommendContext(snapshot, diagnosis, settings, facts)

    drafts: list[tuple[str, Draft]] = []
    errors: list[GeneratorFailure] = []
    started = time.perf_counter()
    for generator_id, generator in (generators or all_generators()).items():
        try:
            drafts.extend((generator_id, d) for d in generator.generate(context))
        except Exception as exc:  # one broken generator must not hide the others
            errors.append(GeneratorFailure(generator_id, type(exc).__name__, str(exc)))
    seconds["generators"] = time.perf_counter() - started

    started = time.perf_counter()
    baselines: dict[str | None, list[SeedOutcome]] = {}
    recommendations = [
        _finish(snapshot, generator_id, draft, settings, baselines, skip_impact, defer_impact)
        for generator_id, draft in drafts
    ]
    seconds["impact"] = time.perf_counter() - started
    recommendations.sort(key=lambda r: (KINDS.index(r.kind), r.target))
    return RecommendationRun(
        snapshot, settings, tuple(recommendations), tuple(errors), seconds, diagnosis
    )


def _finish(
    snapshot: ClusterSnapshot,
    generator_id: str,
    draft: Draft,
    settings: RecommendSettings,
    baselines: dict[str | None, list[SeedOutcome]],
    skip_impact: Callable[[Draft], str | None] | None = None,
    defer_impact: bool = False,
) -> Recommendation:
    harm: tuple[str, ...] = ()
    tradeoffs = tuple(draft.tradeoffs)
    skipped = skip_impact(draft) if skip_impact is not None and draft.plan is not None else None
    if skipped:
        impact = _unknown_impact(skipped)
        preselect = False
    elif draft.plan is not None and settings.simulate and defer_impact:
        impact = pending_impact(snapshot, draft.plan, settings)
        preselect = False
    elif draft.plan is not None and settings.simulate:
        try:
            impact, assessment = simulated_impact(snapshot, draft.plan, settings, baselines)
        except Exception as exc:  # the recommendation stands; its impact is unknown
            impact = _unknown_impact(f"the replay failed: {type(exc).__name__}: {exc}")
            preselect = False
        else:
            harm = assessment.harm
            tradeoffs += assessment.tradeoffs
            preselect = assessment.verdict == IMPROVES
    elif draft.plan is not None:
        impact = _unknown_impact("simulation turned off")
        preselect = False
    else:
        impact = dict(draft.static_impact or _unknown_impact("nothing to simulate"))
        # A drain for a critical Xid is preselected on the catalog's word (its impact is the
        # capacity it costs); advice has nothing to apply.
        preselect = draft.kind == DRAIN_NODE
    return Recommendation(
        generator=generator_id,
        kind=draft.kind,
        target=draft.target,
        change=dict(draft.change),
        findings=draft.findings,
        summary=draft.summary,
        advisory=draft.advisory,
        impact=impact,
        preselect=preselect and not harm,
        harm=harm,
        tradeoffs=tradeoffs,
        basis=dict(draft.basis),
    )


def _unknown_impact(why: str) -> dict[str, Any]:
    return {"method": "none", "verdict": NOT_SIMULATED, "headline": f"not simulated: {why}"}


def render_table(report: Mapping[str, Any]) -> str:
    """A readable text report of :meth:`RecommendationRun.as_dict`."""
    recommendations = report["recommendations"]
    lines = [f"Recommendations as of {report['as_of']}: {len(recommendations)}"]
    for r in recommendations:
        mark = "[x]" if r["preselect"] else "[ ]"
        change = r["change"]
        what = f"{change.get('from')} -> {change.get('to')}" if "to" in change else "advice"
        lines += ["", f"{mark} {r['kind']} {r['target']}: {what}", f"    {r['summary']}"]
        if r["advisory"]:
            lines.append(f"    advice: {r['advisory']}")
        lines.append(f"    impact ({r['impact'].get('method')}): {r['impact'].get('headline')}")
        lines += [f"    HARM: {h}" for h in r["harm"]]
        lines += [f"    trade-off: {t}" for t in r["tradeoffs"]]
        motivating = ", ".join(f"{f['rule']} {f['subject']}" for f in r["findings"])
        if motivating:
            lines.append(f"    from: {motivating}")
    if report["errors"]:
        lines += ["", "GENERATOR ERRORS (the other generators still ran)"]
        lines += [f"  {e['generator']}: {e['error']}: {e['message']}" for e in report["errors"]]
    settings = report["impact_settings"]
    lines += [
        "",
        f"Impact: {len(settings['seeds'])} seed(s), {settings['horizon_s'] / 3600:g} h simulated "
        "per replay; [x] = preselected (a simulated improvement and no predicted harm, or a "
        "drain for a critical Xid).",
    ]
    return "\n".join(lines)
