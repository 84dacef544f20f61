"""What `gpushare ensure-certs` keeps in a certificate Secret: when to reissue, what to write, its wire shape.

Two kinds, picked by `SecretSpec.client_name`: the webhook's (serving pair and CA; each renewal makes a new
CA and its key is never stored) and, with a client name, the extender's (`mtlssecret`: the CA is kept).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from webhook.core.pki import certificates, mtlssecret

SERVING_KEYS = ("tls.crt", "tls.key", "ca.crt")
SECRET_TYPE = "kubernetes.io/tls"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpushare-ensure-certs"

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class SecretSpec:
    """The certificates a Secret must hold: serving DNS names, lifetimes, and how early to renew."""

    dns_names: tuple[str, ...]
    client_name: str = ""  # also a client pair with this common name, and the CA key (`mtlssecret`)
    ca_valid_days: int = 3650
    valid_days: int = 365
    renew_before: timedelta = timedelta(days=30)


def is_usable(spec: SecretSpec, data: Mapping[str, bytes], now: datetime) -> bool:
    """True when the Secret's decoded `data` can stay as it is at `now`."""
    if spec.client_name:
        return mtlssecret.is_usable(dict(data), spec.dns_names, spec.client_name, now, spec.renew_before)
    return serving_is_usable(data, spec.dns_names, now, spec.renew_before)


def issue(spec: SecretSpec, data: Mapping[str, bytes], now: datetime) -> dict[str, bytes]:
    """New contents for a Secret that `is_usable` refused; `data` is what it holds now (for the kept CA)."""
    if spec.client_name:
        return mtlssecret.renewed(
            dict(data),
            spec.dns_names,
            spec.client_name,
            now,
            ca_valid_days=spec.ca_valid_days,
            valid_days=spec.valid_days,
            before=spec.renew_before,
        )
    ca = certificates.generate_ca(f"gpushare-webhook-ca@{int(now.timestamp())}", now, spec.ca_valid_days)
    serving = certificates.generate_serving(ca, spec.dns_names, (), now, spec.valid_days)
    return {"tls.crt": serving.cert_pem, "tls.key": serving.key_pem, "ca.crt": ca.cert_pem}


def serving_is_loadable(data: Mapping[str, bytes]) -> bool:
    """True when a server could start with the Secret's serving pair, expired or not: every key there,
    the certificate readable and the key its own."""
    if any(not data.get(k) for k in SERVING_KEYS):
        return False
    return certificates.key_matches(certificates.KeyPair(cert_pem=data["tls.crt"], key_pem=data["tls.key"]))


def serving_is_usable(
    data: Mapping[str, bytes], dns_names: Sequence[str], now: datetime, before: timedelta
) -> bool:
    """True when the Secret holds a serving pair for every DNS name, signed by its CA, not close to expiry."""
    if any(not data.get(k) for k in SERVING_KEYS):
        return False
    pair = certificates.KeyPair(cert_pem=data["tls.crt"], key_pem=data["tls.key"])
    return (
        certificates.key_matches(pair)
        and certificates.is_signed_by(pair.cert_pem, data["ca.crt"])
        and not certificates.needs_renewal(pair.cert_pem, now, dns_names, before)
        and not certificates.needs_renewal(data["ca.crt"], now, (), before)
    )


def decoded_data(secret: Mapping[str, Any] | None) -> dict[str, bytes]:
    """The Secret's `data`, base64-decoded; an unreadable value is b"" (counts as missing: reissued)."""
    out: dict[str, bytes] = {}
    for key, value in ((secret or {}).get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError, ValueError):
            out[key] = b""
    return out


def secret_object(name: str, namespace: str, data: Mapping[str, bytes]) -> Obj:
    """A `kubernetes.io/tls` Secret holding `data`, labelled as ensure-certs' own."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE,
        "metadata": {"name": name, "namespace": namespace, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
