"""One diagnosis of one snapshot: rules, not-judged counts and the GPU-hour accounting, as the
JSON report that ``manage.py diagnose --json`` prints (pure core: no Django)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from diagnosis.core.accounting import account
from diagnosis.core.rules.base import SEVERITIES, ThresholdError
from diagnosis.core.rules.engine import Diagnosis, run_rules
from diagnosis.core.rules.registry import all_rules
from diagnosis.core.snapshot import ClusterSnapshot


def parse_threshold_settings(
    settings: Iterable[str], only: Iterable[str] | None = None
) -> dict[str, dict[str, float | int]]:
    """``["fragmentation.min_wait=300", ...]`` as rule id -> threshold -> typed value.

    Unknown rules, unknown thresholds and bad values raise :class:`ThresholdError`.
    """
    rules = all_rules()
    for rule_id in only or ():
        if rule_id not in rules:
            raise ThresholdError(f"--rule {rule_id}: unknown rule (known: {', '.join(rules)})")
    overrides: dict[str, dict[str, float | int]] = {}
    for setting in settings:
        name, sep, value = setting.partition("=")
        rule_id, dot, threshold = name.strip().rpartition(".")
        if not sep or not dot or not rule_id or not threshold:
            raise ThresholdError(f"--set {setting!r}: expected RULE.THRESHOLD=VALUE")
        rule = rules.get(rule_id)
        if rule is None:
            raise ThresholdError(f"--set {setting!r}: unknown rule {rule_id!r}")
        try:
            parsed = rule.threshold(threshold).parse(value.strip())
        except ThresholdError as exc:
            raise ThresholdError(f"--set {setting!r}: {exc}") from None
        overrides.setdefault(rule_id, {})[threshold] = parsed
    return overrides


def diagnose(
    snapshot: ClusterSnapshot,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    only: Iterable[str] | None = None,
) -> tuple[Diagnosis, Any]:
    """The rules' diagnosis and the GPU-hour accounting built on it."""

    diagnosis = run_rules(snapshot, overrides, only=only)
    return diagnosis, account(diagnosis)


def diagnose_snapshot(
    snapshot: ClusterSnapshot,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    only: Iterable[str] | None = None,
) -> dict[str, Any]:
    diagnosis, accounting = diagnose(snapshot, overrides, only)
    report = diagnosis.as_dict()
    report["accounting"] = accounting.as_dict()
    return report


def render_table(report: Mapping[str, Any]) -> str:
    """A readable text report: findings grouped by severity, then errors and not-judged."""
    findings = report["findings"]
    lines = [f"Diagnosis as of {report['as_of']}: {len(findings)} finding(s)"]
    for severity in SEVERITIES:
        group = [f for f in findings if f["severity"] == severity]
        if not group:
            continue
        lines += ["", f"{severity.upper()} ({len(group)})"]
        rule_width = max(len(f["rule"]) for f in group)
        subject_width = min(40, max(len(f["subject"]) for f in group))
        for f in group:
            lines.append(
                f"  {f['rule']:<{rule_width}}  {f['subject']:<{subject_width}}  {f['summary']}"
            )
    if report["errors"]:
        lines += ["", "RULE ERRORS (the other rules still ran)"]
        lines += [f"  {e['rule']}: {e['error']}: {e['message']}" for e in report["errors"]]
    if report["not_judged"]:
        lines += ["", "NOT JUDGED"]
        for rule_id, reasons in report["not_judged"].items():
            lines += [f"  {rule_id}: {count} ({reason})" for reason, count in reasons.items()]
    accounting = report.get("accounting")
    if accounting:
        lines += ["", "GPU-HOURS", *_accounting_lines(accounting)]
    return "\n".join(lines)


def _accounting_lines(accounting: Mapping[str, Any]) -> list[str]:
    cluster = accounting["cluster"]
    total = cluster["gpus"] or 1
    lines = [
        f"  {name:<24} {value['gpus']:>8} GPUs  {value['gpu_hours']:>10.1f} GPU-h  "
        f"{100 * value['gpus'] / total:5.1f}%"
        for name, value in cluster["buckets"].items()
    ]
    for key in ("allocation_utilization", "activity_utilization"):
        value = cluster.get(key)
        lines.append(f"  {key:<24} {'n/a' if value is None else f'{100 * value:.1f}%'}")
    return lines
