"""An in-memory TLS handshake between two contexts (no sockets), to see what a server context offers."""

from __future__ import annotations

import contextlib
import ssl


def memory_handshake(
    client_ctx: ssl.SSLContext, server_ctx: ssl.SSLContext
) -> tuple[str | None, bytes | None]:
    """(negotiated TLS version or None, the server certificate as PEM or None) after the handshake."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    der = client.getpeercert(binary_form=True)
    return client.version(), (ssl.DER_cert_to_PEM_cert(der).encode() if der else None)
