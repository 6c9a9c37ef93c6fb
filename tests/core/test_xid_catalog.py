"""The Xid catalog: what gpuobs says a code means, what to do, and how severe it is."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from diagnosis.core import xid_catalog
from tests.conftest import SHARED_DATA

REPO_ROOT = Path(__file__).resolve().parents[2]
CRITICAL_XIDS = (48, 62, 64, 74, 79, 95, 119, 120)


def _build_script():
    spec = importlib.util.spec_from_file_location(
        "build_xid_catalog", REPO_ROOT / "scripts" / "build_xid_catalog.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shared_data() -> Path:
    """``$GPUOBS_SHARED_DATA`` or ``../shared/data``; absent: fail under CI=true, else skip."""
    root = SHARED_DATA
    if (root / "xid" / "xid_catalog.csv").is_file():
        return root
    message = f"shared data not found at {root} (set GPUOBS_SHARED_DATA)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.mark.parametrize("code", CRITICAL_XIDS)
def test_the_documented_critical_xids_are_critical(code):
    assert xid_catalog.is_critical(code)
    assert xid_catalog.lookup(code).severity == "critical"


@pytest.mark.parametrize("code", [13, 31, 43])
def test_application_xids_are_application_level(code):
    assert xid_catalog.is_application_level(code)


@pytest.mark.parametrize("code", [13, 31, 43, 45, 63, 92, 94])
def test_application_and_informational_xids_are_warnings(code):
    assert not xid_catalog.is_critical(code)
    assert xid_catalog.lookup(code).severity == "warning"


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (13, "restart-app"),
        (31, "restart-app"),
        (43, "none"),
        (48, "reset-gpu"),
        (62, "reset-gpu"),
        (74, "reset-gpu"),
        (79, "reboot-node"),
        (95, "reset-gpu"),
        (54, "check-hardware"),
    ],
)
def test_nvidia_actions_are_normalised(code, action):
    assert xid_catalog.lookup(code).action == action


@pytest.mark.parametrize("code", [48, 79, 95])
def test_hardware_xids_are_not_application_level(code):
    assert not xid_catalog.is_application_level(code)


def test_known_entry_carries_meaning_and_nvidia_buckets():
    info = xid_catalog.lookup(79)
    assert info.known
    assert info.name == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert "fallen off the bus" in info.meaning
    assert info.nvidia_immediate == "RESTART_BM"
    assert "docs.nvidia.com" in info.source


@pytest.mark.parametrize("code", [0, 999, 100000])
def test_unknown_code_is_a_warning_pointing_at_nvidia_docs(code):
    info = xid_catalog.lookup(code)
    assert not info.known
    assert info.severity == "warning"
    assert not xid_catalog.is_critical(code)
    assert not xid_catalog.is_application_level(code)
    assert info.meaning.startswith("unknown Xid, see NVIDIA docs")


def test_catalog_covers_codes_1_to_173():
    assert xid_catalog.all_codes() == list(range(1, 174))


def test_critical_codes_are_exactly_the_critical_actions():
    document = json.loads(xid_catalog.CATALOG_PATH.read_text())
    critical_actions = {a for a, spec in document["action_classes"].items() if spec["critical"]}
    expected = {e["code"] for e in document["xids"] if e["action"] in critical_actions}
    assert xid_catalog.critical_codes() == expected
    assert critical_actions == {"reset-gpu", "reboot-node", "service", "check-hardware"}


def test_every_entry_names_its_source():
    document = json.loads(xid_catalog.CATALOG_PATH.read_text())
    assert all(entry["source"] for entry in document["xids"])
    assert "docs.nvidia.com/deploy/xid-errors" in document["upstream"]


def test_unmapped_nvidia_bucket_is_refused():
    build = _build_script()
    with pytest.raises(ValueError, match="unmapped NVIDIA immediate action"):
        build.classify(1, "REPLACE_EVERYTHING", "N/A", [])


def test_gpud_repair_is_used_only_without_an_nvidia_action():
    build = _build_script()
    assert build.classify(1, "N/A", "N/A", ["RebootSystem"]) == ("reboot-node", "gpud")
    assert build.classify(1, "IGNORE", "N/A", ["RebootSystem"]) == ("none", "nvidia")


@pytest.mark.shared_data
def test_regenerating_from_the_shared_csv_reproduces_the_committed_json():
    csv_path = _shared_data() / "xid" / "xid_catalog.csv"
    build = _build_script()
    regenerated = build.render(build.build_catalog(csv_path))
    assert regenerated == xid_catalog.CATALOG_PATH.read_text(encoding="utf-8"), (
        "diagnosis/core/data/xid_catalog.json is stale: run python scripts/build_xid_catalog.py"
    )
