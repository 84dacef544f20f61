"""The extender the chart configures, reached as kube-scheduler reaches it: HTTPS, and filter, prioritize,
bind and inspect only for a caller with the client certificate of the chart's Secret. (That the real
kube-scheduler schedules through it at all is test_scheduling.py: it runs with the chart's tlsConfig.)"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import objects
from tests.e2e.bed import FULLNAME, Bed
from webhook.core import certificates
from webhook.devcluster import mounts
from webhook.extender import app as app_mod
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


@pytest.fixture(scope="module")
def scheduler_pair(bed: Bed) -> tuple[Path, Path]:
    tls = _scheduler_tls(bed)
    return Path(tls["certFile"]), Path(tls["keyFile"])


def test_a_caller_without_a_client_certificate_is_refused_everything_but_probes(bed: Bed) -> None:
    anonymous = _context(bed, None)
    bind = {"PodName": "x", "PodNamespace": "default", "PodUID": "", "Node": "n"}
    for method, path, body in (
        ("POST", f"{PREFIX}/filter", {"Pod": {}, "NodeNames": []}),
        ("POST", f"{PREFIX}/prioritize", {"Pod": {}, "NodeNames": []}),
        ("POST", f"{PREFIX}/bind", bind),
        ("GET", f"{PREFIX}/inspect", None),
    ):
        assert _call(bed, method, path, body, anonymous) == (403, {"Error": app_mod.NO_CLIENT_CERTIFICATE})
    assert _call(bed, "GET", "/healthz", None, anonymous)[0] == 200


def test_a_certificate_from_another_ca_does_not_get_through_the_handshake(bed: Bed, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    stranger = certificates.generate_client(certificates.generate_ca("x", now), "gpushare-scheduler", [], now)
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_bytes(stranger.cert_pem)
    key.write_bytes(stranger.key_pem)
    with pytest.raises(OSError):  # an alert (unknown CA) or a reset: ssl.SSLError is an OSError
        _call(bed, "GET", f"{PREFIX}/inspect", None, _context(bed, (cert, key)))


def test_a_certificate_of_the_same_ca_with_another_name_is_refused(bed: Bed, tmp_path: Path) -> None:
    # A shared issuer signs for others too: only the name the chart gives kube-scheduler may bind.
    assert bed.cp.pki is not None
    now = datetime.now(UTC)
    other = certificates.generate_client(bed.cp.pki.ca(), "ci-robot", [], now)
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_bytes(other.cert_pem)
    key.write_bytes(other.key_pem)
    bind = {"PodName": "x", "PodNamespace": "default", "PodUID": "", "Node": "n"}
    status, reply = _call(bed, "POST", f"{PREFIX}/bind", bind, _context(bed, (cert, key)))
    assert status == 403
    assert reply == {"Error": app_mod.not_an_allowed_client("CN=ci-robot", frozenset({"gpushare-scheduler"}))}


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
