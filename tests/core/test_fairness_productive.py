"""Fairness that counts useful GPUs (issue #20, item 5): the productive reading of a period's
sums, hand-computed. Two tenants share 100 usable GPUs for an hour, 50 fair GPUs each."""

from __future__ import annotations

import pytest

from diagnosis.core.productive_share import productive_fairness

HOUR = 3600.0
CLUSTER = {"gpu_s": 100 * HOUR, "unavailable_gpu_s": 0.0, "interval_s": HOUR}


def tenant(*, allocated: float, busy: float, partial_gang: float = 0.0, **extra: float) -> dict:
    """GPU-hours in, GPU-seconds out; 50 fair GPUs and some demand."""
    sums = {
        "allocated_gpu_s": allocated * HOUR,
        "busy_gpu_s": busy * HOUR,
        "partial_gang_gpu_s": partial_gang * HOUR,
        "fair_gpu_s": 50 * HOUR,
        "demanded_gpu_s": 60 * HOUR,
    }
    return sums | {f"{name}_s": value * HOUR for name, value in extra.items()}


def reading(**tenants):
    cluster = dict(CLUSTER)
    for column in ("productive_gpu_s", "mfu_known_gpu_s"):
        cluster[column] = sum(t.get(column, 0.0) for t in tenants.values())
    return productive_fairness(tenants, cluster)


def test_a_tenant_allocated_its_share_but_held_by_partial_gangs_is_flagged():
    result = reading(
        alpha=tenant(allocated=50, busy=50), beta=tenant(allocated=48, busy=8, partial_gang=40)
    )
    beta = result.row("beta")
    assert beta.allocated_ratio == pytest.approx(0.96)
    assert beta.productive_ratio == pytest.approx(0.16)
    assert beta.productive_share == pytest.approx(0.08)
    assert beta.partial_gang_gpu_hours == pytest.approx(40)
    assert beta.productively_starved
    assert result.starved == ("beta",)


def test_the_headline_does_not_call_that_period_fair():
    result = reading(
        alpha=tenant(allocated=50, busy=50), beta=tenant(allocated=48, busy=8, partial_gang=40)
    )
    assert result.allocated_jain_index > 0.99  # by allocation alone it looks fair
    assert result.jain_index < 0.7
    assert result.verdict == "productively-unfair"
    assert not result.headline.startswith("Fair")
    assert "beta was allocated 96% of its fair share but got only 16% of it" in result.headline


def test_tenants_whose_gpus_work_are_fair_on_both_readings():
    result = reading(alpha=tenant(allocated=50, busy=49), beta=tenant(allocated=48, busy=47))
    assert result.verdict == "fair"
    assert result.headline.startswith("Fair")
    assert result.starved == ()


def test_a_tenant_allocated_too_little_is_unequal_not_productively_starved():
    result = reading(alpha=tenant(allocated=50, busy=50), beta=tenant(allocated=20, busy=2))
    assert not result.row("beta").productively_starved
    assert result.verdict == "unequal"


def test_low_mfu_is_shown_weighted_but_does_not_flag():
    """An inference tenant at a third of the cluster's MFU: busy, so not starved."""
    result = reading(
        alpha=tenant(allocated=50, busy=50, mfu_known_gpu=50, productive_gpu=30),
        beta=tenant(allocated=50, busy=50, mfu_known_gpu=50, productive_gpu=10),
    )
    beta = result.row("beta")
    assert result.cluster_mfu == pytest.approx(0.4)
    assert beta.mfu_weighted_ratio == pytest.approx(0.5)  # 10 / 0.4 = 25 of 50 fair
    assert result.row("alpha").mfu_weighted_ratio == pytest.approx(1.0)  # capped at its busy
    assert not beta.productively_starved


def test_a_reader_of_one_tenant_is_not_told_another_tenants_name():
    tenants = {
        "alpha": tenant(allocated=50, busy=50),
        "beta": tenant(allocated=48, busy=8, partial_gang=40),
    }
    cluster = dict(CLUSTER, productive_gpu_s=0.0, mfu_known_gpu_s=0.0)
    result = productive_fairness(tenants, cluster, visible={"alpha"})
    assert [r.tenant for r in result.rows] == ["alpha"]
    # issue #32 item 5: the verdict is about alpha alone, not about an unnamed other tenant
    assert result.verdict == "fair"
    assert result.headline.startswith("Fair to the tenants shown")
    assert "beta" not in result.headline
    theirs = productive_fairness(tenants, cluster, visible={"beta"})
    assert theirs.verdict == "productively-unfair"
    assert theirs.headline.startswith("Not fair in useful GPU-hours: beta was allocated")
    assert "alpha" not in theirs.headline
