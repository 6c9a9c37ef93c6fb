"""The evidence digest computed for all hits at once (issue #35) is, hit by hit, the digest that
stored rows already carry: the one computed a hit at a time before."""

from __future__ import annotations

import decimal
import hashlib
import math
import re
from datetime import UTC, datetime

import numpy as np
import orjson

from diagnosis.actions.records.findings import CLOCK_KEYS, CLOCK_STEP, evidence_digests
from diagnosis.core.rules.base import Finding
from diagnosis.core.rules.engine import run_rules
from diagnosis.core.text import Text
from tests.support.builders import SnapshotBuilder

# the digest of one hit as written before #35, kept as the reference stored digests came from
_REFERENCE_CLOCK = re.compile(r'"(?:' + "|".join(sorted(CLOCK_KEYS)) + r')":(-?[0-9][0-9.eE+-]*)')


def _reference_step(match: re.Match[str]) -> str:
    seconds = max(float(match.group(1)), 1.0)
    return f"{match.group(0)[: -len(match.group(1))]}{int(math.log(seconds / 60 + 1, CLOCK_STEP))}"


def reference_digest(hit: Finding) -> str:
    judged_of = [hit.severity, hit.evidence] + (["text"] if hit.text is not None else [])
    options = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    text = orjson.dumps(judged_of, default=str, option=options)
    judged = _REFERENCE_CLOCK.sub(_reference_step, text.decode())
    return hashlib.blake2b(judged.encode(), digest_size=16).hexdigest()


def hit(evidence: dict, *, text: Text | None = None, severity: str = "warning") -> Finding:
    return Finding("r", "s", severity, "summary", evidence, text)


VARIED = [
    hit({}),
    hit({"wait_s": 71123.0, "pool": "a100", "overtakers": ["job-1", "job-2"]}),
    hit({"wait_s": 71123.0}, text=Text("Job %(job)s waited", {"job": "j"})),
    hit({"runtime_s": 53385, "hold_s": -5.0, "wait_s": 0}, severity="critical"),
    hit({"wait_s": 1e20, "hold_s": 1.5e-07, "runtime_s": 59.99}),
    # nested clock keys, in lists and dicts
    hit({"blocked_jobs": [{"id": "j1", "wait_s": 86459.0}, {"id": "j2", "wait_s": 12.5}]}),
    hit({"members": {"a": {"hold_s": 7001.0, "held_since": "2026-11-29T06:04:19+00:00"}}}),
    # numpy values and arrays
    hit({"wait_s": np.float64(3600.25), "runtime_s": np.int64(7200), "hold_s": np.float32(0.1)}),
    hit({"per_gpu": np.array([1.5, 2.5]), "util": np.float32(0.3333)}),
    # non-string keys (sorted and written as JSON keys), values through default=str
    hit({1: "one", 2.5: "two", "wait_s": 900, None: decimal.Decimal("1.10")}),
    hit({"since": datetime(2026, 11, 29, 6, 4, 19, tzinfo=UTC), "wait_s": decimal.Decimal("5")}),
    # clock keys that are not numbers, or inside strings: left as they are
    hit({"wait_s": None, "hold_s": True, "runtime_s": "600", "note": '"wait_s":600'}),
    hit({"wait_s": float("nan"), "hold_s": float("inf"), "text": "line\nbreak ünïcödé ✓"}),
    hit({'x"wait_s': 3000.0, "wait_s_total": 3000.0, "prewait_s": 3000.0}),
]


def test_each_digest_is_the_one_computed_a_hit_at_a_time():
    assert evidence_digests(VARIED) == [reference_digest(h) for h in VARIED]


def test_digests_of_real_rule_hits_are_unchanged():
    builder = SnapshotBuilder().pool("a100", nodes=2)
    builder.job("idle", node="a100-000", waited="6h", util=0.01, fb_used_frac=0.05)
    builder.job("filler", node="a100-001", waited="6h")
    for i in range(3):
        builder.job(f"big{i}", state="pending", waited=f"{5 + i}h")
    for i in range(3):
        builder.job(f"later{i}", state="completed", waited="2h", started="2h")
    hits = run_rules(builder.build()).findings
    assert {h.rule for h in hits} >= {"idle-allocation", "starvation"}
    assert evidence_digests(hits) == [reference_digest(h) for h in hits]


def test_digests_keep_the_order_of_the_hits_and_none_is_no_digest():
    assert evidence_digests([]) == []
    one, other = VARIED[1], VARIED[5]
    assert evidence_digests([one, other]) == evidence_digests([other, one])[::-1]
    assert len(set(evidence_digests(VARIED))) == len(VARIED)


def test_a_clock_duration_changes_the_digest_only_across_a_quarter_step():
    at = [hit({"wait_s": seconds}) for seconds in (3600.0, 3660.0, 3600.0 * 1.3)]
    first, a_minute_later, grown = evidence_digests(at)
    assert first == a_minute_later
    assert grown != first
