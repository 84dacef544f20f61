"""The extender over HTTPS with client certificates: scheduler routes refuse callers without one signed
by the client CA, probes and metrics stay open, the client CA reloads, and a follower presents its own."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.extender.factory import pod
from webhook.cli.serve import extender as serve_extender
from webhook.core.pki import certificates
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.extender import app as app_mod
from webhook.extender.bind import forward
from webhook.extender.service import Extender
from webhook.extender.settings import ExtenderSettings
from webhook.serving import tls

PREFIX = "/gpushare-scheduler"
NOW = datetime.now(UTC)


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # signed by another CA
    stranger_key: Path


def _write(folder: Path, name: str, pair: certificates.KeyPair) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def make_pki(folder: Path) -> Pki:
    """An extender CA with its serving and kube-scheduler's client pair, and a stranger's pair."""
    ca = certificates.generate_ca("extender-ca", NOW)
    other = certificates.generate_ca("someone-else", NOW)
    (folder / "ca.crt").write_bytes(ca.cert_pem)
    serving = certificates.generate_serving(ca, ["gs-gpushare-extender.gpu-system.svc"], ["127.0.0.1"], NOW)
    cert, key = _write(folder, "tls", serving)
    client = _write(folder, "client", certificates.generate_client(ca, "gpushare-scheduler", [], NOW))
    stranger = _write(folder, "stranger", certificates.generate_client(other, "gpushare-scheduler", [], NOW))
    return Pki(folder / "ca.crt", cert, key, *client, *stranger)


def _settings(pki: Pki, client_ca: Path | None) -> ExtenderSettings:
    return ExtenderSettings(
        host="127.0.0.1", port=0, tls_cert=pki.cert, tls_key=pki.key, client_ca=client_ca, bind_backoff_s=0.01
    )


@pytest.fixture
def extender(cluster: ApiServer, pki: Pki) -> Iterator[Extender]:
    ext = Extender(_settings(pki, pki.ca), cluster.new_client()).start()
    assert ext.wait_synced(10)
    yield ext
    ext.stop()


def client(ext: Extender, pki: Pki, cert: tuple[Path, Path] | None) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(*cert)
    return httpx.Client(base_url=ext.url, verify=context, timeout=5)


BIND = {"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "n2"}
FORWARDED = b'{"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "n2"}'


def seen_pod(cluster: ApiServer, ext: Extender) -> None:
    """Pod default/a (4 GiB) in the API, and in the extender's cache."""
    cluster.put(pod("a", 4))
    cluster.wait_for(lambda: ext.cache.pod("default/a"))


SCHEDULER_CALLS = [
    ("POST", f"{PREFIX}/filter", {"Pod": {}, "NodeNames": ["n1"]}),
    ("POST", f"{PREFIX}/prioritize", {"Pod": {}, "NodeNames": ["n1"]}),
    ("POST", f"{PREFIX}/bind", BIND),
    ("GET", f"{PREFIX}/inspect", None),
    ("GET", f"{PREFIX}/inspect/n1", None),
]


@pytest.mark.parametrize(("method", "path", "body"), SCHEDULER_CALLS, ids=lambda v: str(v)[:30])
def test_scheduler_routes_refuse_a_caller_without_a_client_certificate(extender, pki, method, path, body):
    with client(extender, pki, None) as anonymous:
        reply = anonymous.request(method, path, json=body)
    assert reply.status_code == 403
    assert reply.json() == {"Error": app_mod.NO_CLIENT_CERTIFICATE}


def test_a_refused_bind_binds_nothing_and_is_counted(cluster, extender, pki):
    seen_pod(cluster, extender)
    with client(extender, pki, None) as anonymous:
        assert anonymous.post(f"{PREFIX}/bind", json=BIND).status_code == 403
        metrics = anonymous.get("/metrics").text
    assert cluster.get("pods", "a", "default")["spec"].get("nodeName") is None
    assert 'gpushare_extender_requests_total{endpoint="bind",outcome="unauthenticated"} 1.0' in metrics
    assert "gpushare_extender_connections_opened_total" in metrics


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/version"])
def test_probes_metrics_and_version_answer_without_a_client_certificate(extender, pki, path):
    with client(extender, pki, None) as anonymous:
        assert anonymous.get(path).status_code == 200


def test_a_caller_with_the_client_certificate_binds(cluster, extender, pki):
    seen_pod(cluster, extender)
    with client(extender, pki, (pki.client_cert, pki.client_key)) as scheduler:
        assert scheduler.post(f"{PREFIX}/bind", json=BIND).json() == {"Error": ""}
        assert scheduler.get(f"{PREFIX}/inspect/n2").status_code == 200
    assert cluster.get("pods", "a", "default")["spec"]["nodeName"] == "n2"


def test_only_the_named_client_binds_when_client_names_are_set(cluster, pki, tmp_path):
    # A shared issuer signs others' certificates too: the CA alone must not let them bind.
    ca = certificates.generate_ca("extender-ca", NOW)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    serving = certificates.generate_serving(ca, ["gs-gpushare-extender.gpu-system.svc"], ["127.0.0.1"], NOW)
    cert, key = _write(tmp_path, "tls", serving)
    scheduler = _write(tmp_path, "scheduler", certificates.generate_client(ca, "gpushare-scheduler", [], NOW))
    other = _write(tmp_path, "other", certificates.generate_client(ca, "ci-robot, ops", [], NOW))
    names = ("gpushare-scheduler",)
    settings = ExtenderSettings(
        host="127.0.0.1", port=0, tls_cert=cert, tls_key=key, client_ca=ca_file, client_names=names
    )
    cluster.put(pod("a", 4))
    ext = Extender(settings, cluster.new_client()).start()
    try:
        assert ext.wait_synced(10)
        cluster.wait_for(lambda: ext.cache.pod("default/a"))
        context = ssl.create_default_context(cafile=str(ca_file))
        context.load_cert_chain(*other)
        with httpx.Client(base_url=ext.url, verify=context, timeout=5) as caller:
            reply = caller.post(f"{PREFIX}/bind", json=BIND)
            metrics = caller.get("/metrics").text
        assert reply.status_code == 403
        assert reply.json() == {
            "Error": "the client certificate 'CN=ci-robot\\\\, ops' is signed by the extender's client CA "
            "but its common name is not one the extender accepts (gpushare-scheduler: --client-name)"
        }
        assert 'gpushare_extender_requests_total{endpoint="bind",outcome="forbidden"} 1.0' in metrics
        assert cluster.get("pods", "a", "default")["spec"].get("nodeName") is None
        context = ssl.create_default_context(cafile=str(ca_file))
        context.load_cert_chain(*scheduler)
        with httpx.Client(base_url=ext.url, verify=context, timeout=5) as caller:
            assert caller.post(f"{PREFIX}/bind", json=BIND).json() == {"Error": ""}
        assert cluster.get("pods", "a", "default")["spec"]["nodeName"] == "n2"
    finally:
        ext.stop()


def test_a_certificate_of_another_ca_ends_the_handshake(extender, pki):
    with (
        client(extender, pki, (pki.stranger_cert, pki.stranger_key)) as stranger,
        pytest.raises(httpx.TransportError),
    ):
        stranger.post(f"{PREFIX}/bind", json=BIND)


def test_a_replaced_client_ca_is_taken_by_the_next_handshake(cluster, pki, tmp_path):
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes(pki.ca.read_bytes())
    new_ca = certificates.generate_ca("next-ca", NOW)
    newcomer = _write(
        tmp_path, "newcomer", certificates.generate_client(new_ca, "gpushare-scheduler", [], NOW)
    )
    ext = Extender(_settings(pki, client_ca), cluster.new_client()).start()
    try:
        with client(ext, pki, newcomer) as caller, pytest.raises(httpx.TransportError):
            caller.get(f"{PREFIX}/inspect")
        client_ca.write_bytes(pki.ca.read_bytes() + new_ca.cert_pem)
        assert ext.server.tls is not None and ext.server.tls.reload_if_changed()
        with client(ext, pki, newcomer) as caller:
            assert caller.get(f"{PREFIX}/inspect").status_code == 200
    finally:
        ext.stop()


def test_a_follower_presents_its_client_certificate_to_the_leader(cluster, extender, pki):
    seen_pod(cluster, extender)
    name = "gs-gpushare-extender.gpu-system.svc"
    without = forward.Forwarder(PREFIX, ca_file=pki.ca, server_name=name)
    refused = without.bind(extender.url, FORWARDED)
    assert refused.outcome == forward.BAD_REPLY and "HTTP 403" in refused.error
    with_cert = forward.Forwarder(
        PREFIX, ca_file=pki.ca, server_name=name, cert_file=pki.client_cert, key_file=pki.client_key
    )
    assert with_cert.bind(extender.url, FORWARDED) == forward.Forwarded(forward.BOUND, "")


def test_a_missing_client_ca_file_fails_the_start_naming_it(cluster, pki, tmp_path):
    with pytest.raises(tls.TlsError, match=r"cannot read .*missing\.crt"):
        Extender(_settings(pki, tmp_path / "missing.crt"), cluster.new_client())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--client-ca", "ca.crt"], "--client-ca needs --tls-cert and --tls-key"),
        (["--forward-cert", "c.crt"], "--forward-cert and --forward-key go together"),
        (["--tls-key", "k.pem"], "--tls-cert and --tls-key go together"),
        (["--client-name", "s"], "--client-name needs --client-ca"),
        (
            ["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--client-name", ""],
            "--client-name must not be empty",
        ),
    ],
    ids=[
        "client-ca-without-https",
        "forward-cert-without-key",
        "key-without-cert",
        "client-name-without-ca",
        "empty-client-name",
    ],
)
def test_flags_that_cannot_work_together_exit_2_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        serve_extender.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unreadable_forward_certificate_is_named_in_the_bind_error(extender, pki, tmp_path):
    missing = tmp_path / "missing.crt"
    forwarder = forward.Forwarder(PREFIX, ca_file=pki.ca, cert_file=missing, key_file=pki.client_key)
    result = forwarder.bind(extender.url, b"{}")
    assert result.outcome == forward.UNREACHABLE
    assert f"client certificate {missing} with key {pki.client_key}" in result.error


def test_a_forward_certificate_the_client_names_refuse_fails_the_start_saying_why(cluster, pki, tmp_path):
    # kube-scheduler presents the same pair: with another CN every filter and bind would get 403.
    ca = certificates.generate_ca("extender-ca", NOW)
    other = _write(tmp_path, "other", certificates.generate_client(ca, "my-scheduler", [], NOW))
    settings = ExtenderSettings(
        host="127.0.0.1",
        port=0,
        tls_cert=pki.cert,
        tls_key=pki.key,
        client_ca=pki.ca,
        client_names=("gpushare-scheduler",),
        forward_cert=other[0],
        forward_key=other[1],
    )
    with pytest.raises(tls.TlsError) as caught:
        Extender(settings, cluster.new_client())
    assert str(caught.value) == (
        f"the client certificate {other[0]} is issued to CN='my-scheduler', but --client-name accepts only "
        "gpushare-scheduler: kube-scheduler presents the same certificate (set the chart's "
        "extender.tls.clientName to its CN, or issue it for that name)"
    )
    accepted = dataclasses.replace(settings, client_names=("gpushare-scheduler", "my-scheduler"))
    Extender(accepted, cluster.new_client()).start().stop()
    garbage = tmp_path / "garbage.crt"
    garbage.write_bytes(b"not a certificate")
    with pytest.raises(tls.TlsError, match=f"{garbage} is not a PEM certificate"):
        Extender(dataclasses.replace(settings, forward_cert=garbage), cluster.new_client())
