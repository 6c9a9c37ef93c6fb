"""Start-up imports what a process needs, not every library of gpuobs (issue #35): ``manage.py
check`` and importing the URLconf load no pandas, plotly, reportlab or ``redis.asyncio``; the
views are imported on their first request (diagnosis/lazy_views.py), and every one of them can
be; the web and worker processes still build the rule registries at their start."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from diagnosis.lazy_views import LazyView
from tests.conftest import REPO_ROOT

# and redis.asyncio; opentelemetry: tracing is off by default (gpuobs/tracing.py)
HEAVY = ("pandas", "numpy", "plotly", "reportlab", "scipy", "opentelemetry")

LOADED_AFTER = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
{body}
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in {top}
                        or name == "redis.asyncio")), file=sys.stderr)
"""


def loaded_after(body: str) -> set[str]:
    """The modules of :data:`HEAVY` (and ``redis.asyncio``) in ``sys.modules`` after ``body`` ran
    in a fresh interpreter."""
    script = LOADED_AFTER.format(body=body, top=sorted(HEAVY))
    return set(json.loads(last_stderr_line(script)))


def last_stderr_line(script: str) -> str:
    """The last line ``script`` wrote to stderr, run in a fresh interpreter at the repository."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stderr.strip().splitlines()[-1]


def test_manage_py_check_loads_no_data_chart_report_or_async_redis_library() -> None:
    loaded = loaded_after(
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(['manage.py', 'check'])"
    )
    assert loaded == set()


def test_importing_the_urlconf_loads_none_of_them_either() -> None:
    loaded = loaded_after(
        "import django\ndjango.setup()\n"
        "from django.urls import get_resolver, reverse\n"
        "get_resolver().url_patterns\n"
        "reverse('diagnosis:cluster', args=['x'])\n"  # a reverse names views, imports none
        "reverse('api-v1:cluster-list')"
    )
    assert loaded == set()


def test_loading_a_view_imports_what_it_needs() -> None:
    # the test itself can fail: loading one view does import what it needs
    loaded = loaded_after(
        "import django\ndjango.setup()\n"
        "from diagnosis.lazy_views import LazyView\n"
        "LazyView('diagnosis.pages.clusters:cluster_overview').load()"
    )
    assert {"pandas", "plotly"} <= {m.split(".")[0] for m in loaded}


def test_the_web_process_builds_the_rule_registries_at_its_start() -> None:
    loaded = loaded_after(
        "import gpuobs.wsgi\n"
        "from diagnosis.core.rules.registry import all_rules\n"
        "from diagnosis.core.recommend.registry import all_generators\n"
        "assert all_rules.cache_info().currsize == 1, 'rules not built'\n"
        "assert all_generators.cache_info().currsize == 1, 'generators not built'"
    )
    assert "pandas" in loaded


def lazy_views(patterns, prefix: str = "") -> list[tuple[str, LazyView]]:
    found = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found += lazy_views(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern) and isinstance(pattern.callback, LazyView):
            found.append((prefix + str(pattern.pattern), pattern.callback))
    return found


def test_every_view_named_by_its_path_exists() -> None:
    views = lazy_views(get_resolver().url_patterns)
    assert len(views) > 30
    for route, view in views:
        assert callable(view.load()), route
        # the marks the middleware reads come from the view itself
        assert getattr(view, "login_required", True) is getattr(view.load(), "login_required", True)


def test_a_misnamed_view_is_refused() -> None:
    with pytest.raises(ValueError, match=r"package\.module:name"):
        LazyView("diagnosis.pages.jobs.job_list")


@pytest.mark.parametrize("argv", [["check"], ["snapshot", "validate", "missing.json"]])
def test_manage_py_leaves_its_objects_frozen_for_the_exit_even_when_the_command_fails(argv):
    script = (
        "import gc, sys\nsys.path.insert(0, '.')\nimport manage\n"
        f"sys.argv = ['manage.py', *{argv!r}]\n"
        "try:\n    manage.main()\nexcept SystemExit:\n    pass\n"
        "print(gc.get_freeze_count(), file=sys.stderr)"
    )
    assert int(last_stderr_line(script)) > 10_000
