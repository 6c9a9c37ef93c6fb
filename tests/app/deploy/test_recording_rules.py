"""The shipped recording rules (deploy/prometheus-rules/, the monitoring component's
PrometheusRule) are what ``manage.py recording_rules`` generates, and Prometheus loads them."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from diagnosis.management.commands.recording_rules import PROMETHEUS_RULE, RULE_FILE, shipped
from tests.conftest import REPO_ROOT, require_binary


def test_the_shipped_files_are_the_generators() -> None:
    for path, text in shipped().items():
        assert (REPO_ROOT / path).read_text() == text, "run manage.py recording_rules --write"
    out = StringIO()
    call_command("recording_rules", "--check", stdout=out)
    assert "up to date" in out.getvalue()


def test_check_fails_when_a_shipped_file_drifts(tmp_path, settings) -> None:
    for path in (RULE_FILE, PROMETHEUS_RULE):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / path, tmp_path / path)
    drifted = tmp_path / RULE_FILE
    drifted.write_text(drifted.read_text().replace("[900s]", "[600s]", 1))
    settings.BASE_DIR = tmp_path
    with pytest.raises(CommandError, match=str(RULE_FILE)) as raised:
        call_command("recording_rules", "--check", stdout=StringIO())
    assert raised.value.returncode == 1


def test_the_command_prints_the_rules_of_a_window(tmp_path) -> None:
    out = StringIO()
    call_command("recording_rules", "--window", "600", "--interval", "30s", stdout=out)
    (group,) = yaml.safe_load(out.getvalue())["groups"]
    assert (group["name"], group["interval"]) == ("gpuobs-recording-600s", "30s")
    assert all("900s" not in rule["expr"] for rule in group["rules"])
    path = tmp_path / "rules.yml"
    path.write_text(out.getvalue())
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--window", "10"], "--window"), (["--interval", "soon"], "--interval")],
)
def test_bad_options_exit_2(argv, named) -> None:
    with pytest.raises(CommandError, match=named) as raised:
        call_command("recording_rules", *argv, stdout=StringIO())
    assert raised.value.returncode == 2


def test_the_compose_prometheus_loads_the_shipped_rule_file(tmp_path) -> None:
    config = yaml.safe_load((REPO_ROOT / "deploy" / "prometheus.yml").read_text())
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    mounts = dict(v.split(":")[:2] for v in compose["services"]["prometheus"]["volumes"])
    (pattern,) = config["rule_files"]
    mounted = {Path(target): source for source, target in mounts.items()}
    source = mounted[Path(pattern).parent]
    assert Path(source).resolve() == (REPO_ROOT / RULE_FILE.parent).resolve()
    assert fnmatch.fnmatch(f"{Path(pattern).parent}/{RULE_FILE.name}", pattern)
    # Prometheus loads it: promtool check config reads the rule files it names
    checked = {**config, "rule_files": [str(REPO_ROOT / RULE_FILE)], "scrape_configs": []}
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(checked))
    result = _promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    assert "rules found" in result.stdout


def _promtool(*args: str) -> subprocess.CompletedProcess:
    binary = require_binary("promtool", "apt-get install prometheus")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)
