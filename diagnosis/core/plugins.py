"""The one registry style of gpuobs, for rules, recommendation generators, scheduler adapters
and metric sources (sentry's ``utils/registry.py``; healthchecks' ``TRANSPORTS``).

A :class:`Registry` holds plugins keyed by a stable ``id``, in the order they were added; a
second plugin with an id already taken is a :class:`DuplicatePluginError` when the registry is
built (at start-up). Plugins are either *discovered* (every module of a package that defines
the agreed attribute, :func:`discover`: the rules and generators) or *declared* in one place
(the adapters and sources, whose order the model's ``choices`` keep). The model ``choices`` of a
registry come from :meth:`Registry.choices`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

Plugin = TypeVar("Plugin")


class DuplicatePluginError(RuntimeError):
    """Two plugins claim the same id."""


class Registry(Generic[Plugin]):
    """Plugins by id, in the order given; ``what`` names them in errors ("rule", "adapter")."""

    def __init__(
        self,
        plugins: Iterable[Plugin],
        *,
        what: str,
        error: type[DuplicatePluginError] = DuplicatePluginError,
    ) -> None:
        self.what = what
        self._plugins: dict[str, Plugin] = {}
        for plugin in plugins:
            plugin_id = plugin.id  # type: ignore[attr-defined]
            if plugin_id in self._plugins:
                raise error(f"{what} id {plugin_id!r} is defined twice")
            self._plugins[plugin_id] = plugin

    def __getitem__(self, plugin_id: str) -> Plugin:
        try:
            return self._plugins[plugin_id]
        except KeyError:
            known = ", ".join(self._plugins)
            raise KeyError(f"unknown {self.what} {plugin_id!r} (known: {known})") from None

    def __contains__(self, plugin_id: object) -> bool:
        return plugin_id in self._plugins

    def __iter__(self) -> Iterator[str]:
        return iter(self._plugins)

    def __len__(self) -> int:
        return len(self._plugins)

    def get(self, plugin_id: str, default: Plugin | None = None) -> Plugin | None:
        return self._plugins.get(plugin_id, default)

    def items(self) -> Iterable[tuple[str, Plugin]]:
        return self._plugins.items()

    def values(self) -> Iterable[Plugin]:
        return self._plugins.values()

    def as_dict(self) -> dict[str, Plugin]:
        return dict(self._plugins)

    def choices(self) -> list[tuple[str, str]]:
        """``(id, label)`` pairs for a model field's ``choices``."""
        return [(pid, getattr(p, "label", pid)) for pid, p in self._plugins.items()]


def collect(
    plugins: Iterable[Plugin], *, what: str, error: type[DuplicatePluginError]
) -> dict[str, Plugin]:
    """The plugins keyed by id, in the order given; a repeated id raises ``error``."""
    return Registry(plugins, what=what, error=error).as_dict()


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
