"""Rule titles and docs in the reader's language (docs/ui.md "Language").

The pure core writes every rule's title and doc in English and imports no Django, so it is
translated here, at the Django layer: :func:`render_rule_catalog` writes
``diagnosis/rule_catalog.py``, every title and doc paragraph as a ``gettext_noop`` literal that
``makemessages`` finds, and pages show them through the ``core_text`` filter
(``diagnosis/templatetags/core_text.py``), which looks the English text up in the catalog of the
active language. Regenerate it with ``python manage.py rule_catalog`` when a rule's text changes
(a test checks it is up to date), then ``makemessages`` and translate the new entries. The
Xid catalog's meanings and actions (on-call's most important text) go the same way, into
``diagnosis/xid_text.py`` (:func:`render_xid_catalog`), written by the same command.
"""

from __future__ import annotations

from collections.abc import Mapping

from diagnosis.core import xid_catalog
from diagnosis.core.rules.base import Rule

HEADER = '''# ruff: noqa: E501
"""Every rule's title and doc, marked for translation (generated: do not edit).

Written by ``python manage.py rule_catalog`` from the rule registry (diagnosis/rule_text.py):
``makemessages`` reads these literals; pages translate the English text with the ``core_text``
filter.
"""

from django.utils.translation import gettext_noop

RULE_TEXT: dict[str, tuple[str, ...]] = {
'''


def rule_texts(rule: Rule) -> tuple[str, ...]:
    """The English texts of one rule a page may show: title, then the doc's paragraphs."""
    doc = rule.doc
    return tuple(text for text in (rule.title, doc.detects, doc.why, doc.fix) if text)


LINE_LENGTH = 100  # pyproject.toml's: the file is written as ``ruff format`` would leave it


def _literal(text: str) -> str:
    """``text`` as a Python string literal in ruff format's quote style (double quotes unless
    single ones need fewer escapes)."""
    quote = "'" if text.count('"') > text.count("'") else '"'
    body = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    return quote + body.replace(quote, "\\" + quote) + quote


def _entry(text: str) -> str:
    # never %-formatted: "13% of" is no format directive, whatever xgettext guesses
    flag = "# xgettext:no-python-format\n"
    literal = _literal(text)
    one_line = f"        gettext_noop({literal}),"
    if len(one_line) <= LINE_LENGTH:
        return f"        {flag}{one_line}\n"
    return f"        gettext_noop(\n            {flag}            {literal}\n        ),\n"


def render_rule_catalog(rules: Mapping[str, Rule]) -> str:
    """The source of ``diagnosis/rule_catalog.py`` for ``rules``."""
    lines = [HEADER]
    for rule_id in sorted(rules):
        lines.append(f"    {_literal(rule_id)}: (\n")
        lines.extend(_entry(text) for text in rule_texts(rules[rule_id]))
        lines.append("    ),\n")
    lines.append("}\n")
    return "".join(lines)


XID_HEADER = '''# ruff: noqa: E501
"""Every Xid meaning and action of the catalog, marked for translation (generated: do not edit).

Written by ``python manage.py rule_catalog`` from diagnosis/core/data/xid_catalog.json
(diagnosis/rule_text.py): ``makemessages`` reads these literals; the incident pages translate
the catalog's English with the ``core_text`` filter.
"""

from django.utils.translation import gettext_noop

XID_TEXT: tuple[str, ...] = (
'''


def xid_texts() -> list[str]:
    """The English texts of the Xid catalog a page may show (each once): meanings, then the
    actions, then the placeholder of an unknown code."""
    infos = [xid_catalog.lookup(code) for code in xid_catalog.all_codes()]
    unknown = xid_catalog.lookup(-1)
    texts = [i.meaning for i in infos] + [i.action_text for i in infos]
    texts += [unknown.meaning, unknown.action_text]
    return list(dict.fromkeys(texts))


def render_xid_catalog() -> str:
    """The source of ``diagnosis/xid_text.py``: :func:`xid_texts` as ``gettext_noop`` literals."""
    body = "".join(_entry(text).replace("        ", "    ", 1) for text in xid_texts())
    return XID_HEADER + body.replace("\n        ", "\n    ") + ")\n"
