"""The Secret of a server that authenticates its callers (the extender): its serving pair, one client
pair for its callers (kube-scheduler, and the extender's own followers), and the CA that signed both,
with the CA's key.

The CA key is kept so that renewing the two certificates keeps their CA: kube-scheduler reads the
extender tlsConfig's `caFile` once at start (client-go re-reads only the client certificate files), so
a new CA would break it until restarted. No pod mounts `ca.key`: the chart projects only the other keys,
and only ensure-certs' ServiceAccount may read the Secret. Pure; `certsecrets` picks this kind for
`gpushare ensure-certs --client-name`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from webhook.core.pki import certificates

KEYS = ("tls.crt", "tls.key", "ca.crt", "ca.key", "client.crt", "client.key")


def is_usable(
    data: dict[str, bytes], dns_names: Sequence[str], client_name: str, now: datetime, before: timedelta
) -> bool:
    """True when every pair is there, belongs to its key, is signed by the CA and is not close to expiry,
    and the client certificate names `client_name`."""
    if any(not data.get(k) for k in KEYS):
        return False
    ca = certificates.KeyPair(data["ca.crt"], data["ca.key"])
    serving = certificates.KeyPair(data["tls.crt"], data["tls.key"])
    client = certificates.KeyPair(data["client.crt"], data["client.key"])
    return (
        _ca_usable(ca, now, before)
        and all(certificates.key_matches(p) for p in (serving, client))
        and all(certificates.is_signed_by(p.cert_pem, ca.cert_pem) for p in (serving, client))
        and not certificates.needs_renewal(serving.cert_pem, now, dns_names, before)
        and not certificates.needs_renewal(client.cert_pem, now, (), before)
        and certificates.common_name(client.cert_pem) == client_name
    )


def renewed(
    data: dict[str, bytes],
    dns_names: Sequence[str],
    client_name: str,
    now: datetime,
    *,
    ca_valid_days: int,
    valid_days: int,
    before: timedelta,
) -> dict[str, bytes]:
    """New serving and client pairs, signed by the Secret's CA while it is usable, else by a new CA."""
    ca = certificates.KeyPair(data.get("ca.crt", b""), data.get("ca.key", b""))
    if not _ca_usable(ca, now, before):
        ca = certificates.generate_ca(f"gpushare-extender-ca@{int(now.timestamp())}", now, ca_valid_days)
    serving = certificates.generate_serving(ca, dns_names, (), now, valid_days)
    client = certificates.generate_client(ca, client_name, (), now, valid_days)
    return {
        "tls.crt": serving.cert_pem,
        "tls.key": serving.key_pem,
        "ca.crt": ca.cert_pem,
        "ca.key": ca.key_pem,
        "client.crt": client.cert_pem,
        "client.key": client.key_pem,
    }


def _ca_usable(ca: certificates.KeyPair, now: datetime, before: timedelta) -> bool:
    return certificates.key_matches(ca) and not certificates.needs_renewal(ca.cert_pem, now, (), before)
