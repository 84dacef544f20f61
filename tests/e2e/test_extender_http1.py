"""The extender over HTTP/1.1, as `extender.http2: auto` serves it where the CA may sign others' client
certificates (provided certificates, your own issuer): the real kube-scheduler schedules through it, a
certificate of the same CA with another name is refused (`--client-name`), and the kubelet probes the
extender's own port over HTTPS without a certificate. The module switches the bed's release there and
back (helm upgrade, extender restarted)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import objects
from tests.e2e.bed import FULLNAME, Bed
from tests.e2e.test_extender_tls import PREFIX, _call, _context, bind_as_another_name
from webhook.devcluster import helm
from webhook.devcluster.release import NAMESPACE, RELEASE
from webhook.extender import app as app_mod
from webhook.kube import rest


def _serve(bed: Bed, http2: bool) -> None:
    bed.helm(
        "upgrade",
        RELEASE,
        str(helm.CHART),
        *("--namespace", NAMESPACE, "--reuse-values", "--set", f"extender.http2={str(http2).lower()}"),
    )
    extender = next(p for p in bed.processes if p.name == "extender-0")
    extender.stop(grace=5)  # SIGTERM: hands the Lease back
    bed.processes.remove(extender)
    bed.start_extender()


@pytest.fixture(scope="module")
def http1(bed: Bed) -> Iterator[Bed]:
    _serve(bed, http2=False)
    try:
        yield bed
    finally:
        _serve(bed, http2=True)


def test_the_chart_serves_http1_with_the_name_check(http1: Bed) -> None:
    args = http1.container_args("deployments", f"{FULLNAME}-extender")
    assert "--http2" not in args and "--client-name=gpushare-scheduler" in args


def test_probes_answer_on_the_extenders_port_and_scheduler_verbs_need_a_certificate(http1: Bed) -> None:
    url, context = http1.extender_probe_url("/readyz")
    assert url.startswith(f"https://127.0.0.1:{http1.extender_port}/") and context is not None
    anonymous = _context(http1, None)
    assert _call(http1, "GET", "/healthz", None, anonymous)[0] == 200
    status, reply = _call(http1, "GET", f"{PREFIX}/inspect", None, anonymous)
    assert (status, reply) == (403, {"Error": app_mod.NO_CLIENT_CERTIFICATE})


def test_a_certificate_of_the_same_ca_with_another_name_is_refused(http1: Bed, tmp_path: Path) -> None:
    status, reply = bind_as_another_name(http1, tmp_path)
    assert status == 403
    assert reply == {"Error": app_mod.not_an_allowed_client("CN=ci-robot", frozenset({"gpushare-scheduler"}))}


def test_kube_scheduler_schedules_through_it_over_http1(http1: Bed) -> None:
    ns = http1.namespace("e2e-h1")
    http1.node("h1-node-0", 2, 16, labels={"cgpu.disable.isolation": "false"}, group="h1")
    for i in range(3):
        body = objects.in_group(objects.gpu_pod(f"p{i}", 4), "h1")
        http1.request("POST", rest.path("pods", namespace=ns), body=body)
    for i in range(3):
        http1.wait(
            "bound",
            lambda i=i: http1.request("GET", rest.path("pods", f"p{i}", ns))["spec"].get("nodeName"),
            timeout=60,
        )
    url, context = http1.extender_probe_url("/metrics")
    with urllib.request.urlopen(url, context=context, timeout=10) as reply:
        text = reply.read().decode()
    assert 'gpushare_extender_scheduler_calls_total{http_version="1.1"}' in text
