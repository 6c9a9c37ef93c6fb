"""The generator registry: every module of ``diagnosis.recommend`` that defines ``GENERATOR`` is a
recommendation generator, keyed by its stable id."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from diagnosis.recommend.base import Generator


class DuplicateGeneratorError(RuntimeError):
    """Two generator modules claim the same id: a start-up error."""


def collect(generators: list[Generator]) -> dict[str, Generator]:
    registry: dict[str, Generator] = {}
    for generator in generators:
        if generator.id in registry:
            raise DuplicateGeneratorError(f"generator id {generator.id!r} is defined twice")
        registry[generator.id] = generator
    return registry


@cache
def all_generators() -> dict[str, Generator]:
    """Every generator, keyed by its stable id, in module-name order."""
    package = importlib.import_module("diagnosis.recommend")
    found: list[Generator] = []
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"diagnosis.recommend.{module_info.name}")
        generator = getattr(module, "GENERATOR", None)
        if isinstance(generator, Generator):
            found.append(generator)
    return collect(found)
