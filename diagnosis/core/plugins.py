"""Plugin discovery shared by the registries (rules, recommendation generators): every module of
a package that defines the agreed attribute is a plugin, keyed by its stable ``id``; two plugins
with one id are an error (raised at start-up by the registry that asks)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import TypeVar

Plugin = TypeVar("Plugin")


class DuplicatePluginError(RuntimeError):
    """Two plugins claim the same id."""


def collect(
    plugins: Iterable[Plugin], *, what: str, error: type[DuplicatePluginError]
) -> dict[str, Plugin]:
    """The plugins keyed by id, in the order given; a repeated id raises ``error``."""
    registry: dict[str, Plugin] = {}
    for plugin in plugins:
        plugin_id = plugin.id  # type: ignore[attr-defined]
        if plugin_id in registry:
            raise error(f"{what} id {plugin_id!r} is defined twice")
        registry[plugin_id] = plugin
    return registry


def discover(package_name: str, attribute: str, kind: type[Plugin]) -> list[Plugin]:
    """The ``attribute`` of every module of the package that has one of type ``kind``, in
    module-name order."""
    package = importlib.import_module(package_name)
    found: list[Plugin] = []
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package_name}.{module_info.name}")
        plugin = getattr(module, attribute, None)
        if isinstance(plugin, kind):
            found.append(plugin)
    return found
