"""`gpushare webhook`: flags and the YAML config file -> AdmissionSettings -> `webhook.admission.app.run`.

Flags override the file's keys. A bad flag or config exits 2 with the reason; a certificate or address
problem at start exits 1. The defaults shown in --help are AdmissionSettings' own, so they cannot drift.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook.admission import app
from webhook.admission import settings as admission_settings
from webhook.cli import exitcodes, progname
from webhook.serving import server, tls

# flag dest -> config file key: a flag given on the command line replaces that key of the file.
FLAG_KEYS: dict[str, str] = {
    "host": "host",
    "port": "port",
    "cert_dir": "certDir",
    "cert": "cert",
    "key": "key",
    "service_dns": "serviceDns",
    "max_body_bytes": "maxBodyBytes",
    "log_level": "logLevel",
    "log_format": "logFormat",
    "cert_reload_interval": "certReloadIntervalSeconds",
    "scheduler_name": "schedulerName",
    "exclude_namespace": "excludedNamespaces",
}


def build_parser() -> argparse.ArgumentParser:
    d = admission_settings.AdmissionSettings()  # the defaults a flag left out (and absent from --config) gets
    p = argparse.ArgumentParser(
        prog=progname.command("webhook"),
        description="Serve the admission webhook over HTTPS: POST /mutate, POST /validate, "
        "GET /healthz, /readyz, /metrics.",
    )
    p.add_argument("--config", type=Path, help="YAML config file (see docs/webhook.md); flags override it")
    p.add_argument(
        "--host",
        help=f"address to listen on (default: {d.host}: every IPv4 address, as a pod needs; 127.0.0.1 for "
        "this machine only, :: for IPv6)",
    )
    p.add_argument("--port", type=int, help=f"port to listen on (default: {d.port})")
    p.add_argument(
        "--cert-dir",
        help="directory with tls.crt and tls.key (a mounted TLS Secret works); when both are missing a "
        f"development CA and serving certificate are generated there (default: {d.cert_dir})",
    )
    p.add_argument("--cert", help="serving certificate (PEM chain); with --key, instead of --cert-dir")
    p.add_argument("--key", help="private key (PEM) of --cert")
    p.add_argument(
        "--service-dns",
        action="append",
        metavar="NAME",
        help="extra DNS name for a generated certificate, e.g. gpushare-webhook.gpushare.svc (repeatable)",
    )
    p.add_argument(
        "--exclude-namespace",
        action="append",
        metavar="NAMESPACE",
        help="namespace whose objects are allowed untouched (repeatable; replaces the file's list)",
    )
    p.add_argument(
        "--scheduler-name",
        help="also set spec.schedulerName to this on pods asking for GPU memory or whole cards that left it "
        "unset or at default-scheduler (default: unset, pods keep the default scheduler)",
    )
    p.add_argument(
        "--max-body-bytes", type=int, help=f"largest request body in bytes (default: {d.max_body_bytes})"
    )
    p.add_argument(
        "--log-level", choices=admission_settings.LOG_LEVELS, help=f"log level (default: {d.log_level})"
    )
    p.add_argument(
        "--log-format", choices=admission_settings.LOG_FORMATS, help=f"log format (default: {d.log_format})"
    )
    p.add_argument(
        "--cert-reload-interval",
        type=float,
        metavar="SECONDS",
        help="how often the certificate files are checked for changes "
        f"(default: {d.cert_reload_interval_s:g})",
    )
    return p


def settings_from_args(args: argparse.Namespace) -> admission_settings.AdmissionSettings:
    """Raises ConfigError for a bad config file or value."""
    flags = {key: getattr(args, dest) for dest, key in FLAG_KEYS.items() if getattr(args, dest) is not None}
    return admission_settings.from_file(args.config, flags)


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
    except admission_settings.ConfigError as exc:
        print(f"gpushare webhook: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    try:
        return app.run(settings)
    except (tls.TlsError, server.ServeError) as exc:
        print(f"gpushare webhook: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
