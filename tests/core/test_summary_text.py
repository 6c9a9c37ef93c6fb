"""Rule summaries as message templates and values (diagnosis/core/text.py, issue #32): every
rule's summary renders from its template to exactly its English summary (each rule test's
fixtures are checked too, by tests/core/conftest.py), and a translation renders from the
same values."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.base import Finding
from diagnosis.core.rules.builtin.preemption_thrash import RULE as PREEMPTION
from diagnosis.core.rules.engine import run_rules
from diagnosis.core.rules.registry import all_rules
from diagnosis.core.simulate.scenarios import NOT_SIMULATED, rule_showcase_scenario
from diagnosis.core.text import Text, gettext_noop, message, no_tenant
from tests.core.conftest import check_summary_text
from tests.support.builders import BUILTIN_RULE_IDS, SnapshotBuilder
from tests.support.rules import judge_rule


@pytest.fixture(scope="module")
def showcase_findings():
    scenario = rule_showcase_scenario(0)
    document = scenario.build().snapshot(scenario.snapshot_at)
    diagnosis = run_rules(snapshot_format.load(document))
    assert not diagnosis.errors
    return diagnosis.findings


def _preemption_findings():
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("j", state="pending", waited="1d")
    for ago in ("5h", "3h", "1h"):
        builder.event("preempted", ago=ago, job="j", reason="Preempted", message="by prod/hi")
    return judge_rule(PREEMPTION, builder.build()).findings


def test_every_rule_renders_its_summary_from_its_template(showcase_findings):
    findings = [*showcase_findings, *_preemption_findings()]
    assert {f.rule for f in findings} >= set(BUILTIN_RULE_IDS) - set(NOT_SIMULATED) | {
        "preemption-thrash"
    }
    assert set(BUILTIN_RULE_IDS) <= set(all_rules())
    for finding in findings:
        check_summary_text(finding)


def test_a_translation_renders_from_the_same_values():
    text = message(
        gettext_noop("Job %(job)s (%(tenant)s) waited %(waited)s."),
        job="j1",
        tenant=no_tenant(None),
        waited=message(gettext_noop("%(hours)s h"), hours="3.2"),
    )
    assert text.render() == "Job j1 (no tenant) waited 3.2 h."
    zh = {
        "Job %(job)s (%(tenant)s) waited %(waited)s.": (
            "作业 %(job)s（%(tenant)s）等待了 %(waited)s。"
        ),
        "%(hours)s h": "%(hours)s 小时",
        "no tenant": "无租户",
    }
    assert text.render(lambda m: zh.get(m, m)) == "作业 j1（无租户）等待了 3.2 小时。"


def test_a_translation_whose_placeholders_differ_falls_back_to_the_english_template():
    text = message(gettext_noop("Job %(job)s is idle."), job="j1")
    assert text.render(lambda m: "作业 %(jobs)s 空闲。") == "Job j1 is idle."


def test_a_stored_value_that_is_no_text_reads_as_none():
    assert Text.from_json(None) is None
    assert Text.from_json({"msgid": 3}) is None
    assert Text.from_json({"msgid": "x %(a)s", "params": {"a": [1]}}) is None
    assert Text.from_json({"msgid": "x %(a)s", "params": {"a": True}}) is None
    assert Text.from_json({"msgid": "x %(a)s", "params": {"a": 1}}) == Text("x %(a)s", {"a": 1})


def test_strings_are_mapped_in_nested_texts_and_numbers_left_alone():
    text = message("%(who)s on %(n)s", who=message("job %(job)s", job="j1"), n=3)
    assert text.strings() == ["j1"]
    assert text.map_strings(str.upper).render() == "job J1 on 3"


def test_a_findings_summary_is_rendered_when_first_read_and_reads_as_one_given_rendered(
    monkeypatch,
):
    renders = []
    render = Text.render
    monkeypatch.setattr(Text, "render", lambda self, *a: renders.append(self) or render(self, *a))
    text = message(
        gettext_noop("Job %(job)s has waited %(waited)s."),
        job="j1",
        waited=message(gettext_noop("%(hours)s h"), hours="3.2"),
    )
    made = Finding.of_text("preemption-thrash", "job:j1", "warning", text, {"wait_s": 11520.0})
    assert not renders
    given = Finding(
        "preemption-thrash",
        "job:j1",
        "warning",
        "Job j1 has waited 3.2 h.",
        {"wait_s": 11520.0},
        text,
    )

    assert made.summary == "Job j1 has waited 3.2 h."
    assert made.summary == "Job j1 has waited 3.2 h."
    assert renders == [text, text.params["waited"]]  # once
    assert made == given
    assert repr(made) == repr(given)
    assert replace(made, subject="job:j2").summary == made.summary
    with pytest.raises(FrozenInstanceError):
        made.summary = "changed"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="no attribute 'summry'"):
        made.summry  # noqa: B018
