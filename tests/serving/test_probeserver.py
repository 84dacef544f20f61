"""The node parts' probe port: /healthz follows ready(), /metrics the registry, anything else is 404."""

from __future__ import annotations

import urllib.error
import urllib.request

import prometheus_client

from webhook.devcluster.controlplane import free_port
from webhook.serving import probeserver


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_healthz_is_503_until_ready_and_metrics_and_unknown_paths_answer():
    ready = [False]
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Counter("gpushare_probe_test", "a counter", registry=registry).inc()
    port = free_port()
    httpd = probeserver.serve(port, lambda: ready[0], registry)
    try:
        assert _get(port, "/healthz") == (503, b"not registered\n")
        ready[0] = True
        assert _get(port, "/healthz") == (200, b"ok\n")
        status, body = _get(port, "/metrics")
        assert status == 200 and b"gpushare_probe_test_total 1.0" in body
        assert _get(port, "/nope")[0] == 404
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_part_adds_get_routes_of_its_own_or_answers_one_itself_and_the_query_string_is_ignored():
    registry = prometheus_client.CollectorRegistry()
    port = free_port()
    routes = {
        "/usage": lambda: (503, "application/json", b"{}"),
        "/metrics": lambda: (200, "text/plain", b"own_metric 1\n"),
    }
    httpd = probeserver.serve(port, lambda: True, registry, routes)
    try:
        assert _get(port, "/usage?node=a") == (503, b"{}")
        assert _get(port, "/metrics?x=1") == (200, b"own_metric 1\n")
        assert _get(port, "/healthz") == (200, b"ok\n")
        assert _get(port, "/usage/more")[0] == 404
    finally:
        httpd.shutdown()
        httpd.server_close()
