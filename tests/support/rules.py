"""Running one rule on a test snapshot, as the rule tests do."""

from __future__ import annotations

import json
from typing import Any

from diagnosis.core.rules.base import Judgement, Rule
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot
from tests.support.builders import SnapshotBuilder


def judge_rule(rule: Rule, snap: ClusterSnapshot, **overrides: Any) -> Judgement:
    """``rule``'s judgement of ``snap`` with the threshold ``overrides``; every finding must
    dump as plain JSON (no NaN or infinity)."""
    judgement = rule.evaluate(snap, rule.resolve(overrides), SnapshotFacts(snap))
    for finding in judgement.findings:
        json.dumps(finding.as_dict(), allow_nan=False)
    return judgement


def one_busy_gpu(*, nodes: int = 1, **gpu0: Any) -> SnapshotBuilder:
    """A pool of ``nodes`` A100 nodes and a busy (util 0.9) one-GPU job ``j`` on GPU
    ``a100-000/0``, which reads ``gpu0``."""
    builder = SnapshotBuilder().pool("a100", nodes=nodes)
    builder.job("j", gpus_per_pod=1, node="a100-000", util=0.9)
    return builder.gpu("a100-000", 0, **gpu0)
