"""Build gpuobs's Xid catalog (``diagnosis/core/data/xid_catalog.json``) from the shared Xid facts.

The input is ``../shared/data/xid/xid_catalog.csv`` (or ``$GPUOBS_SHARED_DATA/xid/...``): 173 Xid
codes taken from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, "Analyzing Xid Errors
with the Xid Catalog") through leptonai/gpud's generated copy (Apache-2.0), with gpud's own
severity / likely-cause classification and dcgm-exporter's error text beside them.

The output is the project's own catalog: per code NVIDIA's mnemonic and description, NVIDIA's
immediate action normalised to one of :data:`ACTION_CLASSES`, whether the Xid is usually caused by
the application, and the severity gpuobs gives it (critical when the action needs a GPU reset, a
node reboot or service: docs/rules.md). See ``docs/xid.md``.

    python scripts/build_xid_catalog.py            # rewrite diagnosis/core/data/xid_catalog.json
    python scripts/build_xid_catalog.py --check    # exit 1 when the committed JSON is stale
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "diagnosis" / "core" / "data" / "xid_catalog.json"
CATALOG_FORMAT = "gpuobs.xid_catalog/v1"

# Action class -> (critical?, what to do, in our words). Critical = needs a GPU reset, a node
# reboot or service (docs/rules.md); a physical check of the machine is service too.
ACTION_CLASSES: dict[str, tuple[bool, str]] = {
    "none": (False, "No action needed for this Xid alone; watch for repeats."),
    "restart-app": (False, "Restart the application (its GPU context is lost)."),
    "check-app": (False, "Check the application, CUDA and driver versions on this GPU."),
    "check-other-xids": (False, "Follow the Xid reported with it; alone, restart Fabric Manager."),
    "check-recovery-action": (
        False,
        "Read the Xid 154 message: it names the recovery the GPU now needs (e.g. reset, reboot).",
    ),
    "update-software": (False, "Update the GPU driver / firmware (vGPU)."),
    "reset-gpu": (True, "Drain the GPU's jobs and reset the GPU (nvidia-smi -r) or reboot."),
    "reboot-node": (True, "Drain the node and reboot it (a cold restart of the machine)."),
    "check-hardware": (True, "Drain the node and have the hardware inspected (power, seating)."),
    "service": (True, "Drain the node and contact NVIDIA support / open a service case."),
}

# NVIDIA's "Resolution Bucket (Immediate Action)" -> action class. An unknown bucket is an error:
# a new catalog must be mapped on purpose, never guessed.
IMMEDIATE_ACTIONS: dict[str, str] = {
    "IGNORE": "none",
    "RESTART_APP": "restart-app",
    "CHECK_UVM": "check-app",
    "WORKFLOW_XID_45": "check-other-xids",
    "XID_154": "check-recovery-action",
    "UPDATE_SWFW": "update-software",
    "RESET_GPU": "reset-gpu",
    # NVIDIA's Xid 48 (double-bit ECC) and NVLink workflows recover the GPU by resetting it.
    "WORKFLOW_XID_48": "reset-gpu",
    "WORKFLOW_NVLINK_ERR": "reset-gpu",
    "WORKFLOW_NVLINK5_ERR": "reset-gpu",
    "RESTART_BM": "reboot-node",
    "RESTART_VM": "reboot-node",
    "CHECK_MECHANICALS": "check-hardware",
    "CONTACT_SUPPORT": "service",
}

# gpud's repair actions, used only where NVIDIA lists no immediate action (N/A or absent); the
# most severe one wins.
GPUD_REPAIR_ACTIONS: dict[str, str] = {
    "RebootSystem": "reboot-node",
    "HardwareInspection": "check-hardware",
    "CheckUserAppAndGPU": "check-app",
    "IgnoreNoActionRequired": "none",
}
GPUD_PRECEDENCE = ("RebootSystem", "HardwareInspection", "CheckUserAppAndGPU")

# NVIDIA's investigatory buckets that point at the application rather than the GPU.
APP_INVESTIGATIONS = frozenset({"CHECK_APP/CUDA", "WORKFLOW_XID_13", "WORKFLOW_XID_31"})
# Codes that are application-level although their buckets alone do not say so: Xid 45 is logged
# when the driver tears down a GPU context because the process was killed or exited (NVIDIA's Xid
# table lists "user application" / "system action" as its causes).
APP_LEVEL_CODES = frozenset({45})

INVESTIGATIONS: dict[str, str] = {
    "CONTACT_SUPPORT": "contact NVIDIA support if it repeats",
    "CHECK_APP/CUDA": "check the application and its CUDA version",
    "WORKFLOW_XID_13": "if it repeats on the same GPC/TPC, run DCGM diagnostics (hardware)",
    "WORKFLOW_XID_31": "if it repeats with a known-good application, run DCGM diagnostics",
    "WORKFLOW_XID_48": "check the retired pages / remapped rows; replace the GPU if they grow",
    "WORKFLOW_NVLINK5_ERR": "follow NVIDIA's NVLink5 error workflow",
    "INVESTIGATE_SW": "investigate the driver and firmware versions",
    "INVESTIGATE_SW_USER": "investigate the driver and the application",
    "INVESTIGATE_LINK_SI": "investigate the link's signal integrity",
    "XID_137_FLOW": "follow NVIDIA's Xid 137 workflow",
    "SYMPATHETIC_REPORT_SOLO": "report it if it occurs alone",
    "UPDATE_SWFW": "update the driver / firmware",
}

_NVIDIA = re.compile(r"NVIDIA immediate=(?P<immediate>.*?); NVIDIA investigatory=(?P<inv>.*?)\s*$")


def default_csv() -> Path:
    base = os.environ.get("GPUOBS_SHARED_DATA")
    root = Path(base) if base else REPO_ROOT.parent / "shared" / "data"
    return root / "xid" / "xid_catalog.csv"


def _clean(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None


def parse_recommendation(text: str | None) -> tuple[str | None, str | None, list[str]]:
    """``(immediate, investigatory, gpud_repair_actions)`` from the CSV's recommended_action."""
    immediate = investigatory = None
    repairs: list[str] = []
    for part in (text or "").split(" ; "):
        part = part.strip()
        if not part:
            continue
        if part.startswith("gpud repair_actions="):
            repairs = [a for a in part.split("=", 1)[1].split("|") if a]
            continue
        match = _NVIDIA.fullmatch(part)
        if match is None:
            raise ValueError(f"cannot parse recommended_action part {part!r}")
        immediate = match["immediate"].strip()
        investigatory = match["inv"].strip()
    return immediate, investigatory, repairs


def classify(
    code: int, immediate: str | None, investigatory: str | None, repairs: list[str]
) -> tuple[str, str]:
    """``(action class, source of the action: "nvidia" or "gpud")``."""
    if immediate and immediate != "N/A":
        if immediate not in IMMEDIATE_ACTIONS:
            raise ValueError(f"Xid {code}: unmapped NVIDIA immediate action {immediate!r}")
        return IMMEDIATE_ACTIONS[immediate], "nvidia"
    for repair in GPUD_PRECEDENCE:
        if repair in repairs:
            return GPUD_REPAIR_ACTIONS[repair], "gpud"
    unknown = [r for r in repairs if r not in GPUD_REPAIR_ACTIONS]
    if unknown:
        raise ValueError(f"Xid {code}: unmapped gpud repair actions {unknown}")
    return "none", "gpud" if repairs else "nvidia"


def is_application_level(code: int, immediate: str | None, investigatory: str | None, repairs):
    if code in APP_LEVEL_CODES:
        return True
    first_investigation = (investigatory or "").split(" ")[0]
    if immediate in ("RESTART_APP", "IGNORE") and first_investigation in APP_INVESTIGATIONS:
        return True
    return "CheckUserAppAndGPU" in repairs and "HardwareInspection" not in repairs


def _mnemonic(name: str | None, description: str) -> str:
    if name:
        return name
    return re.sub(r"[^A-Z0-9]+", "_", description.upper()).strip("_")


def _meaning(description: str) -> str:
    if description == "Unused":
        return "Not used by current drivers on Ampere and newer GPUs (NVIDIA: unused)."
    return description.rstrip(".") + "."


def _action_text(action: str, investigatory: str | None) -> str:
    text = ACTION_CLASSES[action][1]
    step = INVESTIGATIONS.get((investigatory or "").split(" ")[0])
    if step and action != "service":
        text = f"{text} Next: {step}."
    return text


def _source(row: dict[str, str]) -> str:
    return _clean(row.get("source_name_description_action")) or _clean(
        row.get("source_likely_cause_severity")
    )


def build_catalog(csv_path: Path) -> dict[str, Any]:
    """The catalog document built from the shared CSV."""
    with csv_path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    entries = []
    for row in rows:
        code = int(row["code"])
        description = _clean(row["description"]) or f"Xid {code}"
        immediate, investigatory, repairs = parse_recommendation(row["recommended_action"])
        action, action_source = classify(code, immediate, investigatory, repairs)
        critical = ACTION_CLASSES[action][0]
        entries.append(
            {
                "code": code,
                "name": _mnemonic(_clean(row["name"]), description),
                "meaning": _meaning(description),
                "action": action,
                "action_text": _action_text(action, investigatory),
                "action_source": action_source,
                "nvidia_immediate": immediate,
                "nvidia_investigatory": investigatory,
                "recommended_action": _clean(row["recommended_action"]),
                "app_level": is_application_level(code, immediate, investigatory, repairs),
                "severity": "critical" if critical else "warning",
                "gpud_severity": _clean(row["severity"]),
                "gpud_likely_cause": _clean(row["likely_cause"]),
                "dcgm_message": _clean(row["dcgm_exporter_err_msg"]),
                "source": _source(row),
            }
        )
    entries.sort(key=lambda e: e["code"])
    codes = [e["code"] for e in entries]
    if len(set(codes)) != len(codes):
        raise ValueError("the CSV lists an Xid code twice")
    return {
        "format": CATALOG_FORMAT,
        "generated_by": "scripts/build_xid_catalog.py",
        "input": "shared/data/xid/xid_catalog.csv",
        "upstream": (
            "NVIDIA Xid catalog (https://docs.nvidia.com/deploy/xid-errors/), via leptonai/gpud's "
            "generated copy (Apache-2.0); gpud_severity and gpud_likely_cause are gpud's "
            "classification, not NVIDIA's; dcgm_message is dcgm-exporter's err_msg text."
        ),
        "action_classes": {
            name: {"critical": critical, "text": text}
            for name, (critical, text) in ACTION_CLASSES.items()
        },
        "xids": entries,
    }


def render(catalog: dict[str, Any]) -> str:
    return json.dumps(catalog, indent=1, ensure_ascii=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=None, help="the shared xid_catalog.csv")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON to write")
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is out of date")
    args = parser.parse_args(argv)
    csv_path = args.csv or default_csv()
    if not csv_path.is_file():
        print(f"no Xid CSV at {csv_path} (set GPUOBS_SHARED_DATA or --csv)", file=sys.stderr)
        return 2
    text = render(build_catalog(csv_path))
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date: run scripts/build_xid_catalog.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {len(json.loads(text)['xids'])} Xid codes to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
