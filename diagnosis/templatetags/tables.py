"""``{% load tables %}``: a sortable column header (diagnosis/pages/support/sorting.py)."""

from __future__ import annotations

from typing import Any

from django import template

from diagnosis.pages.support.sorting import TableSort

register = template.Library()


@register.inclusion_tag("diagnosis/includes/sort_header.html")
def sort_header(table: TableSort, key: str, label: Any, numeric: bool = False) -> dict[str, Any]:
    """``<th>`` of column ``key``: a link that sorts the table by it (again: the other way),
    ``aria-sort`` and an arrow on the current column."""
    return {
        "label": label,
        "href": table.link(key),
        "aria": table.aria(key),
        "numeric": numeric,
        "key": key,
    }
