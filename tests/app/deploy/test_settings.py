"""Settings come from the environment: each case runs manage.py in a subprocess with a clean env."""

from __future__ import annotations

import json
import os
import secrets

import pytest

from tests.conftest import REPO_ROOT, require_binary
from tests.support.commands import manage

PRODUCTION_ENV = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
    "DJANGO_ALLOWED_HOSTS": "gpuobs.example.org",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://gpuobs.example.org",
    "DATABASE_URL": "postgres://gpuobs@db.example.org:5432/gpuobs",
    "REDIS_URL": "redis://redis.example.org:6379/0",
}


def clean_env(**overrides: str) -> dict[str, str]:
    """This process's environment without any gpuobs setting, plus the given ones."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "GPUOBS_")) and name not in {"DATABASE_URL", "REDIS_URL"}
    }
    env["DJANGO_SETTINGS_MODULE"] = "gpuobs.settings"
    env.update(overrides)
    return env


def read_settings(env: dict[str, str]) -> dict:
    script = (
        "import json; from django.conf import settings as s; print(json.dumps({"
        "'engine': s.DATABASES['default']['ENGINE'], 'name': str(s.DATABASES['default']['NAME']),"
        "'eager': s.CELERY_TASK_ALWAYS_EAGER, 'broker': s.CELERY_BROKER_URL, 'debug': s.DEBUG,"
        "'ssl_redirect': s.SECURE_SSL_REDIRECT, 'secure_cookies': s.SESSION_COOKIE_SECURE,"
        "'proxy_header': getattr(s, 'SECURE_PROXY_SSL_HEADER', None)}))"
    )
    result = manage("shell", "-c", script, text=True, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_embedded_mode_is_sqlite_under_var_and_eager_tasks() -> None:
    embedded = read_settings(clean_env())

    assert embedded["engine"] == "django.db.backends.sqlite3"
    assert embedded["name"] == str(REPO_ROOT / "var" / "gpuobs.sqlite3")
    assert embedded["eager"] is True
    assert embedded["debug"] is True
    assert embedded["ssl_redirect"] is False


def test_production_env_selects_postgresql_redis_and_secure_transport() -> None:
    production = read_settings(
        clean_env(**PRODUCTION_ENV, DJANGO_SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https")
    )

    assert production["engine"] == "django.db.backends.postgresql"
    assert production["name"] == "gpuobs"
    assert production["eager"] is False
    assert production["broker"] == PRODUCTION_ENV["REDIS_URL"]
    assert production["debug"] is False
    assert production["ssl_redirect"] is True
    assert production["secure_cookies"] is True
    assert production["proxy_header"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_check_deploy_passes_without_a_single_warning_in_production() -> None:
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING", text=True, env=clean_env(**PRODUCTION_ENV)
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues (0 silenced)" in result.stdout


def test_check_deploy_flags_the_embedded_defaults() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", text=True, env=clean_env())

    assert result.returncode != 0
    assert "security.W018" in result.stderr  # DEBUG on


@pytest.mark.parametrize("missing", ["DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS"])
def test_production_refuses_to_start_without_required_variable(missing: str) -> None:
    env = clean_env(**PRODUCTION_ENV)
    del env[missing]

    result = manage("check", text=True, env=env)

    assert result.returncode != 0
    assert f"{missing} must be set when DJANGO_DEBUG=0" in result.stderr


def test_a_malformed_boolean_is_named_in_the_error() -> None:
    result = manage("check", text=True, env=clean_env(DJANGO_DEBUG="maybe"))

    assert result.returncode != 0
    assert "DJANGO_DEBUG must be 1 or 0" in result.stderr


def test_require_binary_returns_the_path_of_an_installed_program() -> None:
    assert require_binary("sh", "apt-get install dash").endswith("/sh")


def test_require_binary_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")

    with pytest.raises(pytest.fail.Exception, match="apt-get install no-such-tool"):
        require_binary("gpuobs-no-such-tool", "apt-get install no-such-tool")


def test_require_binary_skips_outside_ci_naming_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)

    with pytest.raises(pytest.skip.Exception, match="apt-get install no-such-tool"):
        require_binary("gpuobs-no-such-tool", "apt-get install no-such-tool")
