"""Issue #12, defect 8: a "Prometheus" answer is capped on the wire and decoded -- a small gzip
that inflates to 300 MB is refused without being inflated."""

from __future__ import annotations

import io
import time
import zlib

import pytest

from diagnosis.edge.sources.prometheus import client
from diagnosis.edge.sources.prometheus.wire import PrometheusError


def gzip_bomb(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1024 * 1024)
    return b"".join(packer.compress(block) for _ in range(megabytes)) + packer.flush()


def test_a_gzip_bomb_is_refused_without_inflating_it():
    bomb = gzip_bomb(300)
    assert len(bomb) < 400 * 1024  # ~300 KB on the wire
    started = (
        time.process_time()
    )  # this process's CPU: not other processes' load (it failed at load 6)
    with pytest.raises(PrometheusError, match="larger than 256 MiB decoded") as raised:
        client._decode(bomb, "gzip")
    assert raised.value.permanent
    assert time.process_time() - started < 5


def test_an_ordinary_gzip_answer_is_decoded():
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    assert client._decode(packer.compress(body) + packer.flush(), "gzip") == body


class Raw(io.BytesIO):
    def read(self, amount=-1, decode_content=False):  # urllib3's signature
        return super().read(amount)


def test_an_answer_over_the_wire_cap_is_refused_while_read():
    with pytest.raises(PrometheusError, match="on the wire"):
        client._read_capped(Raw(b"x" * 3000), 2048)


def test_parallel_answers_share_one_decoded_budget():
    """Issue #28: four parallel bombs no longer cost four times the cap: the answers of one
    collection held at once share one budget, given back as each is parsed."""
    budget = client.DecodeBudget(limit=8 * 1024 * 1024)
    first = client._decode(gzip_bomb(5), "gzip", budget=budget)
    assert len(first) == 5 * 1024 * 1024
    with pytest.raises(PrometheusError, match="with the collection's other answers"):
        client._decode(gzip_bomb(5), "gzip", budget=budget)
    budget.give(len(first))
    assert len(client._decode(gzip_bomb(5), "gzip", budget=budget)) == 5 * 1024 * 1024
