"""The generator registry: every module of ``diagnosis.core.recommend.builtin`` that defines
``GENERATOR`` is a recommendation generator, keyed by its stable id (a
:class:`~diagnosis.core.plugins.Registry`)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from diagnosis.core import plugins
from diagnosis.core.recommend.base import Generator


class DuplicateGeneratorError(plugins.DuplicatePluginError):
    """Two generator modules claim the same id: a start-up error."""


def collect(generators: Iterable[Generator]) -> plugins.Registry[Generator]:
    return plugins.Registry(generators, what="generator", error=DuplicateGeneratorError)


@cache
def all_generators() -> plugins.Registry[Generator]:
    """Every generator, keyed by its stable id, in module-name order."""
    return collect(plugins.discover("diagnosis.core.recommend.builtin", "GENERATOR", Generator))
