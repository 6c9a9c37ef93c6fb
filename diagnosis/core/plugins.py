"""The one registry style of gpuobs, for rules, recommendation generators, scheduler adapters
and metric sources (sentry's ``utils/registry.py``; healthchecks' ``TRANSPORTS``).

A :class:`Registry` holds plugins keyed by a stable ``id``, in the order they were added; a
second plugin with an id already taken is a :class:`DuplicatePluginError` when the registry is
built (at start-up: the web and worker processes build the rules' and generators', the models'
choices the adapters' and sources'). Plugins are either *discovered*
(every module of a package that defines the agreed attribute, :func:`discover`: the rules and
generators) or *declared* in one place (the adapters and sources, whose order the model's
``choices`` keep); a declared plugin names its code as ``"module:attribute"``, imported on first
use (:func:`load`), so one integration's missing dependency never breaks the others. The model
``choices`` of a registry come from :meth:`Registry.choices`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import Any, TypeVar

Plugin = TypeVar("Plugin")


class DuplicatePluginError(RuntimeError):
    """Two plugins claim the same id."""


class Registry(dict[str, Plugin]):
    """Plugins by id, in the order given; ``what`` names them in errors ("rule", "adapter").

    A plain mapping once built (it is a ``dict``: the engine and the pages read it like one, and
    a test may swap one entry for the length of the test); only building it checks the ids.
    """

    def __init__(
        self,
        plugins: Iterable[Plugin] = (),
        *,
        what: str,
        error: type[DuplicatePluginError] = DuplicatePluginError,
    ) -> None:
        super().__init__()
        self.what = what
        for plugin in plugins:
            plugin_id = plugin.id  # type: ignore[attr-defined]
            if plugin_id in self:
                raise error(f"{what} id {plugin_id!r} is defined twice")
            self[plugin_id] = plugin

    def __missing__(self, plugin_id: str) -> Plugin:
        known = ", ".join(self)
        raise KeyError(f"unknown {self.what} {plugin_id!r} (known: {known})")

    def as_dict(self) -> dict[str, Plugin]:
        return dict(self)

    def choices(self) -> list[tuple[str, str]]:
        """``(id, label)`` pairs for a model field's ``choices``."""
        return [(pid, getattr(p, "label", pid)) for pid, p in self.items()]


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


def load(target: str) -> Any:
    """The object a declared plugin names, ``"package.module:attribute"``, imported now (an
    ``ImportError`` of the module, e.g. its client library missing, is the caller's to word)."""
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(f"plugin target {target!r} must look like package.module:attribute")
    return getattr(importlib.import_module(module_name), attribute)
