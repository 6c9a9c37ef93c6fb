"""Views named by their dotted path in the URLconfs and imported on their first request (#35).

Importing a URLconf (every ``manage.py`` command's system checks, every process's first
``reverse``) then loads no page module, and with them none of pandas, plotly, reportlab or the
recommendation workflow: a command pays for what it runs. The middleware reads a view's marks
(``login_required``, ``csrf_exempt``) from the view itself, which imports it then; a ``reverse``
reads only its dotted name (``__module__``, ``__qualname__``), which imports nothing.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyView:
    """The view ``"package.module:name"`` (a function view, or a class view's ``as_view(**kw)``),
    imported on first use."""

    def __init__(self, target: str, **initkwargs: Any) -> None:
        module, colon, name = target.partition(":")
        if not colon or not module or not name:
            raise ValueError(f"view {target!r} must look like package.module:name")
        self.__module__ = module
        self.__name__ = self.__qualname__ = name
        self._initkwargs = initkwargs
        self._view: Any = None

    def load(self) -> Any:
        if self._view is None:
            found = getattr(importlib.import_module(self.__module__), self.__name__)
            self._view = found.as_view(**self._initkwargs) if isinstance(found, type) else found
        return self._view

    def __call__(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return self.load()(request, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # the view's own marks, read by the middleware at request time; Django's URL resolver
        # asks for view_class only to name the view, which __module__/__qualname__ already do
        if name.startswith("__") or name in {"view_class", "_view", "_initkwargs"}:
            raise AttributeError(name)
        return getattr(self.load(), name)

    def __repr__(self) -> str:
        return f"LazyView({self.__module__}:{self.__name__})"


def lazy(target: str, **initkwargs: Any) -> LazyView:
    """``path("x/", lazy("diagnosis.pages.jobs:job_list"), name=...)``."""
    return LazyView(target, **initkwargs)
