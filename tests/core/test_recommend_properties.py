"""Properties the recommendations keep on any valid snapshot (the random documents of
``test_rules_properties``): no generator fails, every replay runs, the JSON is plain, targets
have their kind's form, weights move by at most x2, drains only for critical Xids, and nothing
with a predicted harm is preselected."""

from __future__ import annotations

import json

from hypothesis import given, settings

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core import xid_catalog
from diagnosis.core.recommend.base import RecommendSettings
from diagnosis.core.recommend.engine import recommend
from tests.core.test_rules_properties import SETTINGS, documents

PREFIXES = {
    "placement-policy": ("pool:",),
    "queue-weight": ("queue:",),
    "drain-node": ("node:",),
    "gang-release": ("job:",),
    "advisory": ("job:", "pool:", "cluster:"),
}
FAST = RecommendSettings(seeds=(0,), horizon_s=3600.0)


@settings(SETTINGS, max_examples=40)  # each example replays: keep the suite fast
@given(documents())
def test_recommendations_hold_on_any_valid_snapshot(document):
    snap = snapshot_format.load(document)
    run = recommend(snap, settings=FAST)

    assert run.errors == ()
    json.dumps(run.as_dict(), allow_nan=False)
    for r in run.recommendations:
        assert r.target.startswith(PREFIXES[r.kind]), (r.kind, r.target)
        assert "failed" not in r.impact["headline"], r.impact
        assert not (r.preselect and r.harm)
        if r.kind == "queue-weight":
            assert r.change["from"] < r.change["to"] <= max(1, 2 * r.change["from"])
        if r.kind == "drain-node" and r.generator == "drain-row-remap":
            assert {f.rule for f in r.findings} == {"ecc-row-remap"}
        elif r.kind == "drain-node":
            codes = r.basis["codes"]
            assert codes
            assert all(
                xid_catalog.is_critical(c) and not xid_catalog.is_application_level(c)
                for c in codes
            )
