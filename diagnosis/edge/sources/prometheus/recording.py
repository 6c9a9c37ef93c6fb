"""Recording rules for large clusters: the range functions of the family queries
(:func:`.queries.family_queries`) evaluated by Prometheus's rule manager once per interval and
stored as series, so that a collection reads instant vectors instead of every GPU's window of
samples (docs/integrations.md, "Recording rules").

Rules are generated from the family queries themselves (:func:`recording_groups`), so a
collection can only ask for recorded series that a rule writes. Each family's rules come with a
marker rule, ``gpuobs_cluster:recording_rules:present<window>``, one series per cluster (every
GPU-level label summed away) labelled with the family and a fingerprint of its rules:
:func:`detection_query` reads them all in one cheap query and :func:`judge` tells, per family,
whether this collection may read its recorded series (same rules, same window, fresh). Nothing
here talks to a server.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import yaml

from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.edge.sources.prometheus.promql import Selection, duration
from diagnosis.edge.sources.prometheus.queries import (
    POD_SPLIT_LABELS,
    Term,
    build_queries,
    recorded_source,
)

MARKER = "gpuobs_cluster:recording_rules:present"
FAMILY_LABEL = "gpuobs_family"
RULES_LABEL = "gpuobs_rules"
DEFAULT_INTERVAL = "1m"
# What tells one GPU's (or one series') labels from the cluster's: summed away in the marker so
# that it keeps one series per cluster (its external or target labels: ``cluster``, ``job``...).
GPU_LEVEL_LABELS = tuple(
    dict.fromkeys(
        (
            *dcgm.INVENTORY_LABELS,
            *dcgm.MIG_LABELS,
            "pci_bus_id",
            "device",
            "DCGM_FI_DRIVER_VERSION",
            "pod_uid",
            "vgpu",
            "err_code",
            "err_msg",
        )
    )
)
_RECORDED = re.compile(r"gpuobs_gpu:[A-Za-z0-9_]+:[A-Za-z0-9_]+")


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str
    labels: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"record": self.record, "expr": self.expr}
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


@dataclass(frozen=True)
class RecordingGroup:
    """One family's rules and its marker."""

    family: str
    rules: tuple[RecordingRule, ...]  # the marker last
    fingerprint: str


def _terms(window_s: float) -> dict[str, dict[str, tuple[Term, str]]]:
    """Per family, the recorded series its queries (first and fallback) read: record name ->
    (term, metric)."""
    seen: dict[str, tuple[Term, str]] = {}
    plain = recorded_source(Selection(), window_s)

    def source(term: Term, metric: str, more: Sequence) -> str:
        seen[term.record_name(metric, duration(window_s))] = (term, metric)
        return plain(term, metric, more)

    out: dict[str, dict[str, tuple[Term, str]]] = {}
    for fallback in (False, True):
        texts = build_queries(source, Selection(), Selection(), window_s, fallback=fallback)
        for family, text in texts.items():
            for name in _RECORDED.findall(text):
                out.setdefault(family, {})[name] = seen[name]
    return out


def _fingerprint(rules: Iterable[RecordingRule]) -> str:
    text = "\n".join(f"{rule.record} = {rule.expr}" for rule in rules)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def recording_groups(window_s: float) -> list[RecordingGroup]:
    """The rules of a collector whose ``window_s`` is this, per family that has range
    functions (every family but ``cpu``)."""
    w = duration(window_s)
    groups = []
    for family, terms in _terms(window_s).items():
        rules = [
            RecordingRule(
                name,
                f"{term.agg} without ({', '.join(POD_SPLIT_LABELS)}) ("
                f"{term.template.replace('{w}', w).format(s=metric)})",
            )
            for name, (term, metric) in sorted(terms.items())
        ]
        fingerprint = _fingerprint(rules)
        marker = RecordingRule(
            f"{MARKER}{w}",
            f"group without ({', '.join(GPU_LEVEL_LABELS)}) "
            f"({dcgm.GR_ENGINE_ACTIVE} or {dcgm.GPU_UTIL})",
            ((FAMILY_LABEL, family), (RULES_LABEL, fingerprint)),
        )
        groups.append(RecordingGroup(family, (*rules, marker), fingerprint))
    return groups


def rule_groups_document(window_s: float, interval: str = DEFAULT_INTERVAL) -> list[dict]:
    """The rule file's groups (a PrometheusRule's ``spec.groups``): one group, so that every
    family's series of one evaluation share its time (each group's evaluations are offset by a
    hash of its name), the families' rules first and their markers after them."""
    groups = recording_groups(window_s)
    rules = {rule.record: rule for group in groups for rule in group.rules[:-1]}
    markers = [group.rules[-1] for group in groups]
    return [
        {
            "name": f"gpuobs-recording-{duration(window_s)}",
            "interval": interval,
            "rules": [rule.as_dict() for rule in (*rules.values(), *markers)],
        }
    ]


def rules_yaml(window_s: float, interval: str = DEFAULT_INTERVAL) -> str:
    """A Prometheus rule file of the groups."""
    return yaml.safe_dump(
        {"groups": rule_groups_document(window_s, interval)}, sort_keys=False, width=10**6
    )


def expected_fingerprints(window_s: float) -> dict[str, str]:
    """family -> the fingerprint of its group's rules for this window."""
    return {group.family: group.fingerprint for group in recording_groups(window_s)}


def detection_query(selection: Selection, window_s: float) -> str:
    """The time of each family's latest marker sample for this cluster (its fixed matchers only:
    the marker keeps no host label, so a shard asks for its whole cluster)."""
    cluster = Selection(selection.matchers, ((),), selection.extra_label_names)
    return f"timestamp({cluster.over('{s}', f'{MARKER}{duration(window_s)}')})"


@dataclass(frozen=True)
class Judgement:
    """Which families read recorded series, and why the others do not (family -> reason)."""

    recorded: frozenset[str]
    raw: dict[str, str]
    deployed: bool  # a marker of this cluster's window was seen at all

    def problem(self) -> str | None:
        """What a collection reports as degraded: rules deployed, some families read raw."""
        if not self.deployed or not self.raw:
            return None
        reasons: dict[str, list[str]] = {}
        for family, reason in sorted(self.raw.items()):
            reasons.setdefault(reason, []).append(family)
        said = "; ".join(f"{', '.join(fs)}: {reason}" for reason, fs in reasons.items())
        return f"recording rules not used for {len(self.raw)} famil(ies), read raw ({said})"

    @property
    def all_recorded(self) -> bool:
        return not self.raw

    def as_dict(self) -> dict[str, object]:
        return {
            "recorded": sorted(self.recorded),
            "raw": dict(sorted(self.raw.items())),
            "deployed": self.deployed,
        }


def judge(
    markers: Sequence[Mapping[str, str]],
    times: Sequence[float],
    window_s: float,
    as_of: float,
    max_age_s: float,
) -> Judgement:
    """Per family with rules: recorded when a marker of the same rules was written at most
    ``max_age_s`` before ``as_of``; else raw, with the reason."""
    expected = expected_fingerprints(window_s)
    newest: dict[str, float] = {}
    other: set[str] = set()
    for labels, at in zip(markers, times, strict=True):
        family = labels.get(FAMILY_LABEL, "")
        if family not in expected:
            continue
        if labels.get(RULES_LABEL) != expected[family]:
            other.add(family)
            continue
        newest[family] = max(newest.get(family, float("-inf")), float(at))
    recorded, raw = set(), {}
    for family in expected:
        at = newest.get(family)
        if at is None:
            raw[family] = (
                "recorded by other rules (regenerate them: manage.py recording_rules)"
                if family in other
                else "no recorded series"
            )
        elif as_of - at > max_age_s:
            raw[family] = f"recorded series stale ({as_of - at:.0f} s old)"
        else:
            recorded.add(family)
    return Judgement(frozenset(recorded), raw, bool(newest or other))


def degradation(report: Mapping[str, object] | None) -> str | None:
    """What a collection reports as degraded from its ``recording_rules`` report: rules
    deployed for the cluster, and some families read raw all the same."""
    if not report or not report.get("deployed") or not report.get("raw"):
        return None
    reasons: dict[str, list[str]] = {}
    for family, reason in sorted(dict(report["raw"]).items()):
        reasons.setdefault(str(reason), []).append(family)
    said = "; ".join(f"{', '.join(families)}: {reason}" for reason, families in reasons.items())
    return f"recording rules not used for {len(dict(report['raw']))} famil(ies), read raw ({said})"


def merged(reports: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """The ``recording_rules`` reports of a collection's shards as one: a family counts as
    recorded when every shard read it so."""
    recorded = set.intersection(*(set(r["recorded"]) for r in reports)) if reports else set()
    raw = {f: reason for r in reports for f, reason in dict(r["raw"]).items()}
    return {
        "recorded": sorted(recorded - set(raw)),
        "raw": dict(sorted(raw.items())),
        "deployed": any(r["deployed"] for r in reports),
    }
