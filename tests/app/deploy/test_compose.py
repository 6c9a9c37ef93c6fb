"""docker-compose.yml and the Dockerfile, checked by reading them (no Docker engine here)."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from tests.conftest import REPO_ROOT

APP_SERVICES = ("web", "worker", "beat")
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


@pytest.mark.parametrize("name", ALL_SERVICES)
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
    web = command_text(services["web"])
    assert "gunicorn gpuobs.wsgi:application" in web
    assert "manage.py migrate" in web
    assert "manage.py ensure_admin" in web
    assert (REPO_ROOT / "gpuobs" / "wsgi.py").is_file()
    assert (REPO_ROOT / "diagnosis/management/commands/ensure_admin.py").is_file()

    worker = command_text(services["worker"])
    assert worker.startswith("celery -A gpuobs --quiet worker")  # no banner in the log
    queues = worker.split("-Q ")[1].split()[0].split(",")
    assert sorted(queues) == ["actuate", "celery", "collect", "diagnose", "impact"]

    assert command_text(services["beat"]).startswith("celery -A gpuobs beat")
    assert (REPO_ROOT / "gpuobs" / "celery.py").is_file()


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
