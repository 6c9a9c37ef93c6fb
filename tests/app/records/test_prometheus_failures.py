"""How the Prometheus source fails: a server that is down, slow, failing (5xx), refusing a query
(400, 422) or answering with warnings -- each against a real Prometheus (through a proxy that
injects the failure where Prometheus cannot be made to fail on cue)."""

from __future__ import annotations

import time

import pytest

from diagnosis.edge.sources.prometheus import PrometheusConfig, PrometheusError, collect_document
from diagnosis.edge.sources.prometheus.client import PrometheusClient
from tests.edge.test_prometheus import scheduler_doc

pytestmark = pytest.mark.prometheus

NODES = [("st-0", 4)]


def settings(url: str, **more) -> PrometheusConfig:
    return PrometheusConfig.parse(
        {"url": url, "matchers": {"cluster": "steady"}, "backoff_s": 0, **more}
    )


def collect(config: PrometheusConfig, planted) -> dict:
    return collect_document(config, scheduler_doc(NODES), as_of=planted.as_of)


def test_prometheus_down_is_a_transient_error_after_bounded_retries(
    make_prometheus, planted_history
):
    server = make_prometheus()
    server.stop()
    with pytest.raises(PrometheusError) as raised:
        collect(settings(server.url, retries=2), planted_history)
    assert raised.value.permanent is False
    assert "is unreachable" in str(raised.value)
    assert "after 3 attempts" in str(raised.value)


def test_a_prometheus_that_does_not_answer_times_out(make_prometheus, planted_history):
    server = make_prometheus()
    server.pause()
    try:
        with pytest.raises(PrometheusError) as raised:
            collect(settings(server.url, timeout_s=0.5, retries=1), planted_history)
    finally:
        server.resume()
    assert raised.value.permanent is False
    assert "did not answer within 0.5 s (after 2 attempts)" in str(raised.value)


def test_server_errors_are_retried_with_backoff(faulty_proxy, planted_history):
    proxy = faulty_proxy(status=503, failures=2)
    document = collect(settings(proxy.url, retries=2), planted_history)
    assert document["collection"]["retries"] == 2
    assert document["collection"]["coverage"] == 1.0


def test_server_errors_beyond_the_retries_fail_the_collection(faulty_proxy, planted_history):
    proxy = faulty_proxy(status=502)
    with pytest.raises(PrometheusError) as raised:
        collect(settings(proxy.url, retries=1, parallel_queries=1), planted_history)
    assert raised.value.permanent is False
    assert "HTTP 502" in str(raised.value)
    assert "(unavailable: injected)" in str(raised.value)


def test_a_query_prometheus_cannot_execute_fails_at_once(make_prometheus, planted_history):
    server = make_prometheus(args=["--query.max-samples=50"])
    with pytest.raises(PrometheusError) as raised:
        collect(settings(server.url, retries=3), planted_history)
    assert raised.value.permanent is True
    assert raised.value.status == 422
    assert "too many samples" in str(raised.value)
    assert "attempt" not in str(raised.value)  # not retried


def test_a_malformed_query_is_refused_as_bad_data(prometheus):
    with PrometheusClient(settings(prometheus.url)) as client, pytest.raises(PrometheusError) as e:
        client.instant("sum(", 0, "test")
    assert (e.value.status, e.value.error_type, e.value.permanent) == (400, "bad_data", True)


def test_warnings_are_kept_in_the_report(make_prometheus, planted_history):
    config = (
        "global:\n  scrape_interval: 15s\n"
        "remote_read:\n  - url: http://127.0.0.1:1/api/v1/read\n    read_recent: true\n"
    )
    server = make_prometheus(config=config)
    document = collect(settings(server.url), planted_history)
    warnings = document["collection"]["warnings"]
    assert len(warnings) == 1
    assert "remote_read" in warnings[0]
    assert document["collection"]["coverage"] == 1.0


def test_a_collection_gives_up_at_its_deadline(make_prometheus, planted_history):
    server = make_prometheus()
    server.pause()
    started = time.monotonic()
    try:
        with pytest.raises(PrometheusError) as raised:
            collect(settings(server.url, timeout_s=1, retries=10, deadline_s=2), planted_history)
    finally:
        server.resume()
    # the 2 s deadline, with room for a loaded machine, well before eleven 1 s attempts end
    assert time.monotonic() - started < 6
    assert "did not answer within" in str(raised.value)
