"""Properties of the fairness maths over random inputs (hypothesis): water-filling never gives
more than capacity nor more than a tenant asked, wastes nothing it could give, and is max-min
fair by entitlement; Jain's index lies in (0, 1]."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from diagnosis.core.fairness import jain_index, water_fill

EPS = 1e-6
names = st.sampled_from([f"t{i}" for i in range(8)])
amounts = st.floats(min_value=0, max_value=10_000, allow_nan=False, allow_infinity=False)
# Entitlements (GPUs deserved, or weights) and demands (GPUs) are 0 or at least a hundredth:
# subnormal weights would only test float rounding.
positive = st.floats(min_value=0.01, max_value=10_000, allow_nan=False, allow_infinity=False)
sizes = st.one_of(st.just(0.0), positive)
tenants = st.dictionaries(names, st.tuples(sizes, sizes), min_size=1, max_size=8)


def split(table):
    entitlement = {name: e for name, (e, _) in table.items()}
    demand = {name: d for name, (_, d) in table.items()}
    return entitlement, demand


@settings(max_examples=300, deadline=None)
@given(capacity=amounts, table=tenants)
def test_fair_shares_sum_to_at_most_capacity(capacity, table):
    fair = water_fill(capacity, *split(table))

    assert sum(fair.values()) <= capacity + EPS


@settings(max_examples=300, deadline=None)
@given(capacity=amounts, table=tenants)
def test_no_tenant_gets_more_than_its_demand(capacity, table):
    entitlement, demand = split(table)
    fair = water_fill(capacity, entitlement, demand)

    assert all(-EPS <= fair[name] <= demand[name] + EPS for name in demand)


@settings(max_examples=300, deadline=None)
@given(capacity=amounts, table=tenants)
def test_water_filling_gives_out_all_it_can(capacity, table):
    entitlement, demand = split(table)
    fair = water_fill(capacity, entitlement, demand)

    given_out = sum(fair.values())
    assert abs(given_out - min(capacity, sum(demand.values()))) <= 1e-6 * max(1.0, capacity)


@settings(max_examples=300, deadline=None)
@given(capacity=amounts, table=tenants)
def test_an_unsatisfied_entitled_tenant_has_the_highest_share_per_entitlement(capacity, table):
    # Max-min by entitlement: a tenant that got less than it asked for is at the water level,
    # and no entitled tenant is above it.
    entitlement, demand = split(table)
    fair = water_fill(capacity, entitlement, demand)
    entitled = [n for n in demand if entitlement[n] > 0 and demand[n] > EPS]
    short = [n for n in entitled if fair[n] < demand[n] - 1e-6 * max(1.0, demand[n])]
    for n in short:
        level = fair[n] / entitlement[n]
        for m in entitled:
            assert fair[m] / entitlement[m] <= level * (1 + 1e-6) + 1e-9


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), min_size=1, max_size=50))
def test_jain_index_is_in_zero_one(ratios):
    index = jain_index(ratios)

    if any(r > 0 for r in ratios):
        assert index is not None
        assert 0 < index <= 1 + 1e-12
    else:
        assert index is None
