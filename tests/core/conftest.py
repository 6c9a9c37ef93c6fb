"""Every finding a rule makes in the core's tests carries its summary as a template and values
(:class:`diagnosis.core.text.Text`) that render exactly to the English summary, also after the
stored round trip: checked on each rule test's own fixtures (issue #32)."""

from __future__ import annotations

import pytest

from diagnosis.core.rules.base import Rule
from diagnosis.core.text import Text, placeholders


def check_summary_text(finding) -> None:
    """The finding's :class:`Text` renders to its summary, stored and read back too."""
    assert isinstance(finding.text, Text), f"{finding.rule}: summary without a template"
    assert finding.text.render() == finding.summary
    stored = Text.from_json(finding.text.as_json())
    assert stored == finding.text
    assert stored.render() == finding.summary
    _check_params(finding.text)


def _check_params(text: Text) -> None:
    assert placeholders(text.msgid) == set(text.params), text.msgid
    for value in text.params.values():
        if isinstance(value, Text):
            _check_params(value)
        else:
            assert isinstance(value, str | int | float), (text.msgid, value)
            assert not isinstance(value, bool), text.msgid


@pytest.fixture(autouse=True)
def _every_summary_renders_from_its_template(monkeypatch):
    made = Rule.finding

    def finding(self, *args, **kwargs):
        result = made(self, *args, **kwargs)
        check_summary_text(result)
        return result

    monkeypatch.setattr(Rule, "finding", finding)
