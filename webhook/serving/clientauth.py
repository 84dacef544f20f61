"""Who is calling over TLS: the verified client certificate's name, carried in the ASGI scope.

The protocol (`protocol.GuardedProtocol`) fills the ASGI TLS extension (`scope["extensions"]["tls"]`,
https://asgi.readthedocs.io/en/latest/extensions.html#tls) once per connection; apps read it with
`client_name(scope)`. The server verified the chain against its client CA (`tls.TlsFiles.client_ca`), so
a name here is an authenticated caller; None means no certificate (or no TLS, or no client CA asked).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

TLS_EXTENSION = "tls"
# Our own key beside the ASGI ones: the certificate's CN values, read from its subject at the handshake
# (not parsed back out of the RFC 4514 name).
COMMON_NAMES = "gpushare_client_cert_common_names"


def tls_extension(ssl_object: ssl.SSLObject | None) -> dict[object, object] | None:
    """The ASGI TLS extension for a connection, None for plain HTTP."""
    if ssl_object is None:
        return None
    # getpeercert() is {} for a certificate the server did not verify (no client CA) and None for no
    # certificate: only a verified one yields a subject.
    peer = ssl_object.getpeercert()
    subject = tuple(peer.get("subject", ())) if peer else ()
    return {
        "server_cert": None,
        "client_cert_chain": [],
        "client_cert_name": _rfc4514(subject) or None,
        "client_cert_error": None,
        "tls_version": None,
        "cipher_suite": None,
        COMMON_NAMES: tuple(str(value) for rdn in subject for key, value in rdn if key == "commonName"),
    }


def client_name(scope: Mapping[str, Any]) -> str | None:
    """The verified client certificate's subject (RFC 4514, e.g. "CN=gpushare-scheduler"), else None."""
    tls = (scope.get("extensions") or {}).get(TLS_EXTENSION) or {}
    name = tls.get("client_cert_name")
    return name if isinstance(name, str) and name else None


def common_names(scope: Mapping[str, Any]) -> tuple[str, ...]:
    """The CN values of the verified client certificate (several when its subject has several), else ()."""
    tls = (scope.get("extensions") or {}).get(TLS_EXTENSION) or {}
    names = tls.get(COMMON_NAMES)
    return names if isinstance(names, tuple) else ()


def _rfc4514(subject: Any) -> str:
    # getpeercert's subject: a tuple of RDNs, each a tuple of (type, value) pairs; RFC 4514 lists the
    # RDNs most specific first, i.e. reversed.
    parts = []
    for rdn in reversed(tuple(subject)):
        names = []
        for key, value in rdn:
            short = _SHORT.get(key, key)
            names.append(f"{short}={_escape(str(value))}")
        parts.append("+".join(names))
    return ",".join(parts)


_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
}


def _escape(value: str) -> str:
    out = "".join(f"\\{c}" if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out
