"""deploy/kubernetes: every kustomization renders with ``kubectl kustomize`` (no cluster), every
object it renders is valid for Kubernetes 1.34 (kubernetes-validate, strict: an unknown field
fails), prometheus-operator's objects match the fields of their CRDs, the PrometheusRule's groups
pass ``promtool check rules`` and their unit tests, and the pods meet Pod Security "restricted"
with the probes, the migration Job and the RBAC docs/operations.md and docs/integrations.md
describe; the worker's liveness probe answers for a live worker and fails for a stopped one."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from diagnosis.core.vocabulary import DEFAULT_WINDOW_S
from diagnosis.edge.sources.prometheus.recording import rule_groups_document
from tests.conftest import REPO_ROOT, require_binary
from tests.support.celery_worker import database_url_of_test_database
from tests.support.processes import start_logged, stop_group, wait_until

KUBERNETES = REPO_ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = [
    KUBERNETES,
    *sorted(p.parent for p in KUBERNETES.glob("overlays/*/kustomization.yaml")),
]
KUBERNETES_VERSION = "1.34.0"


def kustomize_binary() -> list[str]:
    """``kubectl kustomize`` (kustomize v5 is built into kubectl 1.27 and later), or kustomize."""
    if shutil.which("kustomize") and not shutil.which("kubectl"):
        return [shutil.which("kustomize"), "build"]
    kubectl = require_binary(
        "kubectl", "https://kubernetes.io/docs/tasks/tools/ (kubectl 1.27 or later)"
    )
    return [kubectl, "kustomize"]


def render(directory: Path) -> list[dict]:
    result = subprocess.run(
        [*kustomize_binary(), str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {str(d.relative_to(REPO_ROOT)): render(d) for d in KUSTOMIZATIONS}


def objects(rendered: dict[str, list[dict]], kind: str, where: str = "deploy/kubernetes"):
    return {o["metadata"]["name"]: o for o in rendered[where] if o["kind"] == kind}


def test_every_overlay_is_there() -> None:
    names = {d.name for d in KUSTOMIZATIONS[1:]}
    assert names == {"monitoring", "writes", "grafana-dashboards", "production"}


# -- prometheus-operator's objects: the fields of their CRDs ----------------------------------
# From prometheus-operator's CRDs (example/prometheus-operator-crd/monitoring.coreos.com_*.yaml,
# operator 0.82): only the fields gpuobs uses, with the CRDs' types and patterns; anything else
# refused, as a strict API server would prune or refuse it.
DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
    r"(([0-9]+)ms)?)$",
}
STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": STRINGS,
        "annotations": STRINGS,
    },
    "additionalProperties": False,
}
SECRET_KEY = {
    "type": "object",
    "required": ["key"],
    "properties": {"name": {"type": "string"}, "key": {"type": "string"}},
    "additionalProperties": False,
}
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": STRINGS},
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "interval": DURATION,
                            "scrapeTimeout": DURATION,
                            "honorLabels": {"type": "boolean"},
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "type": {"type": "string"},
                                    "credentials": SECRET_KEY,
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
RULE = {
    "type": "object",
    "required": ["expr"],
    "additionalProperties": False,
    "properties": {
        "alert": {"type": "string"},
        "record": {"type": "string"},
        "expr": {"type": ["string", "integer"]},
        "for": DURATION,
        "keep_firing_for": {**DURATION, "minLength": 1},
        "labels": STRINGS,
        "annotations": STRINGS,
    },
}
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": DURATION,
                            "rules": {"type": "array", "items": RULE},
                        },
                    },
                }
            },
        },
    },
}
CUSTOM_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
}


@pytest.mark.parametrize("where", [str(d.relative_to(REPO_ROOT)) for d in KUSTOMIZATIONS])
def test_every_rendered_object_is_valid_for_kubernetes_1_34(rendered, where) -> None:
    assert rendered[where]
    for obj in rendered[where]:
        schema = CUSTOM_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
        if schema:
            jsonschema.validate(obj, schema)
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            pytest.fail(f"{where}: {name}: {error.message} at {list(error.path)}")
        if obj["kind"] != "Namespace" and obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"].get("namespace") == "gpuobs", obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpuobs"


def test_an_unknown_field_does_fail_the_validation() -> None:
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "dta": {}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


# -- pods: restricted, probes, resources -------------------------------------------------------


def pod_specs(rendered) -> dict[str, dict]:
    found = {}
    for obj in rendered["deploy/kubernetes"]:
        if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
            found[obj["metadata"]["name"]] = obj["spec"]["template"]["spec"]
    return found


def test_the_base_has_web_worker_beat_and_the_migration_job(rendered) -> None:
    assert set(pod_specs(rendered)) == {
        "gpuobs-web",
        "gpuobs-worker",
        "gpuobs-mirror",
        "gpuobs-beat",
        "gpuobs-migrate",
    }
    assert set(objects(rendered, "Service")) == {"gpuobs-web"}
    assert set(objects(rendered, "PodDisruptionBudget")) == {"gpuobs-web", "gpuobs-worker"}
    assert objects(rendered, "NetworkPolicy")
    namespace = objects(rendered, "Namespace")["gpuobs"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_every_pod_meets_pod_security_restricted(rendered) -> None:
    for name, spec in pod_specs(rendered).items():
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, name
        assert isinstance(pod["runAsUser"], int), name
        assert pod["runAsUser"] > 0, name
        assert pod["seccompProfile"]["type"] == "RuntimeDefault", name
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), name
        for volume in spec.get("volumes", []):
            assert set(volume) - {"name"} <= {"emptyDir", "secret", "configMap", "projected"}
        for container in spec["containers"] + spec.get("initContainers", []):
            context = container["securityContext"]
            where = f"{name}/{container['name']}"
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert context.get("privileged") is not True, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}, where
            assert container["resources"]["requests"], where
            assert container["resources"]["limits"]["memory"], where
            assert not container.get("ports") or all(
                "hostPort" not in p for p in container["ports"]
            )


def test_web_probes_liveness_without_the_database_and_readiness_with_it(rendered) -> None:
    web = pod_specs(rendered)["gpuobs-web"]["containers"][0]
    assert web["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["startupProbe"]["httpGet"]["path"] == "/livez"
    # the views exist under those paths (tests/app/deploy/test_probes.py asks them)
    urls = (REPO_ROOT / "gpuobs" / "urls.py").read_text()
    assert 'path("livez"' in urls
    assert 'path("readyz"' in urls


def test_worker_and_beat_have_liveness_probes_that_restart_them(rendered) -> None:
    specs = pod_specs(rendered)
    worker = specs["gpuobs-worker"]["containers"][0]
    ping = " ".join(worker["livenessProbe"]["exec"]["command"])
    assert "celery -A gpuobs inspect ping --destination celery@$HOSTNAME --timeout" in ping
    assert worker["livenessProbe"]["timeoutSeconds"] > 20
    beat = specs["gpuobs-beat"]["containers"][0]
    assert beat["livenessProbe"]["exec"]["command"] == [
        "python",
        "manage.py",
        "healthcheck",
        "beat",
    ]
    assert (REPO_ROOT / "diagnosis/management/commands/healthcheck.py").is_file()


def test_beat_is_one_replica_replaced_with_recreate(rendered) -> None:
    beat = objects(rendered, "Deployment")["gpuobs-beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}


def test_each_mirror_pod_is_one_process_on_the_mirror_queue_of_its_ordinal(rendered) -> None:
    mirror = objects(rendered, "StatefulSet")["gpuobs-mirror"]
    command = " ".join(mirror["spec"]["template"]["spec"]["containers"][0]["command"])
    settings_map = objects(rendered, "ConfigMap")["gpuobs-settings"]["data"]
    assert '-Q "mirror-${HOSTNAME##*-}"' in command
    assert "--concurrency=1" in command
    assert mirror["spec"]["replicas"] == int(settings_map["GPUOBS_MIRROR_QUEUES"])


def test_only_the_job_migrates_and_the_others_wait_for_it(rendered) -> None:
    specs = pod_specs(rendered)
    job = " ".join(specs["gpuobs-migrate"]["containers"][0]["command"])
    assert "manage.py migrate --noinput" in job
    assert "manage.py ensure_admin" in job
    for name in ("gpuobs-web", "gpuobs-worker", "gpuobs-mirror", "gpuobs-beat"):
        command = " ".join(specs[name]["containers"][0]["command"])
        assert "migrate" not in command, name
        (wait,) = specs[name]["initContainers"]
        assert "manage.py migrate --check" in " ".join(wait["command"]), name


def test_settings_secrets_and_the_secrets_dir(rendered) -> None:
    settings = objects(rendered, "ConfigMap")["gpuobs-settings"]["data"]
    assert settings["DJANGO_DEBUG"] == "0"
    secrets_dir = settings["GPUOBS_SECRETS_DIR"]
    for name in ("gpuobs-web", "gpuobs-worker"):
        container = pod_specs(rendered)[name]["containers"][0]
        refs = [s.get("secretRef", {}).get("name") for s in container["envFrom"]]
        assert "gpuobs-env" in refs
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts[secrets_dir]["readOnly"] is True
        env = {e["name"]: e for e in container["env"]}
        assert env["DJANGO_ALLOWED_HOSTS"]["value"] == "$(GPUOBS_ALLOWED_HOSTS),$(POD_IP)"
    # no secret value in the package
    for obj in rendered["deploy/kubernetes/overlays/production"]:
        assert obj["kind"] != "Secret"
    # the settings module and the secrets reader use these names
    assert "GPUOBS_SECRETS_DIR" in (REPO_ROOT / "diagnosis/edge/secrets.py").read_text()


# -- RBAC: the docs' ClusterRole, reads in the base, writes in an overlay ---------------------


def documented_rules() -> list[dict]:
    text = (REPO_ROOT / "docs" / "integrations.md").read_text()
    block = re.search(r"### RBAC.*?```yaml\n(.*?)```", text, re.S).group(1)
    return yaml.safe_load(block)["rules"]


def rule_set(rules: list[dict]) -> set[tuple]:
    return {
        (group, resource, verb, name)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames", [None])
    }


WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def test_rbac_is_the_documented_cluster_role_split_into_reads_and_writes(rendered) -> None:
    read = rule_set(objects(rendered, "ClusterRole")["gpuobs-read"]["rules"])
    writes = rule_set(
        objects(rendered, "ClusterRole", "deploy/kubernetes/overlays/writes")["gpuobs-write"][
            "rules"
        ]
    )
    assert {verb for _, _, verb, _ in read} <= {"get", "list", "watch"}
    assert {verb for _, _, verb, _ in writes} <= WRITE_VERBS
    assert read | writes == rule_set(documented_rules())
    assert "gpuobs-write" not in objects(rendered, "ClusterRole")
    binding = objects(rendered, "ClusterRoleBinding")["gpuobs-read"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuobs", "namespace": "gpuobs"}
    ]


# -- monitoring: the ServiceMonitor, the PrometheusRule ---------------------------------------


def test_the_service_monitor_scrapes_metrics_with_a_token_and_honors_labels(rendered) -> None:
    where = "deploy/kubernetes/overlays/monitoring"
    (monitor,) = objects(rendered, "ServiceMonitor", where).values()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["scheme"] == "http"
    assert endpoint["honorLabels"] is True
    assert endpoint["authorization"]["credentials"] == {"name": "gpuobs-scrape", "key": "token"}
    service = objects(rendered, "Service")["gpuobs-web"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()


@pytest.fixture(scope="module")
def rule_file(rendered, tmp_path_factory) -> Path:
    where = "deploy/kubernetes/overlays/monitoring"
    rule = objects(rendered, "PrometheusRule", where)["gpuobs"]
    path = tmp_path_factory.mktemp("rules") / "gpuobs-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def promtool(*args: str) -> subprocess.CompletedProcess:
    binary = require_binary("promtool", "apt-get install prometheus")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)


def test_the_alert_rules_pass_promtool_check_rules(rule_file) -> None:
    result = promtool("check", "rules", str(rule_file))
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = {
        r["alert"] for g in yaml.safe_load(rule_file.read_text())["groups"] for r in g["rules"]
    }
    assert {
        "GpuobsMetricsAbsent",
        "GpuobsCyclesFailing",
        "GpuobsCyclesStale",
        "GpuobsCollectionCoverageLow",
        "GpuobsNotificationsFailing",
        "GpuobsWorkersMissing",
        "GpuobsBeatMissing",
    } <= alerts


def test_the_recording_rules_are_rendered_as_generated_and_pass_promtool(
    rendered, tmp_path
) -> None:
    where = "deploy/kubernetes/overlays/monitoring"
    rule = objects(rendered, "PrometheusRule", where)["gpuobs-recording"]
    assert rule["spec"]["groups"] == rule_groups_document(DEFAULT_WINDOW_S)
    path = tmp_path / "recording.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alert_rules_read_families_gpuobs_exports(rule_file) -> None:
    exported = set(
        re.findall(r'"(gpuobs_\w+)"', (REPO_ROOT / "diagnosis/api/metrics.py").read_text())
    )
    exported |= {f"{name}_bucket" for name in exported}
    groups = yaml.safe_load(rule_file.read_text())["groups"]
    used = {n for g in groups for r in g["rules"] for n in re.findall(r"gpuobs_\w+", r["expr"])}
    assert used
    assert used <= exported, used - exported


RULE_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'gpuobs_build_info{{version="0.1.0"}}'
        values: '1x30'
      - series: 'gpuobs_component_up{{component="worker", pod="web-a"}}'
        values: '1x5 0x20'
      - series: 'gpuobs_component_up{{component="beat", pod="web-a"}}'
        values: '1x30'
      - series: 'gpuobs_cycle_up{{cluster="outbound"}}'
        values: '0x30'
      - series: 'gpuobs_collection_coverage_ratio{{cluster="outbound"}}'
        values: '0.5x40'
    alert_rule_test:
      - eval_time: 20m
        alertname: GpuobsWorkersMissing
        exp_alerts:
          - exp_labels: {{severity: critical, component: worker}}
            exp_annotations:
              summary: No gpuobs worker takes tasks
              description: >-
                No worker ran beat's heartbeat task lately (/healthz?deep=1, manage.py
                healthcheck worker): no cycle runs.
      - eval_time: 20m
        alertname: GpuobsBeatMissing
        exp_alerts: []
      - eval_time: 20m
        alertname: GpuobsMetricsAbsent
        exp_alerts: []
      - eval_time: 10m
        alertname: GpuobsCyclesFailing
        exp_alerts: []
      - eval_time: 20m
        alertname: GpuobsCyclesFailing
        exp_alerts:
          - exp_labels: {{severity: warning, cluster: outbound}}
            exp_annotations:
              summary: gpuobs cycles of outbound fail
              description: >-
                The latest cycles of outbound failed for 15 minutes; the cluster's page and
                GET /api/v1/clusters/outbound/cycles say why.
  - interval: 1m
    input_series: []
    alert_rule_test:
      - eval_time: 15m
        alertname: GpuobsMetricsAbsent
        exp_alerts:
          - exp_labels: {{severity: critical}}
            exp_annotations:
              summary: No gpuobs metrics are scraped
              description: >-
                No series gpuobs_build_info for 10 minutes: no web pod is scraped (the
                ServiceMonitor, the gpuobs-scrape token, the NetworkPolicy) or none runs.
"""


def test_the_alert_rules_fire_when_they_should(rule_file) -> None:
    tests = rule_file.parent / "gpuobs-rules-test.yaml"
    tests.write_text(RULE_TESTS.format(rules=rule_file.name))
    result = promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr


# -- Grafana: the sidecar ConfigMap -----------------------------------------------------------


def test_the_dashboard_config_map_is_the_shipped_dashboard(rendered) -> None:
    where = "deploy/kubernetes/overlays/grafana-dashboards"
    (config,) = objects(rendered, "ConfigMap", where).values()
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (REPO_ROOT / "deploy" / "grafana" / "gpuobs.json").read_text(encoding="utf-8")
    assert config["data"]["gpuobs.json"] == shipped
    production = objects(rendered, "ConfigMap", "deploy/kubernetes/overlays/production")
    assert "gpuobs-grafana-dashboards" in production


# -- the worker's liveness probe, against a real worker ---------------------------------------


def probe_exits(command: list[str], env: dict[str, str]) -> int:
    return subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, timeout=90, check=False
    ).returncode


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_the_worker_probe_passes_a_live_worker_and_fails_a_hung_one(rendered, tmp_path) -> None:
    redis_url = os.environ.get("REDIS_URL") or pytest.skip("needs REDIS_URL (a real Redis)")
    worker = pod_specs(rendered)["gpuobs-worker"]["containers"][0]
    # the Deployment's own command (one child), and its probe as the kubelet runs it in the pod,
    # where $HOSTNAME is the pod's host name and celery's default node name celery@%h
    command = [
        *(a if a != "--concurrency=2" else "--concurrency=1" for a in worker["command"]),
        "--without-mingle",
    ]
    probe = worker["livenessProbe"]["exec"]["command"]
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_test_database(),
        "REDIS_URL": redis_url,
        "HOSTNAME": socket.gethostname(),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    process = start_logged(command, tmp_path / "worker.log", cwd=REPO_ROOT, env=env)
    try:
        wait_until(lambda: probe_exits(probe, env) == 0, "the probe's pong", timeout=90)
        os.killpg(process.pid, signal.SIGSTOP)  # hung: alive, but answers nothing
        assert probe_exits(probe, env) != 0
    finally:
        stop_group(process)


def test_the_readme_overlay_renders_and_is_valid(tmp_path) -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    deploy = readme[readme.index("## Deploy") : readme.index("## Configuration")]
    (overlay,) = re.findall(r"```yaml\n(.*?)```", deploy, re.S)
    shutil.copytree(REPO_ROOT / "deploy", tmp_path / "deploy")
    (tmp_path / "my-gpuobs").mkdir()
    (tmp_path / "my-gpuobs" / "kustomization.yaml").write_text(overlay)

    rendered = render(tmp_path / "my-gpuobs")

    for obj in rendered:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    images = {
        c["image"]
        for o in rendered
        if o["kind"] in ("Deployment", "Job")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.org/gpuobs:0.1.0"}
    (settings,) = [o for o in rendered if o["kind"] == "ConfigMap"]
    assert settings["data"]["GPUOBS_ALLOWED_HOSTS"].startswith("gpuobs.corp.example,")
