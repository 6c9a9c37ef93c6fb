"""A cluster's integration settings are checked against what its adapter and source declare, by
the one validator, both when an admin saves the cluster (each error on its field, naming the
key) and when a cycle starts (bad settings are a failed cycle saying why)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.edge.errors import ConfigError
from diagnosis.models import Cluster, ClusterCycle
from tests.support.kube_server import adapter_config

pytestmark = pytest.mark.django_db

SIM = {"scenario": "small", "seed": 1, "clock": "step", "step_s": 900}


def cluster(**fields) -> Cluster:
    return Cluster(name=fields.pop("name", "settings"), **fields)


def errors_of(candidate: Cluster) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        candidate.full_clean()
    return caught.value.message_dict


def test_good_settings_pass() -> None:
    cluster(scheduler_kind="sim", scheduler_config=SIM, metrics_kind="sim").full_clean()
    cluster(
        scheduler_kind="volcano", scheduler_config=adapter_config(), metrics_kind="none"
    ).full_clean()
    cluster(
        scheduler_kind="slurm",
        scheduler_config={"slurm_conf": "/etc/slurm/slurm.conf", "accounting": True},
        metrics_kind="prometheus",
        metrics_config={
            "url": "http://prometheus:9090",
            "bearer_token_env": "GPUOBS_SECRET_PROM_TOKEN",
        },
    ).full_clean()


def test_a_bad_scheduler_config_is_an_error_on_its_field_naming_the_key() -> None:
    errors = errors_of(
        cluster(scheduler_kind="slurm", scheduler_config={"timeout_s": "10"}, metrics_kind="none")
    )
    assert errors == {"scheduler_config": ["scheduler_config.timeout_s: expected a number"]}


def test_a_bad_metrics_config_is_an_error_on_its_field_naming_the_key() -> None:
    errors = errors_of(
        cluster(
            scheduler_kind="sim",
            metrics_kind="prometheus",
            metrics_config={"url": "http://p:9090", "timout_s": 5},
        )
    )
    assert list(errors) == ["metrics_config"]
    assert errors["metrics_config"][0].startswith("metrics_config.timout_s: unknown setting")


def test_settings_of_another_integration_are_refused() -> None:
    errors = errors_of(
        cluster(scheduler_kind="sim", scheduler_config={"kubeconfig_env": "KUBECONFIG"})
    )
    assert errors["scheduler_config"][0].startswith(
        "scheduler_config.kubeconfig_env: unknown setting"
    )


def test_the_admin_shows_the_problem_and_saves_nothing(alice) -> None:
    client = Client()
    client.force_login(alice)
    form = {
        "name": "east",
        "scheduler_kind": "volcano",
        "scheduler_config": '{"page_size": "many"}',
        "metrics_kind": "none",
        "metrics_config": "{}",
        "enabled": "on",
        "dry_run": "on",
        "status": "unknown",
    }

    response = client.post("/admin/diagnosis/cluster/add/", form)

    assert response.status_code == 200  # the form again, with the error
    assert "scheduler_config.page_size: expected a whole number" in response.content.decode()
    assert not Cluster.objects.filter(name="east").exists()


def test_a_cycle_with_bad_settings_fails_saying_which_key(make_cluster) -> None:
    bad = make_cluster(
        "bad-settings",
        scheduler_kind="sim",
        metrics_kind="sim",
        scheduler_config={**SIM, "clock": "setp"},
    )

    cycle = run_cluster_cycle(bad)

    bad.refresh_from_db()
    assert not cycle.ok
    assert cycle.error.startswith("ConfigError: scheduler_config: clock: one of wall, step")
    assert (bad.status, bad.status_detail) == ("error", cycle.error)
    assert ClusterCycle.objects.filter(cluster=bad, ok=True).count() == 0


def test_check_settings_is_the_same_check(make_cluster) -> None:
    bad = make_cluster("bad", scheduler_kind="slurm", scheduler_config={"accounting": "yes"})
    with pytest.raises(ConfigError, match="accounting: expected true or false"):
        bad.check_settings()
