"""`gpushare ensure-certs`: keep the webhook's TLS Secret and the webhook configurations' caBundle paired.

Run in-cluster by the chart's hook Job (certificates.mode=selfManaged) before and after every install and
upgrade, and with `--client-name` for the extender's Secret. Flags become `certsync.EnsureSettings`; the
work is `webhook.kube.certsync` (API reads and writes, retries) over `webhook.core.pki.certsecrets` and
`webhook.core.pki.cabundles` (what to issue and when, what caBundle becomes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from webhook.cli import exitcodes, flagtypes, helpformat
from webhook.core.pki import certificates
from webhook.kube import certsync
from webhook.kube import client as kube_client
from webhook.kube import errors as kube_errors
from webhook.serving import logs


def api_client(kubeconfig: str | None, server: str | None) -> Any:
    """In-cluster config by default; `--kubeconfig` or `--server URL` (plain, for tests) otherwise."""
    try:
        return kube_client.connect(kube_client.ClientSettings(host=server or "", kubeconfig=kubeconfig or ""))
    except kube_errors.ApiError as exc:
        raise certsync.ClusterError(0, exc.message) from None


def build_parser() -> argparse.ArgumentParser:
    p = helpformat.parser(
        "ensure-certs",
        "In-cluster: keep the webhook's TLS Secret (tls.crt, tls.key, ca.crt) valid and its CA "
        "in the caBundle of the named webhook configurations. Safe to run again and concurrently.",
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
    p.add_argument(
        "--create-only",
        action="store_true",
        help="only create the Secret when it is missing; keep an existing one as it is and patch no "
        "configuration (Helm's pre-install/pre-upgrade hook: a renewal there would be undone by the "
        "caBundle Helm rendered before the hook ran)",
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
    settings = certsync.EnsureSettings(
        namespace=args.namespace,
        secret=args.secret,
        service_dns=tuple(args.service_dns),
        mutating=tuple(args.mutating_webhook_configuration),
        validating=tuple(args.validating_webhook_configuration),
        ca_valid_days=args.ca_valid_days,
        valid_days=args.valid_days,
        renew_before=timedelta(days=args.renew_before_days),
        client_name=args.client_name or "",
        create_only=args.create_only,
    )
    started = time.monotonic()
    try:
        client = api_client(args.kubeconfig, args.server)
    except certsync.ClusterError as exc:
        print(f"gpushare ensure-certs: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    try:
        outcome = certsync.ensure(certsync.KubeCluster(client), settings, lambda: datetime.now(UTC))
    except (certsync.ClusterError, certificates.CertificateError) as exc:
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
    return flagtypes.parsed(text, certificates.check_common_name)


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = flagtypes.parsed(text, int, "not a whole number: {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value
