"""A CA and a serving certificate as PEM bytes (ECDSA P-256), and the test for when to renew them.

Pure: `cryptography` only, the clock is passed in as `now`. The webhook writes these for development,
`gpushare ensure-certs` writes them into the cluster Secret.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Backdate notBefore a little so a peer whose clock lags ours still accepts a fresh certificate.
CLOCK_SKEW = timedelta(minutes=5)

# Keys we sign with: only EC keys are generated here, but a CA brought by the user may be RSA.
SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

# X.509's upper bound for a common name (RFC 5280 ub-common-name); `cryptography` refuses longer ones.
MAX_COMMON_NAME = 64


class CertificateError(ValueError):
    """PEM data that is not a certificate or key we can use; the message says which and why."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, both PEM (the key unencrypted PKCS#8)."""

    cert_pem: bytes
    key_pem: bytes


def check_common_name(name: str) -> str:
    """`name` when it can be a certificate's common name (1 to 64 characters); else `CertificateError`."""
    if not 0 < len(name) <= MAX_COMMON_NAME:
        raise CertificateError(f"a common name has 1 to {MAX_COMMON_NAME} characters, got {len(name)}")
    return name


def generate_ca(common_name: str, now: datetime, valid_days: int = 3650) -> KeyPair:
    """A self-signed CA certificate (pathlen 0) valid from `now` for `valid_days`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        _builder(name, name, key.public_key(), now, valid_days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key))


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA signs certificates and CRLs; a serving certificate enciphers keys (RSA key exchange)."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not ca,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def generate_serving(
    ca: KeyPair,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    now: datetime,
    valid_days: int = 365,
) -> KeyPair:
    """A serving certificate signed by `ca` whose SANs are exactly the given names and IPs.

    The common name is the first DNS name (or IP); clients check only the SANs. Raises
    `CertificateError` for a bad CA or IP address, or when no name is given at all.
    """
    if not dns_names and not ip_addresses:
        raise CertificateError("a serving certificate needs at least one DNS name or IP address")
    ca_cert = load_certificate(ca.cert_pem)
    ca_key = _load_signing_key(ca.key_pem)
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dict.fromkeys(dns_names)]
    for ip in dict.fromkeys(ip_addresses):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError as exc:
            raise CertificateError(f"not an IP address: {ip!r}") from exc
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (list(dns_names) or list(ip_addresses))[0])])
    cert = (
        _builder(subject, ca_cert.subject, key.public_key(), now, valid_days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key))


def generate_client(
    ca: KeyPair,
    common_name: str,
    organizations: Sequence[str],
    now: datetime,
    valid_days: int = 365,
) -> KeyPair:
    """A client certificate signed by `ca`: CN is the user name, each O a group, as the API server
    reads an x509 client identity (O=system:masters is cluster admin)."""
    ca_cert = load_certificate(ca.cert_pem)
    ca_key = _load_signing_key(ca.key_pem)
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(x509.Name(attributes), ca_cert.subject, key.public_key(), now, valid_days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key))


def needs_renewal(cert_pem: bytes, now: datetime, dns_names: Sequence[str], before: timedelta) -> bool:
    """True when the certificate is unreadable, not yet valid, expires within `before` of `now`, or
    lacks any of `dns_names` among its DNS SANs."""
    try:
        cert = load_certificate(cert_pem)
    except CertificateError:
        return True
    if now < cert.not_valid_before_utc or now + before >= cert.not_valid_after_utc:
        return True
    return not set(dns_names) <= set(dns_sans(cert_pem))


def load_certificate(cert_pem: bytes) -> x509.Certificate:
    """The first certificate in `cert_pem`; `CertificateError` when there is none."""
    try:
        return x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise CertificateError(f"not a PEM certificate: {exc}") from exc


def dns_sans(cert_pem: bytes) -> list[str]:
    """The DNS names in the certificate's subjectAltName (empty when it has none)."""
    cert = load_certificate(cert_pem)
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(ext.value.get_values_for_type(x509.DNSName))


def common_name(cert_pem: bytes) -> str:
    """The subject's (first) common name ("" when it has none or the certificate is unreadable)."""
    try:
        names = common_names(load_certificate(cert_pem))
    except CertificateError:
        return ""
    return names[0] if names else ""


def common_names(cert: x509.Certificate) -> list[str]:
    """Every common name of the subject, in order (a subject may hold several)."""
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


def key_matches(pair: KeyPair) -> bool:
    """True when the private key belongs to the certificate (both readable)."""
    try:
        cert = load_certificate(pair.cert_pem)
        key = _load_signing_key(pair.key_pem)
    except CertificateError:
        return False
    return cert.public_key() == key.public_key()


def is_signed_by(cert_pem: bytes, ca_cert_pem: bytes) -> bool:
    """True when `ca_cert_pem` issued `cert_pem` (issuer name and signature checked)."""
    try:
        cert = load_certificate(cert_pem)
        ca = load_certificate(ca_cert_pem)
        cert.verify_directly_issued_by(ca)
    except (CertificateError, ValueError, TypeError, InvalidSignature):
        return False
    return True


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey,
    now: datetime,
    valid_days: int,
) -> x509.CertificateBuilder:
    if now.tzinfo is None:
        raise CertificateError("`now` must be timezone-aware (UTC)")
    if valid_days < 1:
        raise CertificateError(f"valid_days must be at least 1, got {valid_days}")
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + timedelta(days=valid_days))
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_signing_key(key_pem: bytes) -> SigningKey:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertificateError(f"unsupported private key type {type(key).__name__}; use EC or RSA")
    return key
