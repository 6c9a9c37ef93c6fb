"""Template filters and tags of the pages: numbers, durations, evidence tables, rule doc text.

``{% load gpuobs %}`` in a template. Everything here escapes what it is given; only the markup
it builds itself is marked safe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from django import template
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from diagnosis.core.numbers import finite_number
from diagnosis.core.text import SUMMARY_TEXT_KEY
from diagnosis.core.vocabulary import parse_time
from diagnosis.templatetags.clock import moment
from diagnosis.templatetags.links import evidence_label, evidence_link, link, unit_of

register = template.Library()

EMPTY = mark_safe('<span class="none">—</span>')
MAX_ROWS = 50  # rows of a sub-table, items of a list, before "… and N more"
MAX_DEPTH = 4  # deeper structures are shown as JSON text
# an RFC 3339 time (the snapshot's times in evidence): shown as every time is, in the reader's
# zone to the second, never "2026-11-29T07:51:12.123456+00:00"
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


# -- numbers and durations -----------------------------------------------------------------------


@register.filter
def percent(value: Any, digits: int = 0) -> str:
    """``0.5283|percent`` → ``53%``; ``|percent:1`` → ``52.8%``; unknown → ``—``."""
    number = finite_number(value)
    if number is None:
        return "—"
    return f"{number * 100:.{int(digits)}f}%"


@register.filter
def number(value: Any) -> str:
    """A readable number: thousands separated, at most 4 significant digits for fractions."""
    if isinstance(value, bool) or value is None:
        return "—" if value is None else ("yes" if value else "no")
    if isinstance(value, int):
        return f"{value:,}"
    numeric = finite_number(value)
    if numeric is None:
        return "—" if isinstance(value, float) else str(value)
    if numeric.is_integer() and abs(numeric) < 1e15:
        return f"{int(numeric):,}"
    if abs(numeric) >= 1e6:
        return f"{numeric:.3g}"
    if abs(numeric) >= 100:
        return f"{numeric:,.1f}"
    return f"{numeric:.4g}"


@register.filter
def gpu_hours(value: Any) -> str:
    """GPU-hours with one decimal, thousands separated: every cell of a column alike."""
    numeric = finite_number(value)
    return "—" if numeric is None else f"{numeric:,.1f}"


@register.filter
def duration(seconds: Any) -> str:
    """Seconds as ``45 s``, ``12 min``, ``3.5 h``, ``2.1 d``; negative: ``-12 min``."""
    value = finite_number(seconds)
    if value is None:
        return "—"
    sign, value = ("-" if value < 0 else ""), abs(value)
    # the units in the reader's language (zh-Hans: 秒, 分钟, 小时, 天)
    if value < 90:
        text = gettext("%(n)s s") % {"n": f"{value:.0f}"}
    elif value < 90 * 60:
        text = gettext("%(n)s min") % {"n": f"{value / 60:.0f}"}
    elif value < 36 * 3600:
        text = gettext("%(n)s h") % {"n": f"{value / 3600:.1f}"}
    else:
        text = gettext("%(n)s d") % {"n": f"{value / 86400:.1f}"}
    return sign + text


# -- text ----------------------------------------------------------------------------------------

_CODE_SPANS = re.compile(r"`([^`]+)`")
_EMPHASIS = re.compile(r"\*([^*\s][^*]*?)\*")


@register.filter
def inline_code(text: Any) -> SafeString:
    """Rule doc text: escaped, with Markdown's `code` spans as <code> and *emphasis* as <em>."""
    parts = _CODE_SPANS.split(str(text))
    html = [
        format_html("<code>{}</code>", part)
        if i % 2
        else mark_safe(_EMPHASIS.sub(r"<em>\1</em>", str(escape(part))))  # noqa: S308
        for i, part in enumerate(parts)
    ]
    return mark_safe("".join(html))  # noqa: S308 - every part is escaped above


# -- evidence ------------------------------------------------------------------------------------


@register.simple_tag
def evidence_table(evidence: Any, cluster: Any = None) -> SafeString:
    """A finding's evidence as a table: one row per key, labelled for people
    (:func:`~diagnosis.templatetags.links.evidence_label`); nested dicts as key/value tables,
    lists of dicts as sub-tables with a column per key, other lists as comma lists. Numbers get
    their unit (fractions as percents, seconds as durations); with ``cluster``, the names of
    jobs, tenants, queues and nodes link to their pages."""
    context = _EvidenceContext(cluster)
    if isinstance(evidence, Mapping) and SUMMARY_TEXT_KEY in evidence:  # the summary's, no row
        evidence = {k: v for k, v in evidence.items() if k != SUMMARY_TEXT_KEY}
    if isinstance(evidence, Mapping) and evidence:
        return context.mapping_table(evidence, depth=0, css="evidence")
    return context.value(evidence, depth=0)


class _EvidenceContext:
    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def mapping_table(
        self, mapping: Mapping[str, Any], *, depth: int, css: str, parent: Any = None
    ) -> SafeString:
        rows = format_html_join(
            "",
            '<tr><th scope="row" title="{}">{}</th><td>{}</td></tr>',
            (
                (key, evidence_label(key), self.value(value, depth + 1, key, parent))
                for key, value in mapping.items()
            ),
        )
        return format_html('<table class="{}"><tbody>{}</tbody></table>', css, rows)

    def value(self, value: Any, depth: int, key: Any = None, parent: Any = None) -> SafeString:
        if value is None or value == "" or value == [] or value == {}:
            return EMPTY
        if isinstance(value, bool):
            return escape("yes" if value else "no")
        if isinstance(value, int | float):
            return _evidence_number(value, unit_of(key) if key is not None else "")
        kind = evidence_link(key, parent) if key is not None else None
        if isinstance(value, str):
            if kind and self.cluster:
                return link(kind, value, self.cluster)
            when = parse_time(value) if RFC3339.match(value) else None
            return moment(when) if when is not None else escape(value)
        if depth > MAX_DEPTH:
            return format_html("<code>{}</code>", json.dumps(value, default=str))
        if isinstance(value, Mapping):
            return self.mapping_table(value, depth=depth, css="kv", parent=key)
        if isinstance(value, list | tuple):
            if all(isinstance(item, Mapping) for item in value):
                return self.records_table(value, depth=depth, parent=key)
            if all(not isinstance(item, Mapping | list | tuple) for item in value):
                shown = format_html_join(
                    ", ", "{}", ((self.value(v, depth + 1, key, parent),) for v in value[:MAX_ROWS])
                )
                return format_html("{}{}", shown, _more(len(value)))
            items = format_html_join(
                "", "<li>{}</li>", ((self.value(v, depth + 1, key, parent),) for v in value)
            )
            return format_html('<ol class="items">{}</ol>', items)
        return escape(str(value))

    def records_table(
        self, records: list[Mapping[str, Any]] | tuple, depth: int, parent: Any = None
    ) -> SafeString:
        columns: dict[str, None] = {}
        for record in records:
            columns.update(dict.fromkeys(record))
        head = format_html_join(
            "", '<th scope="col" title="{}">{}</th>', ((c, evidence_label(c)) for c in columns)
        )
        body = format_html_join(
            "",
            "<tr>{}</tr>",
            (
                (
                    format_html_join(
                        "",
                        "<td>{}</td>",
                        ((self.value(r.get(c), depth + 1, c, parent),) for c in columns),
                    ),
                )
                for r in records[:MAX_ROWS]
            ),
        )
        more = _more(len(records))
        return format_html(
            '<table class="sub"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>{}',
            head,
            body,
            more,
        )


def _evidence_number(value: float, unit: str) -> SafeString:
    """A number of the evidence with its unit: a fraction as a percent (the stored number in
    the hint), seconds as a duration (the stored seconds in the hint: "5.3 h", never
    "19,060.1 (5.3 h)"), a unit after the number."""
    if unit == "fraction" and 0 <= value <= 1:
        return format_html(
            '<span class="num" title="{}">{}</span>', number(value), percent(value, 1)
        )
    if unit == "seconds" and abs(value) >= 90:
        # seconds (wait_s, hold_s, runtime_s): readable, the number as stored in the hint
        return format_html(
            '<span class="num" title="{} s">{}</span>', number(value), duration(value)
        )
    if unit and unit not in ("fraction", "seconds"):
        return format_html('<span class="num">{}</span>&nbsp;{}', number(value), unit)
    return format_html('<span class="num">{}</span>', number(value))


def _more(count: int) -> SafeString:
    if count <= MAX_ROWS:
        return mark_safe("")
    return format_html(' <span class="more">… and {} more</span>', count - MAX_ROWS)


# -- audit trail ---------------------------------------------------------------------------------

# What each step of a recommendation's audit trail did, for people (the stored id in the tooltip).
AUDIT_ACTIONS: dict[str, Any] = {
    "request": _("Asked for approval"),
    "approve": _("Approved"),
    "reject": _("Rejected"),
    "dry-run": _("Dry run"),
    "apply-requested": _("Apply requested"),
    "apply": _("Applied"),
    "apply-dry-run": _("Applied as a dry run (writes off)"),
    "apply-failed": _("Apply failed"),
    "apply-not-sent": _("Apply not sent"),
    "apply-already-in-place": _("Already in place"),
    "apply-rechecked": _("Apply re-checked"),
    "apply-stopped-target-changed": _("Apply stopped: the target changed"),
    "approval-withdrawn-estimate-changed": _("Approval withdrawn: the estimate changed"),
    "expire": _("Expired"),
    "verify": _("Verification"),
    "verified": _("Verified"),
    "rolled-back": _("Rolled back"),
    "rollback-approved": _("Rollback approved"),
    "writes-enabled": _("Writes turned on"),
}


@register.filter
def audit_action(action: Any) -> SafeString:
    """An audit row's action as words (``apply-dry-run`` → "Applied as a dry run (writes
    off)"), the stored id in its tooltip; an id without words is shown as it is."""
    label = AUDIT_ACTIONS.get(str(action))
    if label is None:
        return format_html("<code>{}</code>", action)
    return format_html('<span title="{}">{}</span>', action, label)


# -- links ---------------------------------------------------------------------------------------


@register.simple_tag
def page_query(query: str, page: int) -> str:
    """The query string of page ``page`` that keeps the other parameters (``query``)."""
    return f"?{query}&page={page}" if query else f"?page={page}"
