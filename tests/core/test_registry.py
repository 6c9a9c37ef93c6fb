"""The one registry style: rules, generators, scheduler adapters and metric sources are plugins
keyed by a stable id; a duplicate id is refused when a registry is built; the model choices are
the registries' ids and labels, in order; every declared adapter and source loads."""

from __future__ import annotations

import dataclasses

import pytest

from diagnosis import choices
from diagnosis.core import plugins
from diagnosis.core.recommend.registry import DuplicateGeneratorError, all_generators
from diagnosis.core.recommend.registry import collect as collect_generators
from diagnosis.core.rules.registry import DuplicateRuleError, all_rules, get_rule
from diagnosis.core.rules.registry import collect as collect_rules
from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.errors import CollectError, SchedulerError
from diagnosis.edge.schedulers.base import SchedulerAdapter
from diagnosis.edge.schedulers.registry import (
    ADAPTERS,
    AdapterSpec,
    DuplicateAdapterError,
    adapter_for,
    adapter_spec,
)
from diagnosis.edge.sources.registry import (
    SOURCES,
    DuplicateSourceError,
    SourceSpec,
    source_spec,
)


@dataclasses.dataclass(frozen=True)
class Plugin:
    id: str
    label: str = ""


# -- the registry type ---------------------------------------------------------------------------


def test_a_registry_keeps_the_order_given_and_refuses_a_second_plugin_with_an_id() -> None:
    registry = plugins.Registry([Plugin("b", "B"), Plugin("a", "A")], what="thing")
    assert list(registry) == ["b", "a"]
    assert registry.choices() == [("b", "B"), ("a", "A")]
    with pytest.raises(plugins.DuplicatePluginError, match="thing id 'a' is defined twice"):
        plugins.Registry([Plugin("a"), Plugin("b"), Plugin("a")], what="thing")


def test_an_unknown_id_is_a_key_error_naming_the_known_ones() -> None:
    registry = plugins.Registry([Plugin("a"), Plugin("b")], what="thing")
    with pytest.raises(KeyError, match=r"unknown thing 'c' \(known: a, b\)"):
        registry["c"]
    assert registry.get("c") is None


def test_a_declared_target_must_name_module_and_attribute() -> None:
    assert plugins.load("diagnosis.core.plugins:Registry") is plugins.Registry
    with pytest.raises(ValueError, match="module:attribute"):
        plugins.load("diagnosis.core.plugins")


# -- duplicates, per registry --------------------------------------------------------------------


def test_two_rules_with_one_id_are_refused() -> None:
    rule = get_rule("xid")
    with pytest.raises(DuplicateRuleError, match="'xid' is defined twice"):
        collect_rules([rule, dataclasses.replace(rule, title="another")])


def test_two_generators_with_one_id_are_refused() -> None:
    generator = next(iter(all_generators().values()))
    with pytest.raises(DuplicateGeneratorError, match="is defined twice"):
        collect_generators([generator, generator])


def test_two_adapters_or_sources_with_one_id_are_refused() -> None:
    adapter = AdapterSpec("slurm", "Slurm", adapter="x:Y", config="x:CONFIG")
    with pytest.raises(DuplicateAdapterError, match="'slurm' is defined twice"):
        plugins.Registry(
            [*ADAPTERS.values(), adapter], what="scheduler adapter", error=DuplicateAdapterError
        )
    source = SourceSpec("none", "None", measure="x:measure", config="x:CONFIG")
    with pytest.raises(DuplicateSourceError, match="'none' is defined twice"):
        plugins.Registry([*SOURCES.values(), source], what="source", error=DuplicateSourceError)


# -- the model choices ---------------------------------------------------------------------------


def test_the_scheduler_and_metrics_choices_are_the_registries_ids_and_labels() -> None:
    assert choices.SchedulerKind.choices == ADAPTERS.choices()
    assert choices.MetricsKind.choices == SOURCES.choices()
    # what the migrations hold: the same values, labels and order as ever
    assert choices.SchedulerKind.choices == [
        ("sim", "Built-in simulator"),
        ("slurm", "Slurm"),
        ("volcano", "Volcano"),
        ("kueue", "Kueue"),
        ("yarn", "YARN"),
        ("kai", "NVIDIA KAI scheduler"),
    ]
    assert choices.MetricsKind.choices == [
        ("sim", "Built-in simulator"),
        ("prometheus", "Prometheus"),
        ("slurm_tres", "Slurm GPU TRES (sstat gres/gpuutil)"),
        ("none", "None (scheduler only)"),
    ]
    assert choices.SchedulerKind.SIM == "sim"
    assert choices.MetricsKind.NONE == "none"


# -- every declared plugin loads -----------------------------------------------------------------


# The settings without a default (REQUIRED), per adapter: an address nothing can default.
REQUIRED_SETTINGS = {"yarn": {"url": "http://rm.example:8088"}}


@pytest.mark.parametrize("kind", list(ADAPTERS))
def test_every_adapter_loads_with_its_declared_settings(kind: str) -> None:
    spec = adapter_spec(kind)
    adapter_class = spec.adapter_class()
    assert adapter_class.id == kind
    config = spec.config_spec()
    assert isinstance(config, ConfigSpec)
    assert config.what == "scheduler_config"
    minimal = REQUIRED_SETTINGS.get(kind, {})
    assert {s.key for s in config.settings if s.required} == set(minimal)
    config.parse(minimal)  # every other setting has a default
    adapter = adapter_for(kind, minimal, cluster="registry-test")
    assert isinstance(adapter, SchedulerAdapter)


@pytest.mark.parametrize("kind", list(SOURCES))
def test_every_source_loads_with_its_declared_settings(kind: str) -> None:
    spec = source_spec(kind)
    assert callable(spec.measurer())
    if spec.shards:
        assert callable(spec.sharder())
    config = spec.config_spec()
    assert isinstance(config, ConfigSpec)
    assert config.what == "metrics_config"


def test_only_the_prometheus_source_shards() -> None:
    assert [kind for kind, spec in SOURCES.items() if spec.shards] == ["prometheus"]


def test_an_unknown_or_unloadable_integration_is_a_permanent_error() -> None:
    with pytest.raises(SchedulerError, match="no scheduler adapter 'lsf'") as caught:
        adapter_spec("lsf")
    assert caught.value.permanent
    broken = AdapterSpec("broken", "Broken", adapter="no.such.module:A", config="no.such:C")
    with pytest.raises(SchedulerError, match="'broken' is not available") as caught:
        broken.adapter_class()
    assert caught.value.permanent
    with pytest.raises(CollectError, match="no collector for metrics source 'graphite'"):
        source_spec("graphite")


# -- a rule declares what it reads ---------------------------------------------------------------


def test_the_rules_that_read_gpu_metrics_say_so() -> None:
    reading = {rule_id for rule_id, rule in all_rules().items() if rule.reads_gpu_metrics}
    assert reading == {
        "idle-allocation",
        "data-starvation",
        "low-mfu",
        "xid",
        "hung-collective",
        "idle-held",
        "thermal-throttling",
        "power-throttling",
        "ecc-row-remap",
        "idle-quota",
    }
