"""The one way a list page is cut into pages (``templates/diagnosis/pagination.html`` draws the
links)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest


def paginate(
    request: HttpRequest, items: QuerySet[Any] | Sequence[Any], per_page: int
) -> tuple[Page, str]:
    """The page of ``items`` that ``?page=`` asks for (the last for a number past the end, the
    first for anything else), and the query string of the other parameters, for the page links."""
    page = Paginator(items, per_page).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return page, query.urlencode()
