"""The tree keeps its layers: edge → pure core ← Django around it (README's architecture).

ruff's TID251 rules (diagnosis/core/ruff.toml, diagnosis/edge/ruff.toml) ban the imports at lint
time; these tests check what actually gets loaded, and the import graph as a whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.support.imports import import_cycles, imports_of, own_modules

LOAD_ALL = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    importlib.import_module(module.name)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def top_level_modules_loaded_by(package: str) -> set[str]:
    """Every top-level module loaded by importing all of ``package``, in a fresh interpreter
    with no Django settings."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        [sys.executable, "-c", LOAD_ALL, package],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(result.stdout))


def test_the_core_loads_no_framework_and_no_client_library() -> None:
    loaded = top_level_modules_loaded_by("diagnosis.core")
    forbidden = {"django", "rest_framework", "celery", "redis", "requests", "kubernetes", "gpuobs"}
    assert loaded & forbidden == set()
    assert "pandas" in loaded  # the walk did import the core's modules


def test_the_edge_loads_no_django() -> None:
    loaded = top_level_modules_loaded_by("diagnosis.edge")
    assert loaded & {"django", "rest_framework", "celery", "gpuobs"} == set()
    assert {"kubernetes", "requests"} <= loaded


def test_no_import_cycle_between_gpuobs_modules() -> None:
    assert import_cycles(REPO_ROOT) == []


def test_nothing_in_the_core_or_the_edge_imports_the_django_app() -> None:
    django_side = ("diagnosis.models", "diagnosis.actions", "diagnosis.tasks", "diagnosis.pages")
    wrong = [
        f"{edge.importer} imports {edge.imported} (line {edge.line})"
        for edge in imports_of(REPO_ROOT)
        if edge.importer.startswith(("diagnosis.core", "diagnosis.edge"))
        and (edge.imported.startswith(django_side) or edge.imported.startswith("gpuobs"))
    ]
    assert wrong == []


def test_the_core_never_imports_the_edge() -> None:
    wrong = [
        f"{edge.importer} imports {edge.imported}"
        for edge in imports_of(REPO_ROOT)
        if edge.importer.startswith("diagnosis.core") and edge.imported.startswith("diagnosis.edge")
    ]
    assert wrong == []


LONG_MODULE = 700
WHY_LONG = "# long module:"


@pytest.mark.parametrize("name", sorted(own_modules(REPO_ROOT)))
def test_a_module_over_700_lines_says_why(name: str) -> None:
    text = own_modules(REPO_ROOT)[name].read_text()
    if text.count("\n") > LONG_MODULE:
        assert WHY_LONG in text, f"{name} has over {LONG_MODULE} lines and no {WHY_LONG!r} comment"


def test_the_actions_reach_the_tasks_only_by_name() -> None:
    edges = list(imports_of(REPO_ROOT))
    from_enqueue = [edge.imported for edge in edges if edge.importer == "diagnosis.actions.enqueue"]
    actions_to_tasks = [
        f"{edge.importer} imports {edge.imported} (line {edge.line})"
        for edge in edges
        if edge.importer.startswith("diagnosis.actions") and edge.imported == "diagnosis.tasks"
    ]
    assert from_enqueue == []
    assert actions_to_tasks == []


def test_the_design_is_cited_from_the_repository_only() -> None:
    """Code, templates and docs cite the repository's own docs (docs/architecture.md and the
    docs it links), never a steering file a person who clones the project does not have."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.decode()
    outside = "DESIGN" + ".md"  # spelled apart so that this file does not cite it either
    citing = []
    for name in filter(None, tracked.split("\0")):
        path = REPO_ROOT / name
        if path.suffix in {".mo", ".png", ".pdf", ".gz"} or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if outside in text:
            citing.append(name)
    assert citing == []
    assert (REPO_ROOT / "docs" / "architecture.md").is_file()
