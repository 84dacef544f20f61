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


def tls_extension(ssl_object: ssl.SSLObject | None) -> dict[object, object] | None:
    """The ASGI TLS extension for a connection, None for plain HTTP."""
    if ssl_object is None:
        return None
    # getpeercert() is {} for a certificate the server did not verify (no client CA) and None for no
    # certificate: only a verified one yields a subject.
    peer = ssl_object.getpeercert()
    name = _rfc4514(peer.get("subject", ())) if peer else None
    return {
        "server_cert": None,
        "client_cert_chain": [],
        "client_cert_name": name or None,
        "client_cert_error": None,
        "tls_version": None,
        "cipher_suite": None,
    }


def client_name(scope: Mapping[str, Any]) -> str | None:
    """The verified client certificate's subject (RFC 4514, e.g. "CN=gpushare-scheduler"), else None."""
    tls = (scope.get("extensions") or {}).get(TLS_EXTENSION) or {}
    name = tls.get("client_cert_name")
    return name if isinstance(name, str) and name else None


def common_names(name: str) -> tuple[str, ...]:
    """The CN values of an RFC 4514 name as `tls_extension` writes it (escapes undone):
    "CN=a\\,b,O=x" -> ("a,b",)."""
    found: list[str] = []
    for attribute in _split(name, "+,"):
        key, _, value = attribute.partition("=")
        if key == "CN":
            found.append(_unescape(value))
    return tuple(found)


def _split(text: str, separators: str) -> list[str]:
    """`text` cut at each separator not escaped by a backslash (the escapes are kept)."""
    parts, start, i = [], 0, 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] in separators:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            i += 1
        out.append(value[i])
        i += 1
    return "".join(out)


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
