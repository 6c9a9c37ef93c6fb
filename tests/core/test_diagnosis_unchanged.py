"""Every finding of a varied diagnosis -- rule, subject, severity, summary, evidence and the
summary's template -- stays what it was when the digests below were recorded (issue #35: the
rules are made cheaper, never different). A rule whose findings are meant to change records
its new digest: ``python -m tests.core.test_diagnosis_unchanged`` prints them."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from functools import cache
from typing import Any

import pytest

from bench.rules import build_document
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.base import SEVERITIES
from diagnosis.core.rules.engine import Diagnosis, run_rules
from diagnosis.core.simulate.scenarios import rule_showcase_scenario

# (count, sha256 of the findings' canonical JSON) per rule, of each diagnosis in _DIAGNOSES
RECORDED: dict[str, dict[str, tuple[int, str]]] = {
    "bench-256": {
        "data-starvation": (8, "04e9bc8e37960431b1c5491731a7f5097a78bae4c60389bc7925676e38aba152"),
        "fragmentation": (3, "3574275c099b40b8cc16e247c50f88448cc897e40f8bda27a6b8d64f373231d3"),
        "gang-deadlock": (2, "7c7ada0bc629b67a58f1cba0472dbb75a2c96ff9f71e99d336660db3958bb4e9"),
        "gang-partial-hold": (
            5,
            "71015f712309e2b2f5f68c2e4b64327e0e00b0331613987ce1acba8542c97f67",
        ),
        "idle-held": (2, "fd814e9c6d6250b3a24ed2f054aef648c246a339e3db016f6b562defb04b5a13"),
        "low-mfu": (6, "76c0522491419f2f0890ea14b8aad1ddb47872362cf86d1d0d678a506bfe44b2"),
        "starvation": (150, "41c1476d07000b000f9d900eb1fe45e4019f1142ebb9d56c76524f8de2abdce6"),
        "xid": (1, "df1fce6b8bcadd733c485cd2ea6af083084fb3d440161a054d59b5ba1c9e41f7"),
    },
    "bench-256-short-waits": {
        "data-starvation": (8, "04e9bc8e37960431b1c5491731a7f5097a78bae4c60389bc7925676e38aba152"),
        "fragmentation": (3, "3574275c099b40b8cc16e247c50f88448cc897e40f8bda27a6b8d64f373231d3"),
        "gang-deadlock": (2, "7c7ada0bc629b67a58f1cba0472dbb75a2c96ff9f71e99d336660db3958bb4e9"),
        "gang-partial-hold": (
            5,
            "71015f712309e2b2f5f68c2e4b64327e0e00b0331613987ce1acba8542c97f67",
        ),
        "idle-held": (2, "fd814e9c6d6250b3a24ed2f054aef648c246a339e3db016f6b562defb04b5a13"),
        "low-mfu": (6, "76c0522491419f2f0890ea14b8aad1ddb47872362cf86d1d0d678a506bfe44b2"),
        "starvation": (205, "14e66b88036404f953a0f7758272be16e958e4ae81912bf349edb77d8fd38a43"),
        "xid": (1, "df1fce6b8bcadd733c485cd2ea6af083084fb3d440161a054d59b5ba1c9e41f7"),
    },
    "showcase": {
        "data-starvation": (1, "beebd9c75d0092b528d53b7b2c3a4616a6b3903f1d2b3c4b605f6fc47f35902d"),
        "ecc-row-remap": (1, "074dbf2c64b7b67172ede7524d4aa059b23f89cbf4b77b60bf4b4a9328738755"),
        "fragmentation": (1, "eb0dca53901cad21cc0d9709bec523ece5613c42861882e68739c058885e3560"),
        "gang-deadlock": (1, "ae39ed806ffa8bd7a8ee98dc500a421e698f5349e915519fce748bf377e48b8f"),
        "gang-partial-hold": (
            1,
            "629c12a5b8c1a353694153eba79dedf25ef700604c8353f610d02d3f90fb1d11",
        ),
        "hung-collective": (1, "958dfba6345a3cbd063e8755020041a89a10096ab7696dd1cd406b622db3fdac"),
        "idle-allocation": (1, "41fc3fdb362a94b7b270902a0a0932badb2a71aa031f1a43dd3e68d650a6a221"),
        "idle-held": (1, "aefaf5300692f892e32a2c7e094ab8ef0054aac6ef075a1760d4c2a4b6a50d89"),
        "idle-quota": (1, "08a50fc5252bb9fdbd939e4ee5c3b40a2eb3b70a55d8e5e3cbef5d2e72e3ec4f"),
        "low-mfu": (2, "e40dc9f99adb9cc4cac454e39930fbb7dc985e028a3210d1a9c7fd2d76de7f9d"),
        "power-throttling": (8, "8b9991231f5262195bbbe19f7b5755a264be1a53df25cbb692af114e04c637d4"),
        "starvation": (1, "2aca61713e119e05aa73e051cdfcbb69cd1eb80e06296727d5aedc8e331e98d0"),
        "thermal-throttling": (
            8,
            "6863a2f78a29eaa096c9e816648dd83a854bee9b6e95b9e0a315de1bda582d60",
        ),
        "topology-misplacement": (
            1,
            "cbeb33903be1515aadaa754caf885583d8a4b5b24d7fd0b5d5d1179dc0fc2132",
        ),
        "xid": (2, "64278abf03f4c2e8943bcc6c8470a3f31e63147b4c1db1514cd3a2ccdceb766c"),
    },
}


def _varied_bench_document() -> dict[str, Any]:
    """bench/rules.py's 256-GPU snapshot, with jobs of no tenant (and no queue), of no pool,
    pending for minutes while jobs submitted after them started."""
    document = build_document(256)
    for i, job in enumerate(document["jobs"]):
        if i % 13 == 3 and job["state"] == "pending":
            job["submitted"] = "2026-11-29T07:20:00Z"
        if i % 13 == 4 and job["state"] == "running":
            job["submitted"], job["started"] = "2026-11-29T07:30:00Z", "2026-11-29T07:45:00Z"
        if i % 5 == 1:
            job["tenant"] = None
        if i % 15 == 1:
            job["queue"] = None
        if i % 11 == 2:
            job["pool"] = None
    return document


def _showcase_document() -> dict[str, Any]:
    scenario = rule_showcase_scenario(0)
    return scenario.build().snapshot(scenario.snapshot_at)


_DIAGNOSES = {
    "bench-256": (_varied_bench_document, None),
    "bench-256-short-waits": (
        _varied_bench_document,
        {"starvation": {"min_wait": 60, "min_overtaken": 1}},
    ),
    "showcase": (_showcase_document, None),
}


@cache
def diagnosis_of(name: str) -> Diagnosis:
    document, overrides = _DIAGNOSES[name]
    diagnosis = run_rules(snapshot_format.load(document()), overrides)
    assert not diagnosis.errors
    return diagnosis


def digests(name: str) -> dict[str, tuple[int, str]]:
    diagnosis = diagnosis_of(name)
    by_rule: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for finding in diagnosis.findings:
        by_rule[finding.rule].append(
            finding.as_dict() | {"text": None if finding.text is None else finding.text.as_json()}
        )
    return {
        rule: (
            len(findings),
            hashlib.sha256(json.dumps(findings, sort_keys=True).encode()).hexdigest(),
        )
        for rule, findings in sorted(by_rule.items())
    }


@pytest.mark.parametrize("name", list(_DIAGNOSES))
def test_the_findings_are_those_recorded(name):
    assert digests(name) == RECORDED[name]


@pytest.mark.parametrize("name", list(_DIAGNOSES))
def test_the_findings_come_by_severity_then_rule_then_subject(name):
    keys = [(f.severity, f.rule, f.subject) for f in diagnosis_of(name).findings]
    assert len({severity for severity, _, _ in keys}) > 1
    assert keys == sorted(keys, key=lambda k: (SEVERITIES.index(k[0]), k[1], k[2]))


def test_a_rules_findings_are_those_of_the_diagnosis_in_its_order():
    diagnosis = diagnosis_of("bench-256")
    for rule in ("starvation", "low-mfu", "no-such-rule"):
        assert diagnosis.by_rule(rule) == [f for f in diagnosis.findings if f.rule == rule]
    diagnosis.by_rule("starvation").clear()  # a caller's list, not the diagnosis's
    assert diagnosis.by_rule("starvation")


if __name__ == "__main__":
    print({name: digests(name) for name in _DIAGNOSES})
