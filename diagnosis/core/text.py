"""A text a person reads, as a message template and its values (docs/ui.md "Language").

A rule gives its finding's summary as a :class:`Text`: ``msgid`` is the English template
(``%(name)s`` placeholders), ``params`` its values -- strings and numbers already formatted as
the English summary shows them ("3.2 h", "42%"), or nested :class:`Text` phrases. The core
renders it in English (:meth:`Text.render`); the pages render it again in the reader's language
from what the finding stores (:meth:`Text.as_json`). Pure: no Django; the templates are marked
with :func:`gettext_noop` so ``makemessages`` extracts them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

# The evidence key under which a finding's stored evidence keeps its summary's template and
# values (:meth:`Text.as_json`); never an evidence row.
SUMMARY_TEXT_KEY = "_summary_text"

Param = Union[str, int, float, "Text"]

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def gettext_noop(message: str) -> str:
    """Marks ``message`` for ``makemessages`` (xgettext knows the name); returns it as is."""
    return message


def _identity(message: str) -> str:
    return message


def placeholders(template: str) -> set[str]:
    """The ``%(name)s`` names a template uses."""
    return set(_PLACEHOLDER.findall(template))


@dataclass(frozen=True, slots=True)
class Text:
    msgid: str
    params: Mapping[str, Param] = field(default_factory=dict)

    def render(self, translate: Callable[[str], str] = _identity) -> str:
        """The text with ``translate`` applied to each template (English without one). A
        translation whose placeholders differ from the template's falls back to the template."""
        values = {
            name: value.render(translate) if isinstance(value, Text) else value
            for name, value in self.params.items()
        }
        template = translate(self.msgid)
        if template != self.msgid and placeholders(template) != placeholders(self.msgid):
            template = self.msgid
        return template % values

    def as_json(self) -> dict[str, Any]:
        return {
            "msgid": self.msgid,
            "params": {
                name: value.as_json() if isinstance(value, Text) else value
                for name, value in self.params.items()
            },
        }

    @classmethod
    def from_json(cls, data: Any) -> Text | None:
        """The text :meth:`as_json` stored, or None for anything else (an old row)."""
        if not isinstance(data, Mapping):
            return None
        msgid, params = data.get("msgid"), data.get("params", {})
        if not isinstance(msgid, str) or not isinstance(params, Mapping):
            return None
        values: dict[str, Param] = {}
        for name, value in params.items():
            if isinstance(value, Mapping):
                nested = cls.from_json(value)
                if nested is None:
                    return None
                values[str(name)] = nested
            elif isinstance(value, str | int | float) and not isinstance(value, bool):
                values[str(name)] = value
            else:
                return None
        return cls(msgid, values)

    def strings(self) -> list[str]:
        """Every string value of the text (nested ones included), for a reader's scoping."""
        found: list[str] = []
        for value in self.params.values():
            if isinstance(value, Text):
                found.extend(value.strings())
            elif isinstance(value, str):
                found.append(value)
        return found

    def map_strings(self, change: Callable[[str], str]) -> Text:
        """The text with ``change`` applied to every string value (nested ones included)."""
        return Text(
            self.msgid,
            {
                name: value.map_strings(change)
                if isinstance(value, Text)
                else change(value)
                if isinstance(value, str)
                else value
                for name, value in self.params.items()
            },
        )


def message(msgid: str, **params: Param) -> Text:
    """``Text(msgid, params)``: the shorthand rules use."""
    return Text(msgid, params)


def no_tenant(tenant: Any) -> Param:
    """A job's tenant as summaries name it: its name, or "no tenant"."""
    return tenant if tenant else Text(gettext_noop("no tenant"))
