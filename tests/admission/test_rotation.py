"""Certificate rotation while requests run: zero failed requests, new connections get the new certificate."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from datetime import UTC, datetime

import httpx

from tests.admission import samples
from tests.admission.conftest import Webhook
from webhook.core.pki import certificates
from webhook.serving import tls

GPU_POD = samples.pod(samples.pod_spec(samples.container(limits={"aliyun.com/gpu-mem": "2"})))


def served_serial(webhook: Webhook) -> int:
    """The serial number of the certificate a brand-new TLS connection is given."""
    with (
        socket.create_connection(("127.0.0.1", webhook.server.port), timeout=5) as raw,
        webhook.ssl_context().wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return certificates.load_certificate(ssl.DER_cert_to_PEM_cert(der).encode()).serial_number


def file_serial(webhook: Webhook) -> int:
    return certificates.load_certificate(webhook.cert_dir.serving.cert.read_bytes()).serial_number


def wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


class ClientLoop:
    """Threads posting reviews without pause: half reuse one connection, half open a new one each time."""

    def __init__(self, webhook: Webhook, threads: int = 4) -> None:
        self.webhook = webhook
        self.stop = threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self.run, args=(i % 2 == 0,), daemon=True) for i in range(threads)
        ]

    def run(self, keep_alive: bool) -> None:
        client = httpx.Client(base_url=self.webhook.url, verify=self.webhook.ssl_context(), timeout=10)
        try:
            while not self.stop.is_set():
                if not keep_alive:
                    client.close()
                    client = httpx.Client(
                        base_url=self.webhook.url, verify=self.webhook.ssl_context(), timeout=10
                    )
                try:
                    response = client.post("/mutate?timeout=10s", json=samples.review(GPU_POD))
                    good = response.status_code == 200 and response.json()["response"]["allowed"] is True
                    outcome = None if good else f"HTTP {response.status_code}: {response.text[:200]}"
                except Exception as exc:
                    outcome = repr(exc)
                with self.lock:
                    if outcome is None:
                        self.ok += 1
                    else:
                        self.failures.append(outcome)
        finally:
            client.close()

    def __enter__(self) -> ClientLoop:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(15)

    def count(self) -> int:
        with self.lock:
            return self.ok


def test_rotating_the_certificate_during_requests_fails_none_and_new_connections_see_it(fresh_webhook):
    webhook = fresh_webhook
    ca = webhook.cert_dir.read_ca()
    assert ca is not None
    first = file_serial(webhook)
    assert served_serial(webhook) == first
    with ClientLoop(webhook) as loop:
        wait_for(lambda: loop.count() > 20)

        # 1: rewritten in place, key first: for a moment the key does not match the certificate.
        fresh = certificates.generate_serving(ca, ["localhost"], ["127.0.0.1"], datetime.now(UTC))
        webhook.cert_dir.serving.key.write_bytes(fresh.key_pem)
        time.sleep(0.1)  # two reload polls see the mismatched pair and must keep the old certificate
        webhook.cert_dir.serving.cert.write_bytes(fresh.cert_pem)
        second = file_serial(webhook)
        wait_for(lambda: served_serial(webhook) == second)
        before = loop.count()
        wait_for(lambda: loop.count() > before + 20)

        # 2: replaced atomically (as a Secret update does, by renaming).
        tls.write_cert_dir(webhook.cert_dir.path, datetime.now(UTC), ca=ca)
        third = file_serial(webhook)
        wait_for(lambda: served_serial(webhook) == third)
        before = loop.count()
        wait_for(lambda: loop.count() > before + 20)

    assert loop.failures == []
    assert len({first, second, third}) == 3
    assert webhook.server.tls is not None and webhook.server.tls.reloads == 2
    assert webhook.client.get("/readyz").status_code == 200
