"""Issue #32 item 14: `make demo` on a machine whose port 8000 is taken said nothing (the web
server's child logged the error and the cycles ran on without a UI). It now stops before
anything starts, saying the port is taken and how to choose another (DEMO_ADDRESS)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command

from diagnosis.management.commands.demo import refuse_taken_address

pytestmark = pytest.mark.django_db


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_taken_port_stops_the_demo_naming_the_way_out(taken_port: int) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("demo", "--serve", f"127.0.0.1:{taken_port}")

    message = str(refused.value)
    assert f"port {taken_port}" in message
    assert f"make demo DEMO_ADDRESS=127.0.0.1:{taken_port + 1}" in message


def test_a_free_port_is_not_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refuse_taken_address(f"127.0.0.1:{port}")  # no exception


def test_an_address_without_a_port_is_refused_as_such() -> None:
    with pytest.raises(CommandError, match="expected HOST:PORT"):
        refuse_taken_address("localhost")
