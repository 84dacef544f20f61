"""The caBundle of admission webhook configurations: which CAs it holds, and the JSON Patch that puts a new
CA into every webhook lacking it while still trusting the CA it replaces (`gpushare ensure-certs`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509

from webhook.core.pki import certificates
from webhook.core.wire import patches

PEM_BEGIN = b"-----BEGIN CERTIFICATE-----"

Obj = dict[str, Any]


def decode(value: Any) -> bytes:
    """A caBundle field's PEM bytes; b"" when it is absent, not a string or not base64."""
    if not isinstance(value, str):
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return b""


def certificates_in(bundle: bytes) -> list[x509.Certificate]:
    """Every readable certificate of a PEM bundle, in order; unreadable blocks are skipped."""
    out = []
    for chunk in bundle.split(PEM_BEGIN)[1:]:
        try:
            out.append(certificates.load_certificate(PEM_BEGIN + chunk))
        except certificates.CertificateError:
            continue
    return out


def contains(bundle: bytes, cert_pem: bytes) -> bool:
    """True when `bundle` holds the certificate `cert_pem`; `CertificateError` if `cert_pem` is unreadable."""
    want = certificates.load_certificate(cert_pem)
    return any(cert == want for cert in certificates_in(bundle))


def ca_to_keep(old_ca: bytes | None, new_ca: bytes, now: datetime) -> bytes | None:
    """The CA a renewal replaced, to keep in caBundle beside the new one: running pods serve the old
    certificate until the kubelet refreshes their Secret volume (about a minute). None when there was
    none, it is the new CA itself (kept), or it has expired."""
    if not old_ca or old_ca == new_ca:
        return None
    return None if certificates.needs_renewal(old_ca, now, (), timedelta(0)) else old_ca


def patch(configuration: Mapping[str, Any], ca_pem: bytes, previous_ca: bytes | None) -> list[Obj]:
    """JSON Patch operations giving every webhook of a Mutating/ValidatingWebhookConfiguration whose
    caBundle lacks `ca_pem` the bundle `ca_pem` (+ `previous_ca` when its bundle trusted that); [] when
    every webhook already trusts `ca_pem`. A `test` on each webhook's name guards against a list that
    moved meanwhile (the API server answers 422)."""
    ops: list[Obj] = []
    for i, hook in enumerate(configuration.get("webhooks") or []):
        current = decode((hook.get("clientConfig") or {}).get("caBundle"))
        if contains(current, ca_pem):
            continue
        bundle = ca_pem + (previous_ca if previous_ca and contains(current, previous_ca) else b"")
        ops += [
            {"op": "test", "path": patches.pointer("webhooks", str(i), "name"), "value": hook.get("name")},
            {
                "op": "add",
                "path": patches.pointer("webhooks", str(i), "clientConfig", "caBundle"),
                "value": base64.b64encode(bundle).decode(),
            },
        ]
    return ops
