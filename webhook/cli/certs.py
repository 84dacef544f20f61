"""`gpushare certs`: write a development CA and serving certificate (tls.crt, tls.key, ca.crt, ca.key).

An existing CA in the directory is reused (so a caBundle already handed out stays valid) unless --new-ca.
Bad arguments exit 2; a directory that cannot be written exits 1.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

from webhook.cli import exitcodes, flagtypes, helpformat
from webhook.core.pki import certificates
from webhook.serving import tls

# RFC 1123 subdomain, optionally a leading "*." wildcard label.
DNS_NAME = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$")


def dns_name(text: str) -> str:
    if len(text) > 253 or not DNS_NAME.match(text):
        raise argparse.ArgumentTypeError(f"not a DNS name (lower-case RFC 1123): {text!r}")
    return text


def ip_address(text: str) -> str:
    return str(flagtypes.parsed(text, ipaddress.ip_address, "not an IP address: {text!r}"))


def days(text: str) -> int:
    value = flagtypes.parsed(text, int, "not a whole number of days: {text!r}")
    if not 1 <= value <= 36500:
        raise argparse.ArgumentTypeError(f"days must be 1-36500, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = helpformat.parser(
        "certs",
        "Write a development CA and a serving certificate for the webhook "
        "(tls.crt, tls.key, ca.crt, ca.key; keys mode 0600).",
    )
    p.add_argument("--out-dir", type=Path, default=Path("certs"), help="directory to write (default: certs)")
    p.add_argument(
        "--dns",
        action="append",
        type=dns_name,
        metavar="NAME",
        help="DNS name for the certificate (repeatable; default: localhost), "
        "e.g. gpushare-webhook.gpushare.svc",
    )
    p.add_argument(
        "--ip",
        action="append",
        type=ip_address,
        metavar="ADDRESS",
        help="IP SAN (repeatable; default: 127.0.0.1)",
    )
    p.add_argument("--days", type=days, default=365, help="serving certificate validity (default: 365)")
    p.add_argument("--ca-days", type=days, default=3650, help="CA validity when one is made (default: 3650)")
    p.add_argument("--new-ca", action="store_true", help="make a new CA even when the directory has one")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    dns_names = args.dns or list(tls.DEFAULT_DNS_NAMES)
    ips = args.ip or list(tls.DEFAULT_IP_ADDRESSES)
    now = datetime.now(UTC)
    ca: certificates.KeyPair | None = None
    if not args.new_ca:
        ca = tls.CertDir(args.out_dir).read_ca()
    try:
        out = tls.write_cert_dir(
            args.out_dir,
            now,
            dns_names=dns_names,
            ip_addresses=ips,
            ca=ca,
            serving_days=args.days,
            ca_days=args.ca_days,
        )
    except (tls.TlsError, certificates.CertificateError) as exc:
        print(f"gpushare certs: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    made = "reused CA" if ca is not None else "new CA"
    print(f"wrote {out.serving.cert}, {out.serving.key}, {out.ca_cert}, {out.ca_key} ({made})")
    print(f"SANs: {', '.join([*dns_names, *ips])}; valid {args.days} days")
    return exitcodes.OK
