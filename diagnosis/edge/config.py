"""Declared settings of an integration (netbox's data backends: ``parameters`` and
``sensitive_parameters``).

An adapter or a source declares its keys once, as a :class:`ConfigSpec`; one validator
(:meth:`ConfigSpec.parse`) uses that declaration both when an admin saves a cluster and when a
cycle starts. A key marked ``secret`` holds a *reference* to a secret (an environment variable's
name, a file under the secrets directory), never the secret itself, and is never shown back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from diagnosis.edge import secrets
from diagnosis.edge.errors import SIDES, ConfigError

REQUIRED: Any = object()  # the default of a key that must be given

# JSON types a key may take, with the words an error uses for them.
TYPE_WORDS: dict[type, str] = {
    str: "a string",
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    list: "a list",
    dict: "an object",
}


@dataclass(frozen=True)
class Setting:
    """One key of a config: its JSON type, default, whether it names a secret, what it means.

    ``check`` takes the value (already of ``kind``) and returns it normalized, or raises
    ``ValueError`` with a message saying what is wrong (the key is added by the validator).

    ``reference`` says what a value refers to (:mod:`diagnosis.edge.secrets`): ``"env"`` (the
    default of a ``secret`` key) an environment variable named ``GPUOBS_SECRET_*``, ``"file"`` a
    file under the deployment's secrets directory. A value other than the declared default must
    be such a reference: a database row can name no other variable or file of the server.
    """

    key: str
    kind: type | tuple[type, ...]
    default: Any = None
    help: str = ""
    secret: bool = False
    choices: tuple[Any, ...] = ()
    check: Callable[[Any], Any] | None = None
    reference: str = ""

    @property
    def refers_to(self) -> str:
        return self.reference or ("env" if self.secret else "")

    def check_reference(self, value: Any) -> None:
        """Raise ValueError unless ``value`` is an allowed reference (or the code's default)."""
        kind = self.refers_to
        if not kind or not isinstance(value, str) or not value or value == self.default:
            return
        if kind == "env":
            secrets.check_env_reference(value)
        else:
            secrets.check_file_reference(value)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def kinds(self) -> tuple[type, ...]:
        return self.kind if isinstance(self.kind, tuple) else (self.kind,)

    def describe_kind(self) -> str:
        return " or ".join(TYPE_WORDS.get(k, k.__name__) for k in self.kinds())


def _is_kind(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # JSON true/false is no number
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return isinstance(value, kinds)


@dataclass(frozen=True)
class ConfigSpec:
    """The keys an integration accepts. Unknown keys are refused (a typo must not silently fall
    back to a default); every problem of a config is reported at once, each naming its key."""

    settings: tuple[Setting, ...] = ()
    what: str = "config"
    by_key: dict[str, Setting] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_key: dict[str, Setting] = {}
        for setting in self.settings:
            if setting.key in by_key:
                raise ValueError(f"{self.what}: key {setting.key!r} declared twice")
            by_key[setting.key] = setting
        object.__setattr__(self, "by_key", by_key)

    @property
    def side(self) -> str | None:
        """Whose settings these are: the scheduler's (``scheduler_config``) or the metrics
        source's (``metrics_config``); what a :class:`ConfigError` of them says it is of."""
        return SIDES.get(self.what)

    @property
    def secret_keys(self) -> frozenset[str]:
        return frozenset(s.key for s in self.settings if s.secret)

    def problems(self, raw: Any) -> list[str]:
        """What is wrong with ``raw`` (empty when it is valid)."""
        try:
            self.parse(raw)
        except ConfigError as exc:
            return exc.problems
        return []

    def parse(self, raw: Any) -> dict[str, Any]:
        """Every declared key with its value (given, normalized, or the default), or
        :class:`ConfigError` listing every problem."""
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError("expected an object of settings", what=self.what, side=self.side)
        problems = [
            f"{key}: unknown setting (known: {', '.join(sorted(self.by_key)) or 'none'})"
            for key in sorted(set(raw) - set(self.by_key), key=str)
        ]
        values: dict[str, Any] = {}
        for setting in self.settings:
            if setting.key not in raw or raw[setting.key] is None:
                if setting.required:
                    problems.append(f"{setting.key}: required")
                else:
                    values[setting.key] = setting.default
                continue
            value = raw[setting.key]
            if not _is_kind(value, setting.kinds()):
                problems.append(f"{setting.key}: expected {setting.describe_kind()}")
                continue
            if setting.choices and value not in setting.choices:
                allowed = ", ".join(map(str, setting.choices))
                problems.append(f"{setting.key}: one of {allowed}, got {value!r}")
                continue
            try:
                setting.check_reference(value)
            except ValueError as exc:
                problems.append(f"{setting.key}: {exc}")
                continue
            if setting.check is not None:
                try:
                    value = setting.check(value)
                except ValueError as exc:
                    problems.append(f"{setting.key}: {exc}")
                    continue
            values[setting.key] = value
        if problems:
            raise ConfigError(problems, what=self.what, side=self.side)
        return values

    def redacted(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """``raw`` with the values of secret keys replaced (for pages and logs)."""
        return {k: ("•••" if k in self.secret_keys and v else v) for k, v in raw.items()}
