"""The shape every diagnosis rule has (docs/rules.md).

A rule module defines one module-level ``RULE = Rule(...)``; the registry finds it. The rule's
``evaluate`` is a pure function of the snapshot, its resolved thresholds and the shared
:class:`~diagnosis.core.rules.facts.SnapshotFacts`; it returns a :class:`Judgement`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from diagnosis.core.text import Param, Text

if TYPE_CHECKING:
    from diagnosis.core.rules.facts import SnapshotFacts
    from diagnosis.core.snapshot import ClusterSnapshot

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")


def evidence_number(value: Any) -> float | None:
    """A number as evidence carries it: a plain float, or None for a missing one (never NaN)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def evidence_numbers(row: Any, *columns: str, **renamed: str) -> dict[str, float | None]:
    """:func:`evidence_number` of columns of ``row`` (a Series or mapping), in the order named:
    each of ``columns`` under its own name, then each ``key=column`` of ``renamed`` under
    ``key``."""
    numbers = {column: evidence_number(row[column]) for column in columns}
    numbers.update({key: evidence_number(row[column]) for key, column in renamed.items()})
    return numbers


class ThresholdError(ValueError):
    """A threshold override that names no threshold of the rule, or has a value it cannot take."""


@dataclass(frozen=True)
class Threshold:
    name: str
    default: float | int
    help: str
    unit: str = ""
    minimum: float | None = 0
    maximum: float | None = None

    @property
    def kind(self) -> type:
        return type(self.default)

    def parse(self, value: Any) -> float | int:
        """The override value as this threshold's type, or :class:`ThresholdError`."""
        if isinstance(value, bool):
            raise ThresholdError(f"{self.name}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ThresholdError(f"{self.name}: expected a number, got {value!r}") from None
        if number != number:  # NaN
            raise ThresholdError(f"{self.name}: expected a number, got {value!r}")
        if self.kind is int:
            if not number.is_integer():
                raise ThresholdError(f"{self.name}: expected a whole number, got {value!r}")
            number = int(number)
        if self.minimum is not None and number < self.minimum:
            raise ThresholdError(f"{self.name}: must be >= {self.minimum}, got {value!r}")
        if self.maximum is not None and number > self.maximum:
            raise ThresholdError(f"{self.name}: must be <= {self.maximum}, got {value!r}")
        return number


@dataclass(frozen=True)
class RuleDoc:
    detects: str
    why: str
    fix: str
    evidence: str
    references: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    subject: str
    severity: Severity
    summary: str
    evidence: Mapping[str, Any]
    # The summary as a template and its values (diagnosis.core.text), for the reader's language.
    text: Text | None = None

    @classmethod
    def of_text(
        cls,
        rule: str,
        subject: str,
        severity: Severity,
        text: Text,
        evidence: Mapping[str, Any],
    ) -> Finding:
        """A finding whose English ``summary`` is ``text`` rendered when first read: a cycle
        reads few of its findings' summaries (those it writes), and rendering them all was a
        quarter of a 131,072-GPU diagnosis (issue #35). Its fields are set through their slots,
        not the frozen ``__init__``'s ``object.__setattr__``, for the same reason."""
        finding = object.__new__(cls)
        set_rule, set_subject, set_severity, set_evidence, set_text = _OF_TEXT_FIELDS
        set_rule(finding, rule)
        set_subject(finding, subject)
        set_severity(finding, severity)
        set_evidence(finding, evidence)
        set_text(finding, text)
        return finding

    def __getattr__(self, name: str) -> Any:
        # reached only for a field never set: the summary that of_text left to render
        if name != "summary":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        summary = self.text.render()
        object.__setattr__(self, "summary", summary)
        return summary

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "subject": self.subject,
            "severity": self.severity,
            "summary": self.summary,
            "evidence": dict(self.evidence),
        }


_OF_TEXT_FIELDS = tuple(
    getattr(Finding, name).__set__ for name in ("rule", "subject", "severity", "evidence", "text")
)
_TEXT_FIELDS = (Text.msgid.__set__, Text.params.__set__)


@dataclass(frozen=True)
class Judgement:
    """What one rule said of one snapshot: its findings and what it could not judge.

    ``not_judged`` maps a reason (e.g. ``"no MFU or tensor activity"``) to the number of
    subjects it could not judge for that reason. ``sustained`` names subjects the rule does not
    report now but whose finding, if one is firing (or pending), is to keep going as if reported:
    the fault is over but its harm is not (an Xid out of the window on a GPU still unhealthy).
    A sustained subject never opens a finding.
    """

    findings: tuple[Finding, ...] = ()
    not_judged: Mapping[str, int] = field(default_factory=dict)
    sustained: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: Severity
    subject_kind: str
    thresholds: tuple[Threshold, ...]
    doc: RuleDoc
    evaluate: Callable[[ClusterSnapshot, Mapping[str, Any], SnapshotFacts], Judgement]
    for_s: int = 0
    keep_firing_for_s: int = 300
    enabled_by_default: bool = True
    # The verdict rests on the GPUs' metrics (util, memory, tensor activity, Xids): when the
    # metrics cover too few GPUs or are too old, the rule is "not judged", never "healthy".
    reads_gpu_metrics: bool = False
    # The threshold (seconds) that overrides ``keep_firing_for_s`` per cluster, if any.
    keep_firing_threshold: str | None = None

    def keep_firing_for(self, thresholds: Mapping[str, Any]) -> float:
        """How long a finding of this rule keeps firing unreported, with these thresholds."""
        if self.keep_firing_threshold is not None and self.keep_firing_threshold in thresholds:
            return float(thresholds[self.keep_firing_threshold])
        return float(self.keep_firing_for_s)

    def defaults(self) -> dict[str, float | int]:
        return {t.name: t.default for t in self.thresholds}

    def threshold(self, name: str) -> Threshold:
        for threshold in self.thresholds:
            if threshold.name == name:
                return threshold
        known = ", ".join(t.name for t in self.thresholds) or "none"
        raise ThresholdError(f"rule {self.id!r} has no threshold {name!r} (known: {known})")

    def resolve(self, overrides: Mapping[str, Any] | None = None) -> dict[str, float | int]:
        """Defaults with the overrides applied; a bad override raises :class:`ThresholdError`."""
        values = self.defaults()
        for name, value in (overrides or {}).items():
            values[name] = self.threshold(name).parse(value)
        return values

    def finding(
        self,
        subject: str,
        summary: str | Text,
        evidence: Mapping[str, Any],
        severity: Severity | None = None,
    ) -> Finding:
        """A finding of this rule; a :class:`Text` summary is kept with its English text
        (rendered when first read: :meth:`Finding.of_text`)."""
        if isinstance(summary, Text):
            return Finding.of_text(self.id, subject, severity or self.severity, summary, evidence)
        return Finding(self.id, subject, severity or self.severity, summary, evidence)

    def findings_of_texts(
        self,
        subjects: Iterable[str],
        msgid: str,
        params: Iterable[dict[str, Param]],
        evidences: Iterable[Mapping[str, Any]],
    ) -> list[Finding]:
        """``finding(subject, Text(msgid, p), evidence)`` of each, at the rule's severity, built
        in one loop with their slots set directly, as :meth:`Finding.of_text` sets them (10^5
        findings of one rule at 131,072 GPUs, issue #35). The texts keep the ``params`` dicts
        themselves, not copies."""
        new = object.__new__
        set_rule, set_subject, set_severity, set_evidence, set_text = _OF_TEXT_FIELDS
        set_msgid, set_params = _TEXT_FIELDS
        rule, severity = self.id, self.severity
        findings = []
        for subject, values, evidence in zip(subjects, params, evidences, strict=True):
            text = new(Text)
            set_msgid(text, msgid)
            set_params(text, values)
            finding = new(Finding)
            set_rule(finding, rule)
            set_subject(finding, subject)
            set_severity(finding, severity)
            set_evidence(finding, evidence)
            set_text(finding, text)
            findings.append(finding)
        return findings
