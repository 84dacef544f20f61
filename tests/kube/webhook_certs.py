"""The webhook's TLS Secret and its two webhook configurations on the API stand-in, for the tests of
`certsync.ensure` and of `gpushare ensure-certs`."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from webhook.core.pki import certificates
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import certsync

NS = "gpu-system"
SECRET = "gpushare-webhook-tls"
DNS = ("gpushare-webhook.gpu-system.svc", "gpushare-webhook.gpu-system.svc.cluster.local")
MUTATING = "gpushare-mutating"
VALIDATING = "gpushare-validating"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def configuration(kind: str, name: str, hooks: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": hook,
                "clientConfig": {
                    "service": {"namespace": NS, "name": "gpushare-webhook", "path": "/validate"}
                },
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
            for hook in hooks
        ],
    }


def settings(**overrides: Any) -> certsync.EnsureSettings:
    values: dict[str, Any] = {
        "namespace": NS,
        "secret": SECRET,
        "service_dns": DNS,
        "mutating": (MUTATING,),
        "validating": (VALIDATING,),
    }
    values.update(overrides)
    return certsync.EnsureSettings(**values)


def run(server: ApiServer, at: datetime = NOW, **overrides: Any) -> certsync.Outcome:
    return certsync.ensure(certsync.KubeCluster(server.api), settings(**overrides), lambda: at)


def secret(server: ApiServer) -> dict[str, bytes]:
    stored = server.get("secrets", SECRET, NS)
    assert stored is not None
    return {k: base64.b64decode(v) for k, v in stored["data"].items()}


def bundles(server: ApiServer) -> list[bytes]:
    out = []
    for plural, name in (
        ("mutatingwebhookconfigurations", MUTATING),
        ("validatingwebhookconfigurations", VALIDATING),
    ):
        config = server.get(plural, name)
        assert config is not None
        out += [base64.b64decode(h["clientConfig"]["caBundle"]) for h in config["webhooks"]]
    return out


def assert_paired(server: ApiServer) -> None:
    data = secret(server)
    assert certificates.key_matches(certificates.KeyPair(data["tls.crt"], data["tls.key"]))
    assert set(DNS) <= set(certificates.dns_sans(data["tls.crt"]))
    found = bundles(server)
    assert len(found) == 3
    for bundle in found:
        first_ca = bundle[: bundle.index(b"-----END CERTIFICATE-----") + 26]
        assert certificates.is_signed_by(data["tls.crt"], first_ca)


def with_configurations(apiserver: ApiServer) -> ApiServer:
    """`apiserver` holding the chart's mutating and validating configurations, without a caBundle."""
    apiserver.put(
        configuration("MutatingWebhookConfiguration", MUTATING, ["pods.mutate.gpushare.aliyun.com"])
    )
    apiserver.put(
        configuration(
            "ValidatingWebhookConfiguration",
            VALIDATING,
            ["pods.validate.gpushare.aliyun.com", "workloads.validate.gpushare.aliyun.com"],
        )
    )
    return apiserver
