"""`gpushare extender`: flags and env -> ExtenderSettings -> webhook.extender.service.run.

Bad flags exit 2, a failed start (address in use, no API access) exits 1, SIGTERM/SIGINT exit 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from webhook.cli import api_errors, exitcodes, flagtypes, helpformat, progname
from webhook.core.placement import allocator
from webhook.core.wire import resources
from webhook.extender import service
from webhook.extender import settings as ext_settings
from webhook.kube import client as kube_client
from webhook.kube import errors as kube_errors
from webhook.serving import logs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=progname.command("extender"),
        description="Serve the kube-scheduler extender.",
        formatter_class=helpformat.DefaultsFormatter,
    )
    p.add_argument(
        "--host", default="0.0.0.0", help="address to listen on; 127.0.0.1 for this machine only, :: for IPv6"
    )
    p.add_argument("--port", type=int, default=ext_settings.DEFAULT_PORT, help="port to listen on")
    p.add_argument(
        "--tls-cert", help="serving certificate (PEM); with --tls-key serves HTTPS (default: plain HTTP)"
    )
    p.add_argument("--tls-key", help="private key of --tls-cert (PEM)")
    p.add_argument(
        "--client-ca",
        help="CA bundle (PEM) that must have signed the caller's client certificate: filter, prioritize, "
        "bind and inspect refuse callers without one (probes and metrics stay open); needs --tls-cert",
    )
    p.add_argument(
        "--client-name",
        action="append",
        default=[],
        metavar="CN",
        help="common name a caller's client certificate must carry (repeatable; default: any the client "
        "CA signed); needs --client-ca",
    )
    p.add_argument(
        "--http2",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="serve HTTP/2 beside HTTP/1.1 (needs --tls-cert): kube-scheduler then multiplexes its calls "
        "on one connection instead of a TLS handshake for each concurrent call beyond two; with "
        "--client-ca the certificate is required at the handshake (probes: use --health-port) and any "
        "client certificate the CA signed is accepted (no --client-name: keep that CA for the extender)",
    )
    p.add_argument(
        "--health-port",
        type=int,
        default=0,
        help="also serve /healthz, /readyz and /metrics over plain HTTP on this port (0: none)",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    p.add_argument("--server", help="API server URL without auth, overriding kubeconfig (e.g. kubectl proxy)")
    p.add_argument("--leader-elect", action="store_true", help="elect one binding replica through a Lease")
    p.add_argument("--lease-name", default="gpushare-extender", help="Lease name")
    p.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "kube-system"),
        help="Lease namespace (default $POD_NAMESPACE or kube-system)",
    )
    p.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME", ""),
        help="leader identity (default $POD_NAME, else the hostname)",
    )
    p.add_argument(
        "--memory-unit",
        type=flagtypes.memory_unit,
        default="GiB",
        help="unit of aliyun.com/gpu-mem: GiB, MiB, or <N>MiB matching the device plugin's MiB blocks",
    )
    p.add_argument(
        "--whole-card-resource",
        type=_resource,
        default=resources.NVIDIA_GPU,
        help="resource of whole GPUs that our device plugin serves beside shares on shared nodes; list it "
        "in the scheduler's managedResources too",
    )
    p.add_argument(
        "--policy",
        choices=[x.value for x in allocator.Policy],
        default="binpack",
        help="placement policy for pods whose annotation names none",
    )
    p.add_argument(
        "--best-fit-filter",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="filter keeps only the nodes where the pod fits its GPU(s) best under its policy, so "
        "kube-scheduler's own scores cannot place it elsewhere (--no-best-fit-filter: every node it fits "
        "passes and prioritize's scores take part in kube-scheduler's ranking)",
    )
    p.add_argument(
        "--max-body-bytes", type=int, default=64 * 1024 * 1024, help="largest request body accepted, bytes"
    )
    p.add_argument(
        "--advertise-url",
        type=_url,
        help="URL where the other replicas reach this one, published on the Lease while leading so that "
        "followers forward bind to it (default http(s)://$POD_IP:<port> when POD_IP is set)",
    )
    p.add_argument(
        "--forward-ca",
        help="CA bundle (PEM) that verifies an HTTPS leader's certificate when forwarding bind "
        "(default: the system trust store)",
    )
    p.add_argument(
        "--forward-server-name",
        default="",
        help="name the HTTPS leader's certificate must carry (default: the host of its advertised URL)",
    )
    p.add_argument(
        "--forward-cert",
        help="client certificate (PEM) presented to the leader when forwarding bind (with --forward-key)",
    )
    p.add_argument("--forward-key", help="private key of --forward-cert (PEM)")
    p.add_argument("--log-level", choices=logs.LEVELS, default="info", help="log level")
    p.add_argument("--log-format", choices=logs.FORMATS, default="json", help="log format")
    return p


def _resource(value: str) -> str:
    try:
        return resources.whole_card_resource(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _url(value: str) -> str:
    try:
        return ext_settings.advertise_url(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def usage_error(args: argparse.Namespace) -> str:
    """Why these flags cannot be served together, or ""."""
    if bool(args.tls_cert) != bool(args.tls_key):
        return "--tls-cert and --tls-key go together"
    if args.client_ca and not args.tls_cert:
        return "--client-ca needs --tls-cert and --tls-key: client certificates travel only over HTTPS"
    if args.client_name and not args.client_ca:
        return "--client-name needs --client-ca: only a verified client certificate has a name to check"
    if any(not name for name in args.client_name):
        return "--client-name must not be empty"
    if args.http2 and not args.tls_cert:
        return "--http2 needs --tls-cert and --tls-key: kube-scheduler negotiates HTTP/2 only over TLS"
    if args.http2 and args.client_name:
        return (
            "--client-name cannot be checked with --http2 (the HTTP/2 server does not show the client "
            "certificate to the app): give the extender a client CA of its own, or drop --http2"
        )
    if not 0 <= args.health_port <= 65535:
        return f"--health-port {args.health_port} is not a port (0-65535)"
    if args.health_port and args.health_port == args.port:
        return "--health-port must differ from --port"
    if bool(args.forward_cert) != bool(args.forward_key):
        return "--forward-cert and --forward-key go together"
    return ""


def settings_from(args: argparse.Namespace) -> ext_settings.ExtenderSettings:
    problem = usage_error(args)
    if problem:
        raise SystemExit(f"gpushare extender: {problem}")
    advertise = args.advertise_url
    if advertise is None:
        try:
            advertise = ext_settings.default_advertise_url(
                os.environ.get("POD_IP", ""), args.port, tls=bool(args.tls_cert)
            )
        except ValueError as err:
            raise SystemExit(f"gpushare extender: POD_IP: {err}") from None
    return ext_settings.ExtenderSettings(
        host=args.host,
        port=args.port,
        tls_cert=Path(args.tls_cert) if args.tls_cert else None,
        tls_key=Path(args.tls_key) if args.tls_key else None,
        client_ca=Path(args.client_ca) if args.client_ca else None,
        client_names=tuple(args.client_name),
        http2=args.http2,
        health_port=args.health_port,
        kubeconfig=args.kubeconfig,
        api_server=args.server,
        memory_unit=args.memory_unit,
        names=resources.GpuResourceNames(whole_card=args.whole_card_resource),
        default_policy=allocator.Policy(args.policy),
        best_fit_filter=args.best_fit_filter,
        max_body_bytes=args.max_body_bytes,
        leader=ext_settings.LeaderSettings(
            enabled=args.leader_elect,
            lease_name=args.lease_name,
            lease_namespace=args.lease_namespace,
            identity=args.identity,
        ),
        advertise_url=advertise,
        forward_ca=Path(args.forward_ca) if args.forward_ca else None,
        forward_server_name=args.forward_server_name,
        forward_cert=Path(args.forward_cert) if args.forward_cert else None,
        forward_key=Path(args.forward_key) if args.forward_key else None,
        log_level=args.log_level,
        log_format=args.log_format,
    )


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = usage_error(args)
    if problem:
        parser.error(problem)  # a usage error: exit 2
    settings = settings_from(args)
    logs.configure(settings.log_level, settings.log_format)
    kube_client.quiet_transport_logs()  # the watch and binder log their own failures, once, with context
    try:
        service.run(settings)
    except kube_errors.ApiError as err:  # worded as `gpushare inspect` words it: no class name
        print(f"gpushare extender: {api_errors.describe(err)}", file=sys.stderr)
        return exitcodes.FAILURE
    except Exception as err:  # startup failures: one clear line, not a traceback
        print(f"gpushare extender: {err}", file=sys.stderr)
        return exitcodes.FAILURE
    return exitcodes.OK
