"""What GPU-hours cost (docs/accounting.md "Cost"): a price per GPU-hour per GPU model, and
money as GPU-hours × price, in :class:`~decimal.Decimal`, rounded to the cent once, at the end.

Pure core: the price tables come in as mappings (the Django side reads them from the settings
and the cluster's declaration), the GPU models from the snapshot or a stored cycle. Nothing is
priced without a price: :func:`cluster_pricing` says why a cluster is not priced, and every
amount is then None, never ``0.00``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from diagnosis.core.numbers import whole_or_float

if TYPE_CHECKING:
    from diagnosis.core.snapshot import ClusterSnapshot

CENT = Decimal("0.01")
# GPU-hours a tenant's jobs held without doing work (docs/accounting.md "Cost"): its held
# buckets but allocated-busy, and unavailable (a broken GPU is not the tenant's waste)
TENANT_WASTE_BUCKETS: tuple[str, ...] = (
    "held-by-partial-gang",
    "allocated-hung",
    "allocated-idle",
    "allocated-data-starved",
)
# of a cluster: every bucket but allocated-busy (free-no-demand included: capacity paid for
# that nobody asked for)
CLUSTER_WASTE_BUCKETS: tuple[str, ...] = (
    "unavailable",
    *TENANT_WASTE_BUCKETS,
    "free-fragmented",
    "free-demand",
    "free-no-demand",
)
ANY_MODEL = "*"  # the price of a GPU model the table does not name
MAX_PRICE = Decimal("1000000")  # per GPU-hour: anything above is a typo, not a price

# why a cluster is not priced (Pricing.reason); the pages translate these words
NO_PRICES = "no-prices"  # no price table at all
MODELS_UNKNOWN = "models-unknown"  # no cycle has told which GPU models the cluster has
UNPRICED_MODEL = "unpriced-model"  # some GPU model of it has no price
MIXED_PRICES = "mixed-prices"  # its GPU models have different prices


class PriceError(ValueError):
    """A price table that is not one; ``problems`` names each bad entry."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def parse_price(value: Any) -> Decimal:
    """A price per GPU-hour from a number or numeric text (``2.5``, ``"2.50"``): finite, at
    least 0, below :data:`MAX_PRICE`. A float is read by its shortest text (``2.1`` is 2.1, not
    its binary neighbour)."""
    if isinstance(value, bool) or value is None:
        raise ValueError("expected a number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("expected a finite number")
        value = repr(value)
    try:
        price = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a number") from None
    if not price.is_finite() or price < 0 or price >= MAX_PRICE:
        raise ValueError(f"{value!r} is not a price (0 up to {MAX_PRICE})")
    return price


def parse_price_table(raw: Any, *, where: str = "prices") -> dict[str, Decimal]:
    """A ``{GPU model: price per GPU-hour}`` mapping (``"*"``: any other model), every bad
    entry named in one :class:`PriceError`."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PriceError([f"{where}: expected {{GPU model: price per GPU-hour}}"])
    table: dict[str, Decimal] = {}
    problems = []
    for model, value in raw.items():
        if not isinstance(model, str) or not model.strip() or len(model) > 64:
            problems.append(f"{where}: {model!r}: a GPU model name (at most 64 characters)")
            continue
        try:
            table[model.strip()] = parse_price(value)
        except ValueError as exc:
            problems.append(f"{where}.{model}: {exc}")
    if problems:
        raise PriceError(problems)
    return table


def parse_price_text(text: str, *, where: str) -> dict[str, Decimal]:
    """The setting's form, ``MODEL=PRICE,MODEL=PRICE`` (``*=PRICE`` for any other model)."""
    pairs: dict[str, str] = {}
    problems = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        model, sep, price = item.rpartition("=")
        if not sep or not model.strip():
            problems.append(f"{where}: {item!r}: expected MODEL=PRICE")
            continue
        pairs[model.strip()] = price
    if problems:
        raise PriceError(problems)
    return parse_price_table(pairs, where=where)


def price_of(model: str, table: Mapping[str, Decimal]) -> Decimal | None:
    """The table's price of ``model``: its own entry (the case of letters aside), else ``*``."""
    folded = {name.casefold(): price for name, price in table.items()}
    return folded.get(model.casefold(), folded.get(ANY_MODEL))


def gpu_models(snapshot: ClusterSnapshot) -> dict[str, float]:
    """GPUs of compute per GPU model of the snapshot (a GPU's own model, else its node's; ``""``
    when neither is named; a MIG instance counts its share, as in the accounting)."""
    gpus = snapshot.gpus
    if gpus.empty:
        return {}
    models = gpus["gpu_model"].fillna("").astype(str)
    counts = gpus["capacity"].fillna(1.0).astype(float).groupby(models).sum()
    return {str(m): whole_or_float(round(float(n), 6)) for m, n in counts.items() if n > 0}


@dataclass(frozen=True)
class Pricing:
    """One cluster's price per GPU-hour, or why it has none (``reason``)."""

    currency: str
    price: Decimal | None
    reason: str = ""
    models: tuple[str, ...] = ()  # the GPU models judged
    unpriced: tuple[str, ...] = ()  # those without a price

    @property
    def priced(self) -> bool:
        return self.price is not None

    def exact(self, gpu_hours: float | None) -> Decimal | None:
        """``gpu_hours`` × price, unrounded (None when not priced or not known)."""
        if self.price is None or gpu_hours is None or not math.isfinite(gpu_hours):
            return None
        return Decimal(repr(float(gpu_hours))) * self.price

    def cost(self, gpu_hours: float | None) -> Money | None:
        """``gpu_hours`` × price, to the cent."""
        return Money.of(self.exact(gpu_hours), self.currency)

    def as_dict(self) -> dict[str, Any]:
        return {
            "priced": self.priced,
            "currency": self.currency if self.priced else None,
            "price_per_gpu_hour": str(self.price) if self.price is not None else None,
            "reason": self.reason or None,
            "gpu_models": list(self.models),
            "unpriced_models": list(self.unpriced),
        }


def cluster_pricing(
    models: Mapping[str, float] | None, table: Mapping[str, Decimal], currency: str
) -> Pricing:
    """The one price of a cluster whose GPUs are ``models`` (GPUs per model; None: not known).

    Priced when every model with GPUs has a price and all those prices are equal; else not
    priced, with the reason. A cluster of models at different prices is not blended: a tenant
    on its H100s would be charged the A100s' rate (docs/accounting.md "Cost")."""
    if not table:
        return Pricing(currency, None, NO_PRICES)
    if models is None:
        return Pricing(currency, None, MODELS_UNKNOWN)
    names = tuple(sorted(m for m, n in models.items() if n > 0))
    prices = {m: price_of(m, table) for m in names}
    unpriced = tuple(m for m in names if prices[m] is None)
    if not names:
        return Pricing(currency, None, MODELS_UNKNOWN)
    if unpriced:
        return Pricing(currency, None, UNPRICED_MODEL, names, unpriced)
    distinct = set(prices.values())
    if len(distinct) > 1:
        return Pricing(currency, None, MIXED_PRICES, names)
    return Pricing(currency, distinct.pop(), "", names)


@dataclass(frozen=True)
class Money:
    """An amount rounded to the cent, in a currency."""

    amount: Decimal
    currency: str

    @classmethod
    def of(cls, exact: Decimal | None, currency: str) -> Money | None:
        """``exact`` rounded to the cent (half up), or None for None."""
        if exact is None:
            return None
        return cls(exact.quantize(CENT, rounding=ROUND_HALF_UP), currency)

    def __str__(self) -> str:
        return f"{self.amount:,.2f} {self.currency}"

    def as_text(self) -> str:
        """The amount as JSON and CSV carry it: exact text, two decimals (``"1234.50"``)."""
        return f"{self.amount:.2f}"


def total(amounts: Iterable[Decimal | None], currency: str) -> Money | None:
    """The sum of unrounded amounts, rounded once; None when there is none or some part is not
    priced (a sum that leaves a part out would look complete)."""
    parts = list(amounts)
    if not parts or any(a is None for a in parts):
        return None
    return Money.of(sum(parts, Decimal(0)), currency)


@dataclass(frozen=True)
class TenantCost:
    """What a tenant's GPU-hours cost: all it held, and those it held without doing work."""

    held: Money
    wasted: Money

    def as_dict(self) -> dict[str, str]:
        return {"held": self.held.as_text(), "wasted": self.wasted.as_text()}


def tenant_cost(
    pricing: Pricing, held_gpu_hours: float, buckets: Mapping[str, float]
) -> TenantCost | None:
    """A tenant's cost from its held GPU-hours and its GPU-hours per bucket; None unpriced."""
    held = pricing.cost(held_gpu_hours)
    waste = sum(float(buckets.get(b) or 0.0) for b in TENANT_WASTE_BUCKETS)
    wasted = pricing.cost(waste)
    if held is None or wasted is None:
        return None
    return TenantCost(held, wasted)


def bucket_costs(pricing: Pricing, gpu_hours: Mapping[str, float]) -> dict[str, Money]:
    """Each bucket's cost (empty when not priced: no bucket shows 0.00 then)."""
    if not pricing.priced:
        return {}
    return {b: m for b, h in gpu_hours.items() if (m := pricing.cost(h)) is not None}
