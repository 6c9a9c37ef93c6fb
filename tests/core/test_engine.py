"""The rule registry and engine: stable ids, duplicate ids refused, a failing rule is an error
value that hides no other rule, thresholds resolved and checked."""

from __future__ import annotations

import dataclasses

import pytest

from diagnosis.core.rules.base import Judgement, ThresholdError
from diagnosis.core.rules.engine import run_rules
from diagnosis.core.rules.registry import DuplicateRuleError, all_rules, collect, get_rule
from tests.support.builders import BUILTIN_RULE_IDS, SnapshotBuilder


def idle_snapshot():
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("j1", node="a100-000", waited="3h", util=0.0, fb_used_frac=0.05)
    builder.gpu("a100-000", 0, xid=[(79, "1m")])
    return builder.build()


def test_the_nine_rules_are_registered_by_their_stable_ids():
    assert set(all_rules()) == set(BUILTIN_RULE_IDS)


def test_every_rule_has_a_complete_doc_and_typed_thresholds():
    for rule in all_rules().values():
        assert rule.title
        assert rule.severity in {"info", "warning", "critical"}
        for section in ("detects", "why", "fix", "evidence"):
            assert getattr(rule.doc, section).strip(), f"{rule.id}: empty {section}"
        for threshold in rule.thresholds:
            assert threshold.parse(threshold.default) == threshold.default


def test_a_duplicate_rule_id_is_refused():
    rule = get_rule("xid")
    with pytest.raises(DuplicateRuleError, match="'xid' is defined twice"):
        collect([rule, dataclasses.replace(rule, title="another")])


def test_a_rule_that_raises_becomes_an_error_value_and_the_others_still_report():
    def explode(snapshot, thresholds, facts) -> Judgement:
        raise ZeroDivisionError("boom")

    rules = dict(all_rules())
    rules["idle-allocation"] = dataclasses.replace(rules["idle-allocation"], evaluate=explode)
    diagnosis = run_rules(idle_snapshot(), rules=rules)
    assert [(e.rule, e.error, e.message) for e in diagnosis.errors] == [
        ("idle-allocation", "ZeroDivisionError", "boom")
    ]
    assert [f.rule for f in diagnosis.findings] == ["xid"]


def test_without_the_broken_rule_both_findings_appear():
    assert {f.rule for f in run_rules(idle_snapshot()).findings} == {"xid", "idle-allocation"}


def test_only_runs_the_named_rules():
    diagnosis = run_rules(idle_snapshot(), only=["xid"])
    assert {f.rule for f in diagnosis.findings} == {"xid"}
    assert set(diagnosis.seconds) == {"xid"}


def test_findings_are_ordered_by_severity():
    severities = [f.severity for f in run_rules(idle_snapshot()).findings]
    order = {"critical": 0, "warning": 1, "info": 2}
    assert severities == sorted(severities, key=order.__getitem__)


def test_an_override_changes_the_outcome():
    diagnosis = run_rules(idle_snapshot(), {"idle-allocation": {"min_runtime": 4 * 3600}})
    assert {f.rule for f in diagnosis.findings} == {"xid"}


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("max_util", "high", "expected a number"),
        ("max_util", True, "expected a number"),
        ("min_runtime", 10.5, "expected a whole number"),
        ("min_runtime", -1, "must be >= 0"),
        ("nope", 1, "has no threshold 'nope'"),
    ],
)
def test_bad_threshold_values_are_refused(name, value, message):
    with pytest.raises(ThresholdError, match=message):
        get_rule("idle-allocation").resolve({name: value})


def test_a_bad_override_in_a_run_is_that_rules_error():
    diagnosis = run_rules(idle_snapshot(), {"idle-allocation": {"max_util": "x"}})
    assert [e.rule for e in diagnosis.errors] == ["idle-allocation"]
    assert {f.rule for f in diagnosis.findings} == {"xid"}
