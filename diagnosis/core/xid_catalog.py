"""What an Xid code means and what to do about it: gpuobs's Xid catalog.

The facts come from NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/, "Analyzing
Xid Errors with the Xid Catalog"), through leptonai/gpud's generated copy of it (Apache-2.0), as
collected in ``../shared/data/xid/xid_catalog.csv``. ``scripts/build_xid_catalog.py`` turns that
CSV into ``diagnosis/core/data/xid_catalog.json``, which this module reads once. NVIDIA's immediate
action is normalised to an action class (``none``, ``restart-app``, ``reset-gpu``,
``reboot-node``, ``service``, ``check-...``); an Xid is *critical* when its action needs a GPU
reset, a node reboot or service (docs/rules.md), *warning* otherwise. See ``docs/xid.md``.

Pure: no Django, no I/O beyond reading the packaged JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

CATALOG_PATH = Path(__file__).resolve().parent / "data" / "xid_catalog.json"
UNKNOWN_MEANING = "unknown Xid, see NVIDIA docs (https://docs.nvidia.com/deploy/xid-errors/)"

XidSeverity = Literal["warning", "critical"]


@dataclass(frozen=True)
class XidInfo:
    code: int
    name: str
    meaning: str
    action: str
    action_text: str
    app_level: bool
    severity: XidSeverity
    known: bool = True
    nvidia_immediate: str | None = None
    nvidia_investigatory: str | None = None
    recommended_action: str | None = None
    source: str | None = None

    @property
    def critical(self) -> bool:
        return self.severity == "critical"

    def as_dict(self) -> dict[str, Any]:
        """The fields a finding's evidence shows (JSON-ready)."""
        return {
            "code": self.code,
            "name": self.name,
            "meaning": self.meaning,
            "action": self.action,
            "action_text": self.action_text,
            "nvidia_immediate": self.nvidia_immediate,
            "nvidia_investigatory": self.nvidia_investigatory,
            "app_level": self.app_level,
            "severity": self.severity,
            "known": self.known,
        }


@cache
def _catalog() -> dict[int, XidInfo]:
    document = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    return {
        entry["code"]: XidInfo(
            code=entry["code"],
            name=entry["name"],
            meaning=entry["meaning"],
            action=entry["action"],
            action_text=entry["action_text"],
            app_level=entry["app_level"],
            severity=entry["severity"],
            nvidia_immediate=entry.get("nvidia_immediate"),
            nvidia_investigatory=entry.get("nvidia_investigatory"),
            recommended_action=entry.get("recommended_action"),
            source=entry.get("source"),
        )
        for entry in document["xids"]
    }


def all_codes() -> list[int]:
    """Every Xid code the catalog knows, ascending."""
    return sorted(_catalog())


def lookup(code: int) -> XidInfo:
    """The catalog entry of an Xid code; an unknown code gets a warning-level placeholder."""
    info = _catalog().get(int(code))
    if info is not None:
        return info
    return XidInfo(
        code=int(code),
        name=f"XID_{int(code)}",
        meaning=UNKNOWN_MEANING,
        action="check-docs",
        action_text="Look the code up in NVIDIA's Xid documentation and the driver release notes.",
        app_level=False,
        severity="warning",
        known=False,
    )


def is_critical(code: int) -> bool:
    """Whether NVIDIA's action for the code needs a GPU reset, a node reboot or service."""
    return lookup(code).critical


def is_application_level(code: int) -> bool:
    """Whether the Xid is usually caused by the application (e.g. 13, 31, 43), not the GPU."""
    return lookup(code).app_level


def critical_codes() -> frozenset[int]:
    return frozenset(code for code, info in _catalog().items() if info.critical)


def drains_node(code: int) -> bool:
    """Whether the code alone justifies draining its node: critical and not application-level
    (the drain class: 48, 64, 74, 79, 95, 119, ...; docs/recommendations.md "drain-node")."""
    return is_critical(code) and not is_application_level(code)


def drain_class() -> frozenset[int]:
    """Every catalogued code of the drain class (:func:`drains_node`)."""
    return frozenset(code for code in _catalog() if drains_node(code))
