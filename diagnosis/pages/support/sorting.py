"""The one way a table is sorted from its column headers (docs/ui.md "Sorting and filtering
tables"): ``?sort=KEY`` ascending, ``?sort=-KEY`` descending, in the URL with the page's filters,
so a link, a reload and the page links keep it. A header link keeps every other parameter but
``page`` (a new order starts at page 1); ``templates/diagnosis/includes/sort_header.html``
draws it (``{% sort_header table "util" _("Mean util") %}`` of ``{% load tables %}``).

Pages pass the keys they know; anything else is their default order, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.http import QueryDict

T = TypeVar("T")


@dataclass(frozen=True)
class TableSort:
    """The order a table is shown in: ``key`` (one the page knows), ``descending``, and the
    query string of the page's other parameters (``page`` left out) for the header links."""

    key: str
    descending: bool
    others: str
    descending_first: frozenset[str] = frozenset()

    @classmethod
    def parse(
        cls,
        query: QueryDict,
        keys: Collection[str],
        default: str,
        *,
        descending_first: Collection[str] = (),
    ) -> TableSort:
        """``?sort=`` read against ``keys``: the default order (``-KEY`` for descending) when
        missing or unknown. ``descending_first``: the keys a first click sorts largest first
        (counts and figures: the biggest is what one looks for)."""
        text = (query.get("sort") or "").strip()
        key = text.removeprefix("-")
        if key not in keys:
            text = default
            key = default.removeprefix("-")
        others = query.copy()
        for name in ("sort", "page"):
            others.pop(name, None)
        return cls(key, text.startswith("-"), others.urlencode(), frozenset(descending_first))

    @property
    def param(self) -> str:
        """The ``sort`` value of this order."""
        return f"-{self.key}" if self.descending else self.key

    def link(self, key: str) -> str:
        """The query string (with its ``?``) that sorts by ``key``: the other direction when it
        is the current key, else its first direction."""
        descending = not self.descending if key == self.key else key in self.descending_first
        value = f"-{key}" if descending else key
        return f"?{self.others}&sort={value}" if self.others else f"?sort={value}"

    def aria(self, key: str) -> str:
        """``aria-sort`` of the column ``key``."""
        if key != self.key:
            return "none"
        return "descending" if self.descending else "ascending"

    def apply(
        self, rows: Sequence[T], orders: dict[str, Callable[[T], Any]], tie: Callable[[T], Any]
    ) -> list[T]:
        """``rows`` sorted by this order (``orders[key]`` gives a row's sort value; rows whose
        value is None come last either way), ties broken by ``tie`` ascending."""
        value = orders[self.key]
        known = [r for r in rows if value(r) is not None]
        unknown = [r for r in rows if value(r) is None]
        known.sort(key=tie)
        known.sort(key=value, reverse=self.descending)  # stable: ties keep ``tie`` order
        unknown.sort(key=tie)
        return known + unknown
