"""`gpushare ensure-certs`: keep the webhook's TLS Secret and the webhook configurations' caBundle paired.

Run in-cluster by the chart's hook Job (certificates.mode=selfManaged) before and after every install and
upgrade: it keeps a valid Secret, replaces one that is missing, unreadable, for other DNS names or close
to expiry (new CA + serving certificate from `webhook.core.certificates`), and patches the Secret's CA
into every webhook of the named configurations. Races between Jobs or replicas (409) are re-read and
retried. With `--client-name` the Secret is the extender's (`mtls_secret`): serving and client pairs
whose CA (and its key) is kept across renewals.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from webhook.cli import exitcodes, helpformat, mtls_secret
from webhook.core import certificates
from webhook.kube import client as kube_client
from webhook.kube import errors as kube_errors
from webhook.kube import rest
from webhook.serving import logs

log = logging.getLogger("gpushare.ensure_certs")

MUTATING = "mutatingwebhookconfigurations"
VALIDATING = "validatingwebhookconfigurations"
SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt")
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpushare-ensure-certs"

Obj = dict[str, Any]


class ClusterError(Exception):
    """An API call failed; `status` is the HTTP status (0 when the server could not be reached)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class Cluster(Protocol):
    """The few API calls ensure-certs makes; dict in, dict out; failures raise ClusterError."""

    def get_secret(self, namespace: str, name: str) -> Obj | None: ...
    def create_secret(self, namespace: str, body: Obj) -> Obj: ...
    def replace_secret(self, namespace: str, name: str, body: Obj) -> Obj: ...
    def get_webhook_configuration(self, plural: str, name: str) -> Obj | None: ...
    def patch_webhook_configuration(self, plural: str, name: str, patch: list[Obj]) -> Obj: ...


@dataclass(frozen=True, slots=True)
class EnsureSettings:
    namespace: str
    secret: str
    service_dns: tuple[str, ...]
    mutating: tuple[str, ...] = ()
    validating: tuple[str, ...] = ()
    ca_valid_days: int = 3650
    valid_days: int = 365
    renew_before: timedelta = timedelta(days=30)
    attempts: int = 8
    client_name: str = ""  # also keep a client pair with this common name, and the CA key (mtls_secret)


@dataclass(slots=True)
class Outcome:
    secret: str = "kept"  # kept | created | replaced
    patched: list[str] = field(default_factory=list)  # "<plural>/<name>"
    unchanged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # configurations not there yet (pre-install run)


def secret_is_usable(
    data: dict[str, bytes], dns_names: Sequence[str], now: datetime, before: timedelta
) -> bool:
    """True when the Secret holds a serving pair for every DNS name, signed by its CA, not close to expiry."""
    if any(not data.get(k) for k in SECRET_KEYS):
        return False
    pair = certificates.KeyPair(cert_pem=data["tls.crt"], key_pem=data["tls.key"])
    return (
        certificates.key_matches(pair)
        and certificates.is_signed_by(pair.cert_pem, data["ca.crt"])
        and not certificates.needs_renewal(pair.cert_pem, now, dns_names, before)
        and not certificates.needs_renewal(data["ca.crt"], now, (), before)
    )


def ensure(cluster: Cluster, settings: EnsureSettings, now: Callable[[], datetime]) -> Outcome:
    """Make the Secret usable, then put its CA into every webhook of the named configurations."""
    outcome = Outcome()
    ca_pem, previous_ca = _ensure_secret(cluster, settings, now, outcome)
    targets = [(MUTATING, n) for n in settings.mutating] + [(VALIDATING, n) for n in settings.validating]
    for plural, name in targets:
        result = _ensure_ca_bundle(
            cluster, plural, name, ca_pem=ca_pem, previous_ca=previous_ca, attempts=settings.attempts
        )
        getattr(outcome, result).append(f"{plural}/{name}")
    return outcome


def _ensure_secret(
    cluster: Cluster, s: EnsureSettings, now: Callable[[], datetime], outcome: Outcome
) -> tuple[bytes, bytes | None]:
    for _ in range(s.attempts):
        current = cluster.get_secret(s.namespace, s.secret)
        data = _secret_data(current)
        if current is not None and _usable(s, data, now()):
            return data["ca.crt"], None
        body, ca_pem = _new_secret(s, now(), data)
        try:
            if current is None:
                cluster.create_secret(s.namespace, body)
                outcome.secret = "created"
            else:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                cluster.replace_secret(s.namespace, s.secret, body)
                outcome.secret = "replaced"
        except ClusterError as exc:
            if exc.status == 409:  # another Job or replica wrote first: judge what it wrote
                log.info(
                    "secret changed concurrently; reading it again", extra={"fields": {"secret": s.secret}}
                )
                continue
            raise
        log.info(
            "wrote a new CA and serving certificate",
            extra={"fields": {"secret": s.secret, "action": outcome.secret}},
        )
        # Keep the old CA in caBundle for a while: running pods serve the old certificate until the
        # kubelet refreshes their Secret volume (about a minute).
        old_ca = data.get("ca.crt")
        kept = old_ca == ca_pem
        return ca_pem, old_ca if old_ca and not kept and _still_valid(old_ca, now()) else None
    raise ClusterError(
        409, f"secret {s.namespace}/{s.secret} kept changing; gave up after {s.attempts} tries"
    )


def _usable(s: EnsureSettings, data: dict[str, bytes], now: datetime) -> bool:
    if s.client_name:
        return mtls_secret.is_usable(data, s.service_dns, s.client_name, now, s.renew_before)
    return secret_is_usable(data, s.service_dns, now, s.renew_before)


def _new_secret(s: EnsureSettings, now: datetime, current: dict[str, bytes]) -> tuple[Obj, bytes]:
    if s.client_name:
        data = mtls_secret.renewed(
            current,
            s.service_dns,
            s.client_name,
            now,
            ca_valid_days=s.ca_valid_days,
            valid_days=s.valid_days,
            before=s.renew_before,
        )
    else:
        ca = certificates.generate_ca(f"gpushare-webhook-ca@{int(now.timestamp())}", now, s.ca_valid_days)
        serving = certificates.generate_serving(ca, s.service_dns, (), now, s.valid_days)
        data = {"tls.crt": serving.cert_pem, "tls.key": serving.key_pem, "ca.crt": ca.cert_pem}
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": s.secret, "namespace": s.namespace, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "data": {k: _b64(v) for k, v in data.items()},
    }
    return body, data["ca.crt"]


def _ensure_ca_bundle(
    cluster: Cluster, plural: str, name: str, *, ca_pem: bytes, previous_ca: bytes | None, attempts: int
) -> str:
    for _ in range(attempts):
        config = cluster.get_webhook_configuration(plural, name)
        if config is None:
            log.info(
                "webhook configuration not found (yet); skipped", extra={"fields": {"configuration": name}}
            )
            return "missing"
        patch: list[Obj] = []
        for i, hook in enumerate(config.get("webhooks") or []):
            current = _decode_bundle((hook.get("clientConfig") or {}).get("caBundle"))
            if _contains_cert(current, ca_pem):
                continue
            bundle = ca_pem + (previous_ca if previous_ca and _contains_cert(current, previous_ca) else b"")
            patch += [
                {"op": "test", "path": f"/webhooks/{i}/name", "value": hook.get("name")},
                {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": _b64(bundle)},
            ]
        if not patch:
            return "unchanged"
        # The resourceVersion makes the patch conditional: a concurrent writer gives 409, and we re-read.
        rv = config["metadata"]["resourceVersion"]
        patch.append({"op": "replace", "path": "/metadata/resourceVersion", "value": rv})
        try:
            cluster.patch_webhook_configuration(plural, name, patch)
        except ClusterError as exc:
            if exc.status in (409, 422):  # 422: a `test` failed, the webhook list moved under us
                continue
            raise
        log.info("patched caBundle", extra={"fields": {"configuration": name}})
        return "patched"
    raise ClusterError(409, f"{plural}/{name} kept changing; gave up after {attempts} tries")


def _secret_data(secret: Obj | None) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, value in ((secret or {}).get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError, ValueError):
            out[key] = b""  # unreadable counts as missing: the Secret gets replaced
    return out


def _decode_bundle(value: Any) -> bytes:
    if not isinstance(value, str):
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return b""


def _contains_cert(bundle: bytes, cert_pem: bytes) -> bool:
    want = certificates.load_certificate(cert_pem)
    return any(cert == want for cert in _certs(bundle))


def _certs(bundle: bytes) -> list[Any]:
    marker = b"-----BEGIN CERTIFICATE-----"
    out = []
    for chunk in bundle.split(marker)[1:]:
        try:
            out.append(certificates.load_certificate(marker + chunk))
        except certificates.CertificateError:
            continue
    return out


def _still_valid(cert_pem: bytes, now: datetime) -> bool:
    return not certificates.needs_renewal(cert_pem, now, (), timedelta(0))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class KubeCluster:
    """`Cluster` over `webhook.kube`; its ApiError ends here as ClusterError."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client

    def get_secret(self, namespace: str, name: str) -> Obj | None:
        return self._read(rest.path("secrets", name, namespace))

    def create_secret(self, namespace: str, body: Obj) -> Obj:
        return self._call("POST", rest.path("secrets", namespace=namespace), body)

    def replace_secret(self, namespace: str, name: str, body: Obj) -> Obj:
        return self._call("PUT", rest.path("secrets", name, namespace), body)

    def get_webhook_configuration(self, plural: str, name: str) -> Obj | None:
        return self._read(_config_path(plural, name))

    def patch_webhook_configuration(self, plural: str, name: str, patch: list[Obj]) -> Obj:
        return self._call("PATCH", _config_path(plural, name), patch, rest.JSON_PATCH)

    def _read(self, path: str) -> Obj | None:
        try:
            return self._call("GET", path)
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise

    def _call(self, method: str, path: str, body: Any = None, content_type: str = rest.JSON) -> Obj:
        try:
            reply: Obj = rest.request(self._api, method, path, body=body, content_type=content_type) or {}
        except kube_errors.ApiError as exc:
            # A transport error's message already says "cannot reach the API server at <url>: <why>".
            raise ClusterError(exc.status, exc.message or exc.reason) from None
        return reply


def _config_path(plural: str, name: str) -> str:
    return rest.path(plural, name, group="admissionregistration.k8s.io")


def api_client(kubeconfig: str | None, server: str | None) -> Any:
    """In-cluster config by default; `--kubeconfig` or `--server URL` (plain, for tests) otherwise."""
    try:
        return kube_client.connect(kube_client.ClientSettings(host=server or "", kubeconfig=kubeconfig or ""))
    except kube_errors.ApiError as exc:
        raise ClusterError(0, exc.message) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpushare ensure-certs",
        description="In-cluster: keep the webhook's TLS Secret (tls.crt, tls.key, ca.crt) valid and its CA "
        "in the caBundle of the named webhook configurations. Safe to run again and concurrently.",
        formatter_class=helpformat.DefaultsFormatter,
    )
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE"), help="the Secret's namespace "
                   "(default: $POD_NAMESPACE)")  # fmt: skip
    p.add_argument("--secret", required=True, help="name of the kubernetes.io/tls Secret")
    p.add_argument("--service-dns", action="append", default=[], required=True, metavar="NAME",
                   help="DNS name the serving certificate must hold (repeatable)")  # fmt: skip
    p.add_argument(
        "--mutating-webhook-configuration",
        action="append",
        default=[],
        metavar="NAME",
        help="MutatingWebhookConfiguration to put the CA into (repeatable; default: none)",
    )
    p.add_argument(
        "--validating-webhook-configuration",
        action="append",
        default=[],
        metavar="NAME",
        help="ValidatingWebhookConfiguration to put the CA into (repeatable; default: none)",
    )
    p.add_argument(
        "--client-name",
        type=_common_name,
        metavar="CN",
        help="also keep a client certificate with this common name (client.crt, client.key) and the CA "
        "key (ca.key) in the Secret, so renewals keep the CA its clients trust (the extender's Secret)",
    )
    p.add_argument("--ca-valid-days", type=_positive, default=3650, help="lifetime of a new CA")
    p.add_argument("--valid-days", type=_positive, default=365, help="serving certificate lifetime")
    p.add_argument("--renew-before-days", type=_non_negative, default=30,
                   help="renew when the certificate or CA expires within this many days")  # fmt: skip
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--server", help="API server URL without auth (tests, kubectl proxy)")
    p.add_argument("--log-format", choices=("json", "text"), default="json", help="log format")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info",
                   help="log level")  # fmt: skip
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not args.namespace:
        print("gpushare ensure-certs: --namespace is required (or set POD_NAMESPACE)", file=sys.stderr)
        return exitcodes.USAGE
    if args.renew_before_days >= args.valid_days:
        print("gpushare ensure-certs: --renew-before-days must be less than --valid-days", file=sys.stderr)
        return exitcodes.USAGE
    logs.configure(args.log_level, args.log_format)
    kube_client.quiet_transport_logs()  # a failure is reported once below, not as a warning per retry
    settings = EnsureSettings(
        namespace=args.namespace,
        secret=args.secret,
        service_dns=tuple(args.service_dns),
        mutating=tuple(args.mutating_webhook_configuration),
        validating=tuple(args.validating_webhook_configuration),
        ca_valid_days=args.ca_valid_days,
        valid_days=args.valid_days,
        renew_before=timedelta(days=args.renew_before_days),
        client_name=args.client_name or "",
    )
    started = time.monotonic()
    try:
        client = api_client(args.kubeconfig, args.server)
    except ClusterError as exc:
        print(f"gpushare ensure-certs: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    try:
        outcome = ensure(KubeCluster(client), settings, lambda: datetime.now(UTC))
    except (ClusterError, certificates.CertificateError) as exc:
        print(f"gpushare ensure-certs: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    finally:
        client.close()
    summary = {
        "secret": f"{settings.namespace}/{settings.secret}",
        "action": outcome.secret,
        "patched": outcome.patched,
        "unchanged": outcome.unchanged,
        "missing": outcome.missing,
        "seconds": round(time.monotonic() - started, 3),
    }
    print(json.dumps(summary, sort_keys=True))
    return exitcodes.OK


def _common_name(text: str) -> str:
    if not 0 < len(text) <= 64:  # X.509's upper bound for a common name (RFC 5280 ub-common-name)
        raise argparse.ArgumentTypeError(f"a common name has 1 to 64 characters, got {len(text)}")
    return text


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value
