"""Each scheduler adapter and metric source declares its settings (keys, types, defaults, which
keys name secrets) as one ConfigSpec, and that declaration is the validator: every bad key is
named; the adapters answer a bad config with a permanent SchedulerError naming
``scheduler_config.KEY``. A change's target is read by one parser for every adapter."""

from __future__ import annotations

import pytest

from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.errors import ConfigError, SchedulerError
from diagnosis.edge.schedulers.base import ChangeError, parse_config
from diagnosis.edge.schedulers.kubernetes.kueue import KueueAdapter
from diagnosis.edge.schedulers.kubernetes.volcano import VolcanoAdapter
from diagnosis.edge.schedulers.registry import ADAPTERS
from diagnosis.edge.schedulers.slurm.adapter import SlurmAdapter, SlurmSettings
from diagnosis.edge.schedulers.targets import target_name
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.edge.sim.scheduler import SimScheduler
from diagnosis.edge.sources.registry import SOURCES


def spec_of(kind: str) -> ConfigSpec:
    return ADAPTERS[kind].config_spec()


def problems(kind: str, raw: object) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        spec_of(kind).parse(raw)
    return caught.value.problems


# -- what each integration declares --------------------------------------------------------------


def test_the_keys_that_name_secrets_are_declared_secret() -> None:
    assert spec_of("volcano").secret_keys == {"kubeconfig_env", "kubeconfig_file"}
    assert spec_of("kueue").secret_keys == {"kubeconfig_env", "kubeconfig_file"}
    assert spec_of("slurm").secret_keys == {"rest_token_env"}  # slurmrestd JWT, by reference
    assert spec_of("sim").secret_keys == set()
    prometheus = SOURCES["prometheus"].config_spec()
    assert {"bearer_token_env", "bearer_token_file", "password_env"} <= prometheus.secret_keys


def test_the_sources_without_settings_refuse_any() -> None:
    for kind in ("sim", "none"):
        spec = SOURCES[kind].config_spec()
        assert spec.parse({}) == {}
        with pytest.raises(ConfigError, match="url: unknown setting"):
            spec.parse({"url": "http://prometheus:9090"})


def test_the_defaults_are_todays() -> None:
    sim = spec_of("sim").parse({})
    assert (sim["scenario"], sim["seed"], sim["clock"], sim["speed"], sim["step_s"]) == (
        "seed",
        0,
        "wall",
        60.0,
        60,
    )
    assert sim["started_at"] is None
    slurm = SlurmSettings.from_config({})
    assert (slurm.timeout_s, slurm.accounting, slurm.parse.gres_name) == (10.0, False, "gpu")
    volcano = VolcanoAdapter({})
    assert volcano.configmap == ("volcano-system", "volcano-scheduler-configmap")
    assert (volcano.binpack_gpu_weight, volcano.settings.page_size) == (10, 500)
    # Kueue: v1beta2 where the cluster serves it, found out on the first read (issue 13)
    assert (KueueAdapter({}).configured_version, KueueAdapter({}).flavor_pools) == ("auto", {})


# -- every problem named -------------------------------------------------------------------------


def test_every_bad_key_of_a_config_is_named_at_once() -> None:
    found = problems("slurm", {"timeout_s": 0, "accounting": "yes", "slurm_confg": "/etc"})
    assert [p.split(":")[0] for p in found] == ["slurm_confg", "timeout_s", "accounting"]


@pytest.mark.parametrize(
    ("kind", "raw", "named"),
    [
        ("sim", {"scenario": "no-such"}, "scenario: unknown sim scenario 'no-such'"),
        ("sim", {"clock": "setp"}, "clock: one of wall, step"),
        ("sim", {"started_at": "2026-11-29T08:00:00"}, "started_at: expected an RFC 3339 time"),
        ("sim", {"seed": "one"}, "seed: expected a whole number"),
        ("volcano", {"scheduler_configmap": "no-slash"}, "scheduler_configmap: must look like"),
        ("volcano", {"binpack_gpu_weight": 0}, "binpack_gpu_weight: must be >= 1"),
        ("volcano", {"request_timeout_s": 0}, "request_timeout_s: must be > 0"),
        ("kueue", {"api_version": "v2"}, "api_version: one of auto, v1beta1, v1beta2"),
        ("kueue", {"watch_timeout_s": True}, "watch_timeout_s: expected a whole number"),
        ("slurm", {"partitions": ["gpu; rm -rf /"]}, "partitions: expected a list of partition"),
    ],
)
def test_a_bad_value_is_named_by_its_key(kind: str, raw: dict, named: str) -> None:
    assert any(p.startswith(named) for p in problems(kind, raw)), problems(kind, raw)


@pytest.mark.parametrize(
    ("adapter", "raw", "named"),
    [
        (SlurmAdapter, {"timeout_s": "10"}, "scheduler_config.timeout_s: expected a number"),
        (VolcanoAdapter, {"pool_lable": "x"}, "scheduler_config.pool_lable: unknown setting"),
        (KueueAdapter, {"api_version": 2}, "scheduler_config.api_version: expected a string"),
        (SimScheduler, {"scenario": "nope"}, "scheduler_config.scenario: unknown sim scenario"),
    ],
)
def test_an_adapter_refuses_a_bad_config_with_a_permanent_error(adapter, raw, named) -> None:
    with pytest.raises(SchedulerError, match=named) as caught:
        adapter(raw, cluster="settings-test")
    assert caught.value.permanent


def test_a_config_that_is_no_object_is_refused_as_such() -> None:
    with pytest.raises(SchedulerError, match="scheduler_config must be an object"):
        parse_config(spec_of("volcano"), ["kubeconfig_env"])


def test_the_sim_runtime_reads_its_settings_through_the_declaration() -> None:
    cluster = sim_runtime.SimCluster("settings-test", {"scenario": "no-such-scenario"})
    with pytest.raises(sim_runtime.CollectError, match="unknown sim scenario") as caught:
        sim_runtime.runtime_for(cluster)
    assert caught.value.permanent


# -- change targets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"kind": "placement-policy", "target": "pool:a100"}, "a100"),
        ({"kind": "queue-weight", "target": "queue:research"}, "research"),
        ({"kind": "drain-node", "target": "node:gpu-017"}, "gpu-017"),
        ({"kind": "resume-node", "target": "node:gpu-017"}, "gpu-017"),
    ],
)
def test_a_target_names_what_the_change_kind_takes(change: dict, name: str) -> None:
    assert target_name(change) == name


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "queue-weight", "target": "pool:a100"},  # the wrong kind of target
        {"kind": "drain-node", "target": "node:"},
        {"kind": "drain-node"},
    ],
)
def test_a_malformed_target_is_a_change_error_naming_the_shape(change: dict) -> None:
    with pytest.raises(ChangeError, match=f"{change['kind']}: target must look like") as caught:
        target_name(change)
    assert caught.value.permanent
    assert not caught.value.conflict


def test_a_name_pattern_narrows_what_a_target_may_name() -> None:
    change = {"kind": "drain-node", "target": "node:gpu;reboot"}
    with pytest.raises(ChangeError, match=r"node:NAME \(letters, digits"):
        SlurmAdapter({}).apply(change, dry_run=True)
