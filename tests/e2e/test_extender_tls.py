"""The extender the chart configures, reached as kube-scheduler reaches it: HTTPS, and filter, prioritize,
bind and inspect only for a caller with the client certificate of the chart's Secret. (That the real
kube-scheduler schedules through it at all is test_scheduling.py: it runs with the chart's tlsConfig.)"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import objects
from tests.e2e.bed import FULLNAME, Bed
from webhook.core.pki import certificates
from webhook.devcluster import mounts
from webhook.devcluster.process import http_status
from webhook.kube import rest

PREFIX = "/gpushare-scheduler"


def _context(bed: Bed, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    """What kube-scheduler builds from tlsConfig: trust caFile, present the client pair if any."""
    context = ssl.create_default_context(cafile=_scheduler_tls(bed)["caFile"])
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


def _scheduler_tls(bed: Bed) -> dict[str, str]:
    """The scheduler's extender tlsConfig, its paths pointing at the files of its mounted Secret."""
    config = yaml.safe_load(bed.configmap(f"{FULLNAME}-scheduler", "config.yaml"))
    (extender,) = config["extenders"]
    files = bed.mounts(f"{FULLNAME}-scheduler")
    tls: dict[str, str] = extender["tlsConfig"]
    return {k: mounts.on_host(v, files) if k.endswith("File") else v for k, v in tls.items()}


def _call(bed: Bed, method: str, path: str, body: Any, context: ssl.SSLContext) -> tuple[int, Any]:
    """Dial 127.0.0.1 as urlPrefix says, check the certificate against serverName as kube-scheduler does."""
    server_name = _scheduler_tls(bed)["serverName"]
    conn = http.client.HTTPConnection("127.0.0.1", bed.extender_port, timeout=10)
    raw = socket.create_connection(("127.0.0.1", bed.extender_port), timeout=10)
    conn.sock = context.wrap_socket(raw, server_hostname=server_name)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def bind_as_another_name(bed: Bed, folder: Path) -> tuple[int, Any]:
    """A bind with a client certificate the extender's CA signed for another name (CN=ci-robot)."""
    assert bed.cp.pki is not None
    other = certificates.generate_client(bed.cp.pki.ca(), "ci-robot", [], datetime.now(UTC))
    cert, key = folder / "c.crt", folder / "c.key"
    cert.write_bytes(other.cert_pem)
    key.write_bytes(other.key_pem)
    bind = {"PodName": "x", "PodNamespace": "default", "PodUID": "", "Node": "n"}
    return _call(bed, "POST", f"{PREFIX}/bind", bind, _context(bed, (cert, key)))


@pytest.fixture(scope="module")
def scheduler_pair(bed: Bed) -> tuple[Path, Path]:
    tls = _scheduler_tls(bed)
    return Path(tls["certFile"]), Path(tls["keyFile"])


def test_a_caller_without_a_client_certificate_gets_no_further_than_the_handshake(bed: Bed) -> None:
    # The chart serves HTTP/2 (the bed sets extender.http2 as a default install has it): the certificate
    # is required at the handshake, and the kubelet probes a plain port where nothing changes the cluster.
    assert "--http2" in bed.container_args("deployments", f"{FULLNAME}-extender")
    anonymous = _context(bed, None)
    bind = {"PodName": "x", "PodNamespace": "default", "PodUID": "", "Node": "n"}
    for method, path, body in (
        ("POST", f"{PREFIX}/filter", {"Pod": {}, "NodeNames": []}),
        ("POST", f"{PREFIX}/bind", bind),
        ("GET", f"{PREFIX}/inspect", None),
        ("GET", "/healthz", None),
    ):
        with pytest.raises(OSError):  # TLS alert "certificate required", or a reset
            _call(bed, method, path, body, anonymous)
    for path in ("/healthz", "/readyz", "/metrics"):
        url, context = bed.extender_probe_url(path)
        assert context is None and http_status(url, None) == 200
    url, _ = bed.extender_probe_url(f"{PREFIX}/inspect")
    assert http_status(url, None) == 404  # the probe port has no scheduler verb


def test_kube_scheduler_calls_the_extender_over_http2(bed: Bed) -> None:
    # One connection for all its calls instead of a TLS handshake per call in flight beyond two.
    ns = bed.namespace("e2e-h2")
    bed.node("h2-node-0", 2, 16, labels={"cgpu.disable.isolation": "false"}, group="h2")
    for i in range(4):
        bed.request(
            "POST", rest.path("pods", namespace=ns), body=objects.in_group(objects.gpu_pod(f"p{i}", 2), "h2")
        )
    for i in range(4):
        bed.wait(
            "bound", lambda i=i: bed.request("GET", rest.path("pods", f"p{i}", ns))["spec"].get("nodeName")
        )
    url, context = bed.extender_probe_url("/metrics")
    with urllib.request.urlopen(url, context=context, timeout=10) as reply:
        text = reply.read().decode()
    counts = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gpushare_extender_scheduler_calls_total{")
    }
    assert counts.get("2", 0) >= 8  # a filter and a bind per pod at least
    assert counts.get("1.1", 0) == 0


def test_a_certificate_from_another_ca_does_not_get_through_the_handshake(bed: Bed, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    stranger = certificates.generate_client(certificates.generate_ca("x", now), "gpushare-scheduler", [], now)
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_bytes(stranger.cert_pem)
    key.write_bytes(stranger.key_pem)
    with pytest.raises(OSError):  # an alert (unknown CA) or a reset: ssl.SSLError is an OSError
        _call(bed, "GET", f"{PREFIX}/inspect", None, _context(bed, (cert, key)))


def test_over_http2_the_client_ca_is_the_check_so_auto_keeps_it_for_the_charts_own_ca(
    bed: Bed, tmp_path: Path
) -> None:
    # The HTTP/2 server cannot show the client certificate's name: a certificate of the same CA with
    # another name gets through. Hence extender.http2=auto turns HTTP/2 on only where the chart's own CA
    # issues the extender's certificates, and keeps HTTP/1.1 with --client-name for a CA that may be
    # shared (provided, your issuer); that name check is tests/extender/test_client_auth.py's.
    status, reply = bind_as_another_name(bed, tmp_path)
    assert status == 200 and reply["Error"] == "pod default/x not found"


def test_with_the_schedulers_certificate_bind_refuses_pods_it_must_not_place(
    bed: Bed, scheduler_pair: tuple[Path, Path]
) -> None:
    ns = bed.namespace("e2e-tls")
    bed.node("tls-node-0", 1, 16, labels={"cgpu.disable.isolation": "false"}, group="tls")
    bed.node("tls-node-1", 1, 16, labels={"cgpu.disable.isolation": "false"}, group="tls")
    scheduler = _context(bed, scheduler_pair)
    status, reply = _call(bed, "GET", f"{PREFIX}/inspect/tls-node-0", None, scheduler)
    assert status == 200 and reply["nodes"][0]["name"] == "tls-node-0"

    # A pod asking for no GPU memory: what the open extender let anyone bind anywhere.
    cpu = bed.request("POST", rest.path("pods", namespace=ns), body=objects.pod("cpu"))
    body = {"PodName": "cpu", "PodNamespace": ns, "PodUID": cpu["metadata"]["uid"], "Node": "tls-node-0"}
    status, reply = _call(bed, "POST", f"{PREFIX}/bind", body, scheduler)
    assert status == 200 and reply["Error"].startswith(f"pod {ns}/cpu asks for no aliyun.com/gpu-mem")
    assert not bed.request("GET", rest.path("pods", "cpu", ns))["spec"].get("nodeName")

    # A pod kube-scheduler already bound (through this extender) to one node, bound again elsewhere.
    gpu = bed.request(
        "POST", rest.path("pods", namespace=ns), body=objects.in_group(objects.gpu_pod("g", 4), "tls")
    )
    node = bed.wait(
        "the pod bound", lambda: bed.request("GET", rest.path("pods", "g", ns))["spec"].get("nodeName")
    )
    other = "tls-node-1" if node == "tls-node-0" else "tls-node-0"
    body = {"PodName": "g", "PodNamespace": ns, "PodUID": gpu["metadata"]["uid"], "Node": other}
    status, reply = _call(bed, "POST", f"{PREFIX}/bind", body, scheduler)
    assert (status, reply) == (200, {"Error": f"pod {ns}/g is already bound to node {node}, not {other}"})
