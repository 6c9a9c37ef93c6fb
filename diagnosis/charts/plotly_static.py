"""plotly.js served from our own static files (``vendor/plotly.min.js``), never a CDN: the
:class:`PlotlyJsFinder` finds the copy the installed ``plotly`` package ships, so the figures and
the library that draws them always come from the same pinned release."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.contrib.staticfiles.finders import BaseFinder
from django.core import checks
from django.core.files.storage import FileSystemStorage

PLOTLY_JS_STATIC_PATH = "vendor/plotly.min.js"


def plotly_js_path() -> Path:
    """Where the installed plotly package keeps its plotly.min.js."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        return Path("plotly-is-not-installed/package_data/plotly.min.js")
    return Path(spec.origin).parent / "package_data" / "plotly.min.js"


class PlotlyJsFinder(BaseFinder):
    """A static-files finder for exactly one file: ``vendor/plotly.min.js``, taken from the
    installed plotly package (``plotly/package_data/plotly.min.js``).

    ``collectstatic`` copies it (whitenoise then hashes and compresses it) and the embedded mode
    serves it through the finders, so the repository holds no copy of a 4.6 MB minified file and
    nothing else of ``package_data`` (datasets, widget bundle) ends up in the static files.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.path = plotly_js_path()
        prefix, _, self.name = PLOTLY_JS_STATIC_PATH.rpartition("/")
        self.storage = FileSystemStorage(location=str(self.path.parent))
        self.storage.prefix = prefix

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        if self.path.is_file():
            return []
        return [
            checks.Error(
                f"plotly.min.js not found at {self.path}",
                hint="Install the pinned requirements (pip install -r requirements.txt).",
                id="gpuobs.E001",
            )
        ]

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        find_all = kwargs.get("all", find_all)  # the name Django < 5.2 used
        match = str(self.path) if path == PLOTLY_JS_STATIC_PATH and self.path.is_file() else ""
        if find_all:
            return [match] if match else []
        return match

    def list(self, ignore_patterns: Iterable[str] | None):
        if self.path.is_file():
            yield self.name, self.storage
