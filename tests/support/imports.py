"""The import graph of gpuobs's own modules, read with :mod:`ast` (nothing is imported)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("diagnosis", "gpuobs")


@dataclass(frozen=True)
class ModuleImport:
    importer: str
    imported: str
    line: int
    top_level: bool  # False: inside a function (a lazy import)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def own_modules(root: Path) -> dict[str, Path]:
    """Every module of the gpuobs packages (migrations excluded), by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" not in path.parts:
                found[module_name(root, path)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(root: Path) -> Iterator[ModuleImport]:
    """Each import of one own module by another: ``from a.b import c`` counts as ``a.b.c`` when
    that is a module, else as ``a.b``. Imports inside functions count like any other: a lazy
    import hides a cycle from Python's loader, not from the layout (work the actions start
    reaches the tasks by name, ``diagnosis.actions.enqueue``)."""
    modules = own_modules(root)
    for importer, path in modules.items():
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        nested = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{alias.name}" for alias in node.names] or [node.module]
                targets = [t if t in modules else node.module for t in targets]
            if not targets:
                continue
            top_level = id(node) not in nested
            for target in targets:
                resolved = _resolve(target, modules)
                if resolved and resolved != importer:
                    yield ModuleImport(importer, resolved, node.lineno, top_level)


def import_cycles(root: Path) -> list[list[str]]:
    """The import cycles between own modules (imports inside functions included): strongly connected
    components of more than one module, each sorted."""
    graph: dict[str, set[str]] = {name: set() for name in own_modules(root)}
    for edge in imports_of(root):
        # a package's __init__ importing its own submodules is not a cycle of the layout
        graph[edge.importer].add(edge.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:  # Tarjan's algorithm
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(components)
