"""Certificate Secret contents: when they can stay, what is issued instead, and the Secret's wire shape."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from webhook.core.pki import certificates, certsecrets, mtlssecret

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DNS = ("gpushare-webhook.gpu-system.svc",)
SPEC = certsecrets.SecretSpec(dns_names=DNS)
MTLS = certsecrets.SecretSpec(dns_names=DNS, client_name="gpushare-scheduler")


@pytest.fixture(scope="module")
def issued() -> dict[str, bytes]:
    return certsecrets.issue(SPEC, {}, NOW)


def test_a_webhook_secret_holds_a_serving_pair_for_the_names_and_its_ca(issued: dict[str, bytes]) -> None:
    assert sorted(issued) == sorted(certsecrets.SERVING_KEYS)  # the CA key is never stored
    assert certificates.key_matches(certificates.KeyPair(issued["tls.crt"], issued["tls.key"]))
    assert certificates.is_signed_by(issued["tls.crt"], issued["ca.crt"])
    assert certificates.dns_sans(issued["tls.crt"]) == list(DNS)
    assert certsecrets.is_usable(SPEC, issued, NOW)


def test_each_webhook_issue_makes_a_new_ca(issued: dict[str, bytes]) -> None:
    assert certsecrets.issue(SPEC, issued, NOW)["ca.crt"] != issued["ca.crt"]


@pytest.mark.parametrize(
    ("change", "spec", "at"),
    [
        ({"tls.key": b""}, SPEC, NOW),
        ({}, certsecrets.SecretSpec(dns_names=("other.gpu-system.svc",)), NOW),
        ({}, SPEC, NOW + timedelta(days=340)),
        ({"ca.crt": certificates.generate_ca("someone-else", NOW).cert_pem}, SPEC, NOW),
        ({"tls.key": certificates.generate_ca("other-key", NOW).key_pem}, SPEC, NOW),
    ],
    ids=["missing-key", "other-dns-names", "close-to-expiry", "foreign-ca", "key-of-another-cert"],
)
def test_a_webhook_secret_that_cannot_serve_is_not_usable(
    issued: dict[str, bytes], change: dict[str, bytes], spec: certsecrets.SecretSpec, at: datetime
) -> None:
    assert not certsecrets.is_usable(spec, {**issued, **change}, at)


def test_a_webhook_ca_close_to_expiry_makes_the_secret_unusable() -> None:
    spec = certsecrets.SecretSpec(dns_names=DNS, ca_valid_days=40, valid_days=365)
    data = certsecrets.issue(spec, {}, NOW)
    assert certsecrets.is_usable(spec, data, NOW)
    assert not certsecrets.is_usable(spec, data, NOW + timedelta(days=15))


def test_a_client_name_picks_the_mtls_kind_that_keeps_its_ca() -> None:
    first = certsecrets.issue(MTLS, {}, NOW)
    assert sorted(first) == sorted(mtlssecret.KEYS)
    assert certsecrets.is_usable(MTLS, first, NOW)
    assert not certsecrets.is_usable(MTLS, {k: first[k] for k in certsecrets.SERVING_KEYS}, NOW)
    again = certsecrets.issue(MTLS, first, NOW + timedelta(days=1))
    assert (again["ca.crt"], again["ca.key"]) == (first["ca.crt"], first["ca.key"])
    assert not certsecrets.is_usable(
        certsecrets.SecretSpec(dns_names=DNS, client_name="someone-else"), again, NOW
    )


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        (None, {}),
        ({"metadata": {}}, {}),
        ({"data": {"tls.crt": base64.b64encode(b"pem").decode()}}, {"tls.crt": b"pem"}),
        ({"data": {"tls.crt": "%%% not base64 %%%"}}, {"tls.crt": b""}),
        ({"data": {"tls.crt": 7}}, {"tls.crt": b""}),
    ],
    ids=["no-secret", "no-data", "base64", "bad-base64", "not-a-string"],
)
def test_secret_data_is_decoded_and_unreadable_values_count_as_missing(
    secret: dict[str, Any] | None, expected: dict[str, bytes]
) -> None:
    assert certsecrets.decoded_data(secret) == expected


def test_the_secret_object_is_a_labelled_tls_secret_whose_data_decodes_back() -> None:
    data = {"tls.crt": b"cert", "tls.key": b"key", "ca.crt": b"ca"}
    secret = certsecrets.secret_object("gpushare-webhook-tls", "gpu-system", data)
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {
        "name": "gpushare-webhook-tls",
        "namespace": "gpu-system",
        "labels": {"app.kubernetes.io/managed-by": "gpushare-ensure-certs"},
    }
    assert certsecrets.decoded_data(secret) == data
