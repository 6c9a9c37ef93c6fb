"""docker-compose.yml and the Dockerfile, checked by reading them (no Docker engine here; with
the Compose plugin, ``docker compose config`` renders it with the example env), and the worker's
watchdog health check run against a real worker."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from diagnosis.actions.upkeep.health import write_heartbeat
from tests.conftest import REPO_ROOT, require_binary
from tests.support.celery_worker import database_url_of_test_database
from tests.support.processes import start_logged, stop_group, wait_until

APP_SERVICES = ("migrate", "web", "worker", "mirror-0", "beat")
LONG_RUNNING = ("postgres", "redis", "prometheus", "web", "worker", "mirror-0", "beat")
ALL_SERVICES = ("postgres", "redis", "prometheus", *APP_SERVICES)


@pytest.fixture(scope="module")
def services() -> dict[str, dict]:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    return compose["services"]


def command_text(service: dict) -> str:
    command = service.get("command", "")
    return command if isinstance(command, str) else " ".join(command)


def test_every_service_is_there(services: dict[str, dict]) -> None:
    assert set(ALL_SERVICES) <= set(services)


@pytest.mark.parametrize("name", ALL_SERVICES)
def test_images_are_pinned_to_a_version(services: dict[str, dict], name: str) -> None:
    image = services[name]["image"]
    repository, _, tag = image.rpartition(":")

    assert repository, f"{name}: image {image!r} has no tag"
    assert "/" not in tag, f"{name}: image {image!r} has no tag"
    assert re.search(r"\d", tag), f"{name}: image {image!r} is not pinned to a version"


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_every_service_has_a_health_check(services: dict[str, dict], name: str) -> None:
    test = services[name]["healthcheck"]["test"]

    assert test
    assert test != ["NONE"]


def test_app_services_build_from_the_one_dockerfile(services: dict[str, dict]) -> None:
    builds = {name: services[name]["build"] for name in APP_SERVICES}
    images = {services[name]["image"] for name in APP_SERVICES}

    for name, build in builds.items():
        assert build == {"context": ".", "dockerfile": "Dockerfile"}, name
    assert len(images) == 1
    assert (REPO_ROOT / "Dockerfile").is_file()


def test_app_commands_start_real_entry_points(services: dict[str, dict]) -> None:
    migrate = command_text(services["migrate"])
    assert "manage.py migrate --noinput" in migrate
    assert "manage.py ensure_admin" in migrate
    assert services["migrate"]["restart"] == "no"
    web = command_text(services["web"])
    assert "gunicorn gpuobs.wsgi:application" in web
    assert "migrate" not in web  # only the one-shot migrates: nothing races it
    assert (REPO_ROOT / "gpuobs" / "wsgi.py").is_file()
    assert (REPO_ROOT / "diagnosis/management/commands/ensure_admin.py").is_file()

    worker = command_text(services["worker"])
    assert worker.startswith("celery -A gpuobs --quiet worker")  # no banner in the log
    queues = worker.split("-Q ")[1].split()[0].split(",")
    assert sorted(queues) == ["actuate", "celery", "collect", "diagnose", "impact"]

    mirror = command_text(services["mirror-0"])
    assert mirror.startswith("celery -A gpuobs --quiet worker -Q mirror-0 --concurrency 1 ")
    assert services["mirror-0"]["healthcheck"] == services["worker"]["healthcheck"]

    assert command_text(services["beat"]).startswith("celery -A gpuobs beat")
    assert (REPO_ROOT / "gpuobs" / "celery.py").is_file()


@pytest.mark.parametrize("name", ["web", "worker", "beat"])
def test_app_services_start_after_the_migration_succeeded(services, name) -> None:
    assert services[name]["depends_on"]["migrate"] == {
        "condition": "service_completed_successfully"
    }
    assert "migrate" not in command_text(services[name])


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_read_the_whole_env_file_and_mount_the_secrets_dir(services, name) -> None:
    service = services[name]
    assert service["env_file"] == ".env"
    secrets_dir = service["environment"]["GPUOBS_SECRETS_DIR"]
    mounts = {v.split(":")[1]: v for v in service["volumes"]}
    assert mounts[secrets_dir].endswith(":ro")
    assert service["tmpfs"] == ["/tmp"]
    # the optional mounts are documented in place
    text = (REPO_ROOT / "docker-compose.yml").read_text()
    for mount in ("/etc/slurm:/etc/slurm:ro", "/run/munge:/run/munge:ro", "kubeconfig:ro"):
        assert mount in text, mount


def test_redis_never_evicts_the_broker_queues(services) -> None:
    command = command_text(services["redis"])
    assert "--maxmemory-policy noeviction" in command
    assert "--maxmemory ${GPUOBS_REDIS_MAXMEMORY:-512mb}" in command


def test_files_mounted_from_the_repo_exist(services: dict[str, dict]) -> None:
    mounted = [
        volume.split(":")[0]
        for service in services.values()
        for volume in service.get("volumes", [])
        if volume.startswith("./")
    ]

    assert "./deploy/prometheus.yml" in mounted
    for path in mounted:
        assert (REPO_ROOT / path).exists(), path


def test_prometheus_config_parses(services: dict[str, dict]) -> None:
    config = yaml.safe_load((REPO_ROOT / "deploy" / "prometheus.yml").read_text())

    assert {job["job_name"] for job in config["scrape_configs"]} >= {"prometheus", "dcgm"}


def test_the_bundled_prometheus_scrapes_gpuobs_with_a_token(services, tmp_path) -> None:
    config = yaml.safe_load((REPO_ROOT / "deploy" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    gpuobs = jobs["gpuobs-web"]
    assert gpuobs["scheme"] == "http"
    assert gpuobs["metrics_path"] == "/metrics"
    assert gpuobs["honor_labels"] is True
    assert gpuobs["static_configs"] == [{"targets": ["web:8000"]}]
    token = gpuobs["authorization"]["credentials_file"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    assert str(Path(token).parent) in mounted
    # the web answers to that Host (the scrape's) and the in-container health check's
    assert services["web"]["environment"]["DJANGO_ALLOWED_HOSTS"].endswith(",localhost,web")
    # Prometheus accepts it (promtool wants the token file to exist: a stand-in)
    promtool = require_binary("promtool", "apt-get install prometheus")
    stand_in = tmp_path / "token"
    stand_in.write_text("x\n")
    checked = tmp_path / "prometheus.yml"
    checked.write_text(
        (REPO_ROOT / "deploy" / "prometheus.yml").read_text().replace(token, str(stand_in))
    )
    result = subprocess.run(
        [promtool, "check", "config", str(checked)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_copies_only_what_exists() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    sources = [
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY ")
        for source in shlex.split(line)[1:-1]
    ]

    assert "requirements.txt" in sources
    for source in sources:
        assert (REPO_ROOT / source).exists(), source


def test_env_template_names_every_required_variable(services: dict[str, dict]) -> None:
    required = set()
    for service in services.values():
        for value in (service.get("environment") or {}).values():
            required |= set(re.findall(r"\$\{(\w+):\?", str(value)))
    template = (REPO_ROOT / "deploy" / "env.example").read_text()

    assert required == {"DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "POSTGRES_PASSWORD"}
    for name in required:
        assert re.search(rf"^{name}=", template, re.MULTILINE), name


def example_env(tmp_path: Path) -> Path:
    """deploy/env.example with its required values filled, as an operator's .env."""
    filled = {
        "DJANGO_SECRET_KEY": "k" * 64,
        "POSTGRES_PASSWORD": "p" * 24,
        "GPUOBS_ADMIN_PASSWORD": "a" * 16,
    }
    lines = []
    for line in (REPO_ROOT / "deploy" / "env.example").read_text().splitlines():
        name = line.split("=", 1)[0]
        lines.append(f"{name}={filled[name]}" if name in filled else line)
    path = tmp_path / ".env"
    path.write_text("\n".join(lines) + "\n")
    return path


def compose_command() -> list[str]:
    """``docker compose`` (the v2 plugin) where it is installed, else Debian's ``docker-compose``
    (v1.29, which reads the same file and the same ``--env-file``)."""
    docker = shutil.which("docker")
    if docker:
        version = subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if version.returncode == 0:
            return [docker, "compose"]
    return [require_binary("docker-compose", "apt-get install docker-compose")]


def test_docker_compose_config_renders_with_the_example_env(tmp_path) -> None:
    compose = compose_command()
    env = example_env(tmp_path)
    (tmp_path / "docker-compose.yml").write_text((REPO_ROOT / "docker-compose.yml").read_text())
    for folder in ("deploy/secrets/gpuobs", "deploy/secrets/prometheus"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "deploy" / "prometheus.yml").write_text("")
    result = subprocess.run(
        [*compose, "--env-file", str(env), "config", "--quiet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def strings(node) -> list[str]:
    if isinstance(node, dict):
        return [t for k, v in node.items() for t in (*strings(k), *strings(v))]
    if isinstance(node, list):
        return [t for v in node for t in strings(v)]
    return [node] if isinstance(node, str) else []


def test_every_variable_the_file_interpolates_has_a_default_or_is_required() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    text = "\n".join(strings(compose)).replace("$$", "")
    references = re.findall(r"\$\{(\w+)(:[-?][^}]*)?\}|\$(\w+)", text)
    assert references
    for name, modifier, bare in references:
        assert not bare, f"${bare}: write ${{{bare}}} or escape it as $${bare}"
        assert modifier, f"${{{name}}} has neither a default (:-) nor a required message (:?)"


# -- the worker's watchdog, against a real worker ---------------------------------------------


def unescaped(test: list[str]) -> str:
    """A CMD-SHELL health check as the container's shell gets it ($$ is compose's $)."""
    assert test[0] == "CMD-SHELL"
    return test[1].replace("$$", "$")


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_the_worker_watchdog_kills_a_hung_worker(services, tmp_path, settings) -> None:
    redis_url = os.environ.get("REDIS_URL") or pytest.skip("needs REDIS_URL (a real Redis)")
    settings.REDIS_URL = redis_url  # where write_heartbeat writes, as the worker would
    pidfile = str(tmp_path / "celery-worker.pid")
    command = [
        part.replace("${GPUOBS_WORKER_CONCURRENCY:-2}", "1").replace(
            "/tmp/celery-worker.pid", pidfile
        )
        for part in services["worker"]["command"]
    ]
    check = unescaped(services["worker"]["healthcheck"]["test"]).replace(
        "/tmp/celery-worker.pid", pidfile
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_test_database(),
        "REDIS_URL": redis_url,
        "HOSTNAME": socket.gethostname(),  # docker sets it to the container's host name
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    worker = start_logged(command, tmp_path / "worker.log", cwd=REPO_ROOT, env=env)

    ping = check.split("||")[0]  # the probe alone, while the worker starts (compose's
    # first check comes one interval, 60 s, after the start)

    try:
        wait_until(lambda: run_check(ping, env) == 0, "the worker's pong", timeout=120)
        write_heartbeat("worker")  # as the heartbeat task beat sends would
        assert run_check(check, env) == 0
        assert worker.poll() is None
        os.kill(worker.pid, signal.SIGSTOP)  # hung: alive, answers nothing
        assert run_check(check, env) != 0
        assert worker.wait(timeout=10) == -signal.SIGKILL  # the watchdog ended it
    finally:
        stop_group(worker)


def run_check(check: str, env: dict[str, str]) -> int:
    return subprocess.run(
        ["sh", "-c", check], cwd=REPO_ROOT, env=env, capture_output=True, timeout=90, check=False
    ).returncode
