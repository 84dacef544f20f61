"""Development CA and serving certificates: SANs, usages, validity window, renewal test."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.core.pki import certificates

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = ["localhost", "gpushare-webhook.gpushare.svc"]


@pytest.fixture(scope="module")
def ca() -> certificates.KeyPair:
    return certificates.generate_ca("test CA", NOW)


@pytest.fixture(scope="module")
def serving(ca: certificates.KeyPair) -> certificates.KeyPair:
    return certificates.generate_serving(ca, NAMES, ["127.0.0.1", "::1"], NOW)


def test_ca_is_a_self_signed_ca_valid_for_the_requested_days(ca):
    cert = certificates.load_certificate(ca.cert_pem)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign is True
    assert certificates.is_signed_by(ca.cert_pem, ca.cert_pem)
    assert cert.not_valid_after_utc == NOW + timedelta(days=3650)
    assert cert.not_valid_before_utc <= NOW
    assert certificates.key_matches(ca)


def test_serving_certificate_has_exactly_the_given_sans_and_server_auth(ca, serving):
    cert = certificates.load_certificate(serving.cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == NAMES
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert cert.not_valid_after_utc == NOW + timedelta(days=365)
    assert certificates.is_signed_by(serving.cert_pem, ca.cert_pem)
    assert certificates.key_matches(serving)
    assert certificates.dns_sans(serving.cert_pem) == NAMES


def test_serving_certificate_is_not_signed_by_another_ca(serving):
    other = certificates.generate_ca("other", NOW)
    assert not certificates.is_signed_by(serving.cert_pem, other.cert_pem)


def test_keys_of_different_pairs_do_not_match(ca, serving):
    assert not certificates.key_matches(certificates.KeyPair(serving.cert_pem, ca.key_pem))


def test_duplicate_names_are_listed_once(ca):
    pair = certificates.generate_serving(ca, ["a.svc", "a.svc"], ["127.0.0.1", "127.0.0.1"], NOW)
    assert certificates.dns_sans(pair.cert_pem) == ["a.svc"]


def test_an_rsa_ca_brought_by_the_user_can_sign():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "user RSA CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(NOW - timedelta(days=1))
        .not_valid_after(NOW + timedelta(days=10))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    rsa_ca = certificates.KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem)
    pair = certificates.generate_serving(rsa_ca, ["x.svc"], [], NOW)
    assert certificates.is_signed_by(pair.cert_pem, rsa_ca.cert_pem)
    assert isinstance(certificates.load_certificate(pair.cert_pem).public_key(), ec.EllipticCurvePublicKey)


@pytest.mark.parametrize(
    ("now", "names", "before", "expected"),
    [
        (NOW, NAMES, timedelta(days=30), False),
        (NOW, ["localhost"], timedelta(days=30), False),
        (NOW, [*NAMES, "new.gpushare.svc"], timedelta(days=30), True),
        (NOW + timedelta(days=340), NAMES, timedelta(days=30), True),
        (NOW + timedelta(days=334), NAMES, timedelta(days=30), False),
        (NOW + timedelta(days=366), NAMES, timedelta(0), True),
        (NOW - timedelta(days=1), NAMES, timedelta(0), True),
    ],
    ids=[
        "fresh",
        "subset-of-names",
        "missing-name",
        "within-renewal-window",
        "just-before-window",
        "expired",
        "not-yet-valid",
    ],
)
def test_needs_renewal(serving, now, names, before, expected):
    assert certificates.needs_renewal(serving.cert_pem, now, names, before) is expected


def test_garbage_needs_renewal():
    assert certificates.needs_renewal(b"not a certificate", NOW, [], timedelta(0))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ca: certificates.generate_serving(ca, [], [], NOW), "at least one DNS name"),
        (lambda ca: certificates.generate_serving(ca, ["a"], ["300.1.1.1"], NOW), "not an IP address"),
        (lambda ca: certificates.generate_serving(ca, ["a"], [], NOW.replace(tzinfo=None)), "timezone"),
        (lambda ca: certificates.generate_serving(ca, ["a"], [], NOW, valid_days=0), "valid_days"),
        (
            lambda ca: certificates.generate_serving(certificates.KeyPair(b"x", ca.key_pem), ["a"], [], NOW),
            "not a PEM certificate",
        ),
        (
            lambda ca: certificates.generate_serving(certificates.KeyPair(ca.cert_pem, b"x"), ["a"], [], NOW),
            "private key",
        ),
    ],
    ids=["no-names", "bad-ip", "naive-now", "zero-days", "bad-ca-cert", "bad-ca-key"],
)
def test_bad_input_raises_certificate_error(ca, call, message):
    with pytest.raises(certificates.CertificateError, match=message):
        call(ca)


@pytest.mark.parametrize("name", ["a", "gpushare-scheduler", "x" * 64], ids=["one", "usual", "sixty-four"])
def test_a_common_name_of_1_to_64_characters_is_accepted(name: str) -> None:
    assert certificates.check_common_name(name) == name


@pytest.mark.parametrize(("name", "length"), [("", 0), ("x" * 65, 65)], ids=["empty", "sixty-five"])
def test_a_common_name_x509_cannot_hold_is_refused_with_its_length(name: str, length: int) -> None:
    with pytest.raises(certificates.CertificateError, match=f"1 to 64 characters, got {length}$"):
        certificates.check_common_name(name)
