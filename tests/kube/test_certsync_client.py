"""`certsync.ensure` with a client name: the extender's Secret, a serving and a client pair whose CA
survives renewals (kube-scheduler reads its caFile only at start)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from webhook.core.pki import certificates, mtlssecret
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import certsync

NS = "gpu-system"
SECRET = "gs-gpushare-extender-tls"
DNS = ("gs-gpushare-extender.gpu-system.svc",)
CLIENT = "gpushare-scheduler"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _run(server: ApiServer, at: datetime = NOW, **overrides: Any) -> certsync.Outcome:
    values: dict[str, Any] = {"namespace": NS, "secret": SECRET, "service_dns": DNS, "client_name": CLIENT}
    settings = certsync.EnsureSettings(**{**values, **overrides})
    return certsync.ensure(certsync.KubeCluster(server.api), settings, lambda: at)


def _secret(server: ApiServer) -> dict[str, bytes]:
    secret = server.get("secrets", SECRET, NS)
    assert secret is not None
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def test_a_new_secret_holds_serving_and_client_pairs_of_one_ca(apiserver: ApiServer) -> None:
    assert _run(apiserver).secret == "created"
    data = _secret(apiserver)
    assert sorted(data) == sorted(mtlssecret.KEYS)
    for cert, key in (("tls.crt", "tls.key"), ("client.crt", "client.key")):
        assert certificates.key_matches(certificates.KeyPair(data[cert], data[key]))
        assert certificates.is_signed_by(data[cert], data["ca.crt"])
    assert certificates.dns_sans(data["tls.crt"]) == list(DNS)
    assert certificates.common_name(data["client.crt"]) == CLIENT
    assert mtlssecret.is_usable(data, DNS, CLIENT, NOW, timedelta(days=30))


def test_a_usable_secret_is_kept(apiserver: ApiServer) -> None:
    _run(apiserver)
    before = _secret(apiserver)
    assert _run(apiserver, NOW + timedelta(days=100)).secret == "kept"
    assert _secret(apiserver) == before


@pytest.mark.parametrize(
    ("later", "overrides"),
    [
        (timedelta(days=340), {}),
        (timedelta(0), {"client_name": "someone-else"}),
        (timedelta(0), {"service_dns": (*DNS, "extra.gpu-system.svc")}),
    ],
    ids=["close-to-expiry", "other-client-name", "other-dns-names"],
)
def test_renewed_certificates_keep_the_ca_that_clients_trust(
    apiserver: ApiServer, later: timedelta, overrides: dict[str, Any]
) -> None:
    _run(apiserver)
    before = _secret(apiserver)
    assert _run(apiserver, NOW + later, **overrides).secret == "replaced"
    after = _secret(apiserver)
    assert (after["ca.crt"], after["ca.key"]) == (before["ca.crt"], before["ca.key"])
    assert after["tls.crt"] != before["tls.crt"] and after["client.crt"] != before["client.crt"]
    assert certificates.is_signed_by(after["client.crt"], before["ca.crt"])


def test_a_ca_close_to_expiry_is_replaced_with_both_pairs(apiserver: ApiServer) -> None:
    _run(apiserver, ca_valid_days=40)
    before = _secret(apiserver)
    assert _run(apiserver, NOW + timedelta(days=15), ca_valid_days=40).secret == "replaced"
    after = _secret(apiserver)
    assert after["ca.crt"] != before["ca.crt"]
    assert certificates.is_signed_by(after["tls.crt"], after["ca.crt"])


def test_a_foreign_client_certificate_is_replaced(apiserver: ApiServer) -> None:
    _run(apiserver)
    other = certificates.generate_ca("other", NOW)
    pair = certificates.generate_client(other, CLIENT, [], NOW)
    secret = apiserver.get("secrets", SECRET, NS)
    assert secret is not None
    secret["data"]["client.crt"] = base64.b64encode(pair.cert_pem).decode()
    secret["data"]["client.key"] = base64.b64encode(pair.key_pem).decode()
    apiserver.put(secret)
    assert _run(apiserver).secret == "replaced"
    data = _secret(apiserver)
    assert certificates.is_signed_by(data["client.crt"], data["ca.crt"])
