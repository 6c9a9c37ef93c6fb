"""Issue #12, defect 5: 50 wrong passwords lock the name out (the right one then fails too), each
failure is logged, and the API throttles its clients. Issue #28, item 5: failed credentials and
anonymous callers are throttled before authentication, the counts are in the shared Redis (every
worker counts into one number), and behind a trusted reverse proxy a lockout is the client's,
not everyone's (diagnosis/throttling.py)."""

from __future__ import annotations

import json
import logging

import pytest
import redis
from django.core.cache import caches
from django.core.management import call_command
from django.test import Client, RequestFactory

from diagnosis import throttling
from diagnosis.throttling import client_address
from tests.app.deploy.test_settings import clean_env
from tests.support.commands import manage
from tests.support.throttles import api_rates
from tests.support.world import DEFAULT_PASSWORD, logged_in_client, token_client

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


def attempt(client: Client, password: str):
    return client.post(LOGIN, {"username": "bob", "password": password})


def test_fifty_wrong_passwords_lock_the_name_out_and_are_logged(bob, caplog):
    client = Client()
    with caplog.at_level(logging.INFO):
        for n in range(50):
            attempt(client, f"guess-{n}")
    response = attempt(client, DEFAULT_PASSWORD)
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    assert any("bob" in r.getMessage() and r.name.startswith("axes") for r in caplog.records)


def test_the_right_password_before_the_limit_logs_in(bob):
    client = Client()
    attempt(client, "one-wrong-guess")
    assert attempt(client, DEFAULT_PASSWORD).status_code == 302
    assert client.session["_auth_user_id"] == str(bob.pk)


def test_an_api_client_beyond_its_rate_gets_429(bob, settings):
    api_rates(settings, user="3/min")
    client = logged_in_client(bob)
    codes = [client.get("/api/v1/clusters/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]


def test_failed_tokens_are_throttled_before_any_token_is_checked(settings):
    api_rates(settings, failed_credentials="5/min")
    client = Client(HTTP_AUTHORIZATION="Token not-a-token")
    responses = [client.get("/api/v1/clusters/") for _ in range(8)]
    assert [r.status_code for r in responses] == [401] * 5 + [429] * 3
    assert int(responses[-1]["Retry-After"]) > 0


def test_the_failed_token_limit_is_the_client_address(bob, settings):
    api_rates(settings, failed_credentials="2/min")
    bad = Client(HTTP_AUTHORIZATION="Bearer not-a-token", REMOTE_ADDR="10.9.0.1")
    assert [bad.get("/api/v1/clusters/").status_code for _ in range(3)] == [401, 401, 429]
    good = token_client(bob)
    assert good.get("/api/v1/clusters/", REMOTE_ADDR="10.9.0.2").status_code == 200


def test_anonymous_callers_are_throttled_before_the_401(settings):
    api_rates(settings, anon="3/min")
    codes = [Client().get("/api/v1/clusters/").status_code for _ in range(4)]
    assert codes == [401, 401, 401, 429]


def test_the_user_rate_is_counted_in_the_shared_redis_not_per_worker(bob, settings, redis_url):
    api_rates(settings, user="3/min")
    client = token_client(bob)
    assert [client.get("/api/v1/clusters/").status_code for _ in range(3)] == [200] * 3
    caches["default"].clear()  # another worker: none of this process's memory
    assert token_client(bob).get("/api/v1/clusters/").status_code == 429
    prefix = settings.CACHES["throttle"]["KEY_PREFIX"]
    assert redis.Redis.from_url(redis_url).keys(f"{prefix}:*throttle_user_{bob.pk}*")


def test_the_embedded_mode_counts_in_the_process_memory():
    script = (
        "import json; from django.conf import settings as s;"
        "print(json.dumps(s.CACHES['throttle']['BACKEND']))"
    )
    result = manage("shell", "-c", script, text=True, env=clean_env())
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]).endswith("LocMemCache")


# -- the lockout behind a reverse proxy -------------------------------------------------------


def from_address(address: str, remote: str = "127.0.0.1") -> Client:
    """A browser whose requests reach gpuobs through the proxy at ``remote``."""
    return Client(REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=address)


def test_behind_a_trusted_proxy_wrong_passwords_lock_out_their_client_only(erin, settings):
    settings.GPUOBS_TRUSTED_PROXIES = ["127.0.0.1/32"]
    attacker = from_address("203.0.113.7")
    for n in range(5):
        attacker.post(LOGIN, {"username": "erin", "password": f"guess-{n}"})
    assert (
        attacker.post(LOGIN, {"username": "erin", "password": DEFAULT_PASSWORD}).status_code == 429
    )
    on_call = from_address("198.51.100.2")
    assert (
        on_call.post(LOGIN, {"username": "erin", "password": DEFAULT_PASSWORD}).status_code == 302
    )


def test_a_peer_that_is_no_trusted_proxy_cannot_choose_its_address(erin):
    for n in range(5):
        from_address(f"192.0.2.{n}", remote="10.1.2.3").post(
            LOGIN, {"username": "erin", "password": f"guess-{n}"}
        )
    again = from_address("192.0.2.99", remote="10.1.2.3")
    assert again.post(LOGIN, {"username": "erin", "password": DEFAULT_PASSWORD}).status_code == 429


@pytest.mark.parametrize(
    ("remote", "forwarded", "client"),
    [
        ("10.0.0.5", "", "10.0.0.5"),
        ("10.0.0.5", "203.0.113.7", "10.0.0.5"),  # not a trusted proxy: the header is ignored
        ("127.0.0.1", "203.0.113.7", "203.0.113.7"),
        ("127.0.0.1", "6.6.6.6, 203.0.113.7", "203.0.113.7"),  # the left part is the client's
        ("127.0.0.1", "203.0.113.7, 127.0.0.1", "203.0.113.7"),  # two trusted hops
        ("127.0.0.1", "not-an-address", "127.0.0.1"),
    ],
)
def test_the_client_address(settings, remote, forwarded, client):
    settings.GPUOBS_TRUSTED_PROXIES = ["127.0.0.0/8"]
    request = RequestFactory().get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == client


def test_an_admin_unlocks_one_user(erin):
    client = Client()
    for n in range(5):
        client.post(LOGIN, {"username": "erin", "password": f"guess-{n}"})
    call_command("axes_reset_username", "erin")
    assert client.post(LOGIN, {"username": "erin", "password": DEFAULT_PASSWORD}).status_code == 302


class Clock:
    """The login delay's clock (``diagnosis.throttling._now``), moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch, settings) -> Clock:
    settings.GPUOBS_TRUSTED_PROXIES = ["127.0.0.1/32"]
    clock = Clock()
    monkeypatch.setattr(throttling, "_now", clock)
    return clock


def guesses(name: str, count: int, first_address: int = 0) -> None:
    """``count`` wrong passwords for ``name``, each from an address of its own."""
    for n in range(first_address, first_address + count):
        from_address(f"203.0.113.{n}").post(LOGIN, {"username": name, "password": f"guess-{n}"})


def test_guesses_from_many_addresses_make_the_name_wait(bob, clock):
    guesses("bob", 6)  # no address failed twice: the per-address lockout never starts
    refused = from_address("198.51.100.2").post(
        LOGIN, {"username": "bob", "password": DEFAULT_PASSWORD}
    )
    assert refused.status_code == 429
    assert refused["Retry-After"] == "1"  # one over the limit of 5: 1 s after the latest guess
    assert "try again in 1 s" in refused.content.decode()
    clock.now += 1.5
    again = from_address("198.51.100.2").post(
        LOGIN, {"username": "bob", "password": DEFAULT_PASSWORD}
    )
    assert again.status_code == 302


def test_a_try_refused_by_the_delay_does_not_lengthen_it(bob, clock):
    guesses("bob", 6)
    for _ in range(5):
        assert (
            from_address("198.51.100.9")
            .post(LOGIN, {"username": "bob", "password": "more"})
            .status_code
            == 429
        )
    clock.now += 1.1
    assert throttling.login_wait_s("bob") == 0


def test_the_delay_doubles_and_stops_at_a_minute(bob, clock):
    guesses("bob", 6)
    assert throttling.login_wait_s("bob") == 1
    clock.now += 1
    guesses("bob", 1, first_address=50)
    assert throttling.login_wait_s("bob") == 2
    for n in range(10):
        clock.now += 61
        guesses("bob", 1, first_address=60 + n)
    assert throttling.login_wait_s("bob") == throttling.LOGIN_DELAY_MAX_S


def test_a_good_login_forgets_the_failures(bob, clock):
    guesses("bob", 6)
    clock.now += 2
    assert (
        from_address("198.51.100.2")
        .post(LOGIN, {"username": "bob", "password": DEFAULT_PASSWORD})
        .status_code
        == 302
    )
    guesses("bob", 1, first_address=80)
    assert throttling.login_wait_s("bob") == 0


def test_an_admin_unlocks_the_name_everywhere(bob, clock):
    attacker = from_address("203.0.113.200")
    for n in range(5):  # the lockout of bob from this address
        attacker.post(LOGIN, {"username": "bob", "password": f"guess-{n}"})
    guesses("bob", 1, first_address=201)  # and one more from elsewhere: the name's delay
    assert throttling.login_wait_s("bob") > 0

    call_command("users", "unlock", "bob")

    assert throttling.login_wait_s("bob") == 0
    assert (
        attacker.post(LOGIN, {"username": "bob", "password": DEFAULT_PASSWORD}).status_code == 302
    )
