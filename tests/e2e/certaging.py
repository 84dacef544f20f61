"""A webhook TLS pair as most of a year without renewal leaves it, and what the API server then trusts:
shared by the upgrade that renews it (tests/e2e/test_cert_upgrade.py) and the renewal CronJob's run on a
cluster (tests/cluster/test_chart_pods.py)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from webhook.core.pki import cabundles, certificates
from webhook.kube import rest

# (plural, name) of the webhook configurations whose caBundle must trust the Secret's CA.
Configurations = Sequence[tuple[str, str]]


def config_path(plural: str, name: str) -> str:
    return rest.path(plural, name, group="admissionregistration.k8s.io")


def secret_ca(api: Any, secret: str, namespace: str) -> bytes:
    found = rest.request(api, "GET", rest.path("secrets", secret, namespace))
    return base64.b64decode(found["data"]["ca.crt"])


def untrusting(api: Any, ca: bytes, configurations: Configurations) -> list[str]:
    """The webhooks whose caBundle does not trust `ca`."""
    out = []
    for plural, name in configurations:
        config = rest.request(api, "GET", config_path(plural, name))
        for hook in config["webhooks"]:
            if not cabundles.contains(cabundles.decode(hook["clientConfig"].get("caBundle")), ca):
                out.append(f"{plural}/{name} {hook['name']}")
    return out


def age(api: Any, secret: str, namespace: str, configurations: Configurations) -> bytes:
    """Replace the webhook's pair with one of a new CA that expires in 10 days (due for renewal with
    renewBeforeDays 30), trusted by every webhook; that CA's PEM."""
    now = datetime.now(UTC)
    current = rest.request(api, "GET", rest.path("secrets", secret, namespace))
    names = certificates.dns_sans(base64.b64decode(current["data"]["tls.crt"]))
    ca = certificates.generate_ca("aging-ca", now)
    serving = certificates.generate_serving(ca, names, (), now - timedelta(days=355), 365)
    data = {"tls.crt": serving.cert_pem, "tls.key": serving.key_pem, "ca.crt": ca.cert_pem}
    body = {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    rest.request(
        api, "PATCH", rest.path("secrets", secret, namespace), body=body, content_type=rest.MERGE_PATCH
    )
    trust_only(api, ca.cert_pem, configurations)
    return ca.cert_pem


def trust_only(api: Any, ca: bytes, configurations: Configurations) -> None:
    """Every webhook's caBundle set to `ca` alone."""
    bundle = base64.b64encode(ca).decode()
    for plural, name in configurations:
        config = rest.request(api, "GET", config_path(plural, name))
        patch = [
            {"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
            for i in range(len(config["webhooks"]))
        ]
        rest.request(api, "PATCH", config_path(plural, name), body=patch, content_type=rest.JSON_PATCH)
    assert untrusting(api, ca, configurations) == []
