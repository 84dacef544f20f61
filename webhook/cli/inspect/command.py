"""`gpushare inspect`: allocated and total GPU memory per node and per GPU, from the cluster or the extender.

flags -> `InspectSettings` -> the map, read from the cluster (cli/inspect/cluster.py; `--usage` adds what
is really used, cli/inspect/usage.py) or from `--extender`, its /inspect answer shown as it is
(cli/inspect/extender.py). On a terminal, a progress line on stderr counts the nodes and pods read; it is
erased before the table prints.
"""

from __future__ import annotations

import argparse
import math
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.cli import api_errors, exitcodes, flagtypes, helpformat
from webhook.cli import progress as progress_line
from webhook.cli.inspect import counting, namespaces, table
from webhook.cli.inspect import usage as inspect_usage
from webhook.cli.inspect.extender import from_extender
from webhook.cli.inspect.settings import AGENT_SELECTOR, DEFAULT_TIMEOUT_S, InspectError, InspectSettings
from webhook.core.admission import quotas
from webhook.core.node import draslice, drause
from webhook.kube import client as kube_client
from webhook.kube import errors as kube_errors
from webhook.kube import rest

OUTPUTS = ("text", "json")
PAGE_SIZE = 500
# The flags that read the extender instead of the cluster: (flag, metavar, help), each "" when not given.
_EXTENDER_FLAGS = (
    (
        "--extender",
        "URL",
        "read the extender's inspect API instead, e.g. https://127.0.0.1:39999/gpushare-scheduler",
    ),
    ("--extender-ca", "FILE", "CA (PEM) of an HTTPS extender"),
    (
        "--extender-cert",
        "FILE",
        "client certificate (PEM) the extender asks for, e.g. client.crt of its Secret",
    ),
    ("--extender-key", "FILE", "private key of --extender-cert"),
    (
        "--extender-server-name",
        "NAME",
        "the name the extender's certificate holds, when the URL dials another (an IP, or 127.0.0.1 "
        "through kubectl port-forward), e.g. gpushare-extender.gpushare-system.svc (default: the URL's host)",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = helpformat.parser(
        "inspect",
        "Show allocated/total GPU memory per node and per GPU, and the cluster total.",
        epilog="Exit status: 0 shown, 1 the cluster or extender could not be read, 2 bad arguments or "
        "kubeconfig, 130 interrupted.",
    )
    parser.add_argument("nodes", nargs="*", metavar="NODE", help="only these nodes (default: every GPU node)")
    parser.add_argument("-d", "--details", action="store_true", help="list the pods on each GPU")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="output format")
    parser.add_argument(
        "--namespaces",
        action="store_true",
        help="GPU memory placed per namespace, beside the GPU resources its ResourceQuotas count",
    )
    parser.add_argument(
        "--unit",
        type=flagtypes.memory_unit,
        default="GiB",
        help="the cluster's gpu-mem unit, as the extender's --memory-unit",
    )
    source = parser.add_argument_group(
        "source (default: the cluster through kubeconfig or in-cluster config)"
    )
    source.add_argument(
        "--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    source.add_argument("--context", default="", help="kubeconfig context (default: its current context)")
    source.add_argument("--server", default="", help="API server URL, e.g. http://127.0.0.1:8080 (no auth)")
    for flag, metavar, text in _EXTENDER_FLAGS:
        source.add_argument(flag, default="", metavar=metavar, help=text)
    parser.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_S, help="seconds per request")
    used = parser.add_argument_group("usage: what GPUs and pods really use (from each node's device plugin)")
    used.add_argument(
        "--usage",
        action="store_true",
        help="show the GPU memory in use beside what is allocated, per GPU and per pod (-d), asking each "
        "node's device plugin through the API server (needs get on pods/proxy in its namespace)",
    )
    used.add_argument(
        "--agent-namespace",
        default="",
        metavar="NS",
        help="the device plugin's namespace, e.g. gpushare-system (default: any namespace)",
    )
    used.add_argument(
        "--agent-selector",
        default=AGENT_SELECTOR,
        metavar="LABELS",
        help="the label selector of the device plugin's pods (default: %(default)s, the chart's labels)",
    )
    return parser


def _seconds(text: str) -> float:
    """A positive, finite number of seconds: the sockets refuse nan (ValueError) and inf (OverflowError)."""
    value = flagtypes.parsed(text, float, "invalid number of seconds: {text!r}")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, not {text!r}")
    return value


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Without a scheme the client library warns (FutureWarning) and then fails with a traceback.
    if args.server and urllib.parse.urlsplit(args.server).scheme.lower() not in ("http", "https"):
        parser.error(f"--server must be an http:// or https:// URL, not {args.server!r}")
    if args.extender and (args.server or args.kubeconfig or args.context):
        parser.error(
            "--extender reads the extender; it does not combine with --server/--kubeconfig/--context"
        )
    if (
        args.extender_ca or args.extender_cert or args.extender_key or args.extender_server_name
    ) and not args.extender:
        parser.error(
            "--extender-ca, --extender-cert, --extender-key and --extender-server-name go with --extender"
        )
    if bool(args.extender_cert) != bool(args.extender_key):
        parser.error("--extender-cert and --extender-key go together")
    if args.usage and args.extender:
        parser.error(
            "--usage asks the device plugins through the API server; it does not combine with --extender"
        )
    if (args.agent_namespace or args.agent_selector != AGENT_SELECTOR) and not args.usage:
        parser.error("--agent-namespace and --agent-selector go with --usage")
    if args.namespaces and (args.extender or args.usage or args.details):
        parser.error("--namespaces reads the cluster's pods and quotas; not with --extender, --usage or -d")
    if not args.agent_selector.strip():
        parser.error("--agent-selector must not be empty: it would ask every pod")
    settings = InspectSettings(
        nodes=tuple(args.nodes),
        details=args.details,
        output=args.output,
        unit=args.unit,
        extender=args.extender,
        extender_ca=args.extender_ca,
        extender_cert=args.extender_cert,
        extender_key=args.extender_key,
        extender_server_name=args.extender_server_name,
        # No retries: an unreachable server fails after one --timeout, and urllib3 logs nothing.
        client=kube_client.ClientSettings(
            host=args.server, kubeconfig=args.kubeconfig, context=args.context, retries=0
        ),
        timeout_s=args.timeout,
        usage=args.usage,
        agent_namespace=args.agent_namespace,
        agent_selector=args.agent_selector,
        namespaces=args.namespaces,
    )
    kube_client.quiet_transport_logs()
    return run(settings)


def run(settings: InspectSettings, out: Any = None, progress: progress_line.Progress | None = None) -> int:
    progress = progress or progress_line.Progress()
    try:
        with progress:
            cluster = (
                from_extender(settings, progress) if settings.extender else from_cluster(settings, progress)
            )
            quota_text = by_namespace(settings, cluster) if settings.namespaces else ""
    except InspectError as err:
        print(f"gpushare inspect: {err}", file=sys.stderr)
        return exitcodes.FAILURE
    except kube_errors.ApiError as err:
        print(f"gpushare inspect: {api_errors.describe(err)}", file=sys.stderr)
        return api_errors.exit_code(err)
    if settings.namespaces:
        text = quota_text
    elif settings.output == "json":
        text = table.render_json(cluster)
    else:
        text = table.render_text(cluster, settings.details)
    (out or sys.stdout).write(text)
    return exitcodes.OK


def by_namespace(settings: InspectSettings, cluster: table.ClusterUse) -> str:
    """--namespaces: the map summed per namespace, beside the GPU lines of every ResourceQuota."""
    api = kube_client.connect(settings.client)
    try:
        found = namespaces.read_quotas(api, settings.timeout_s)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    lines = quotas.gpu_lines(found, settings.names)
    render = namespaces.render_json if settings.output == "json" else namespaces.render_text
    return render(cluster, lines)


# --- from the cluster -------------------------------------------------------------------------------


def from_cluster(
    settings: InspectSettings, progress: progress_line.Progress | None = None
) -> table.ClusterUse:
    """Nodes and pods through the Kubernetes API; each node's memory counted by core accounting."""
    progress = progress or progress_line.Progress(enabled=False)
    api = kube_client.connect(settings.client)
    timeout = settings.timeout_s
    try:
        if settings.nodes:
            nodes: list[dict[str, Any]] = []
            pods: list[dict[str, Any]] = []
            for i, name in enumerate(settings.nodes, 1):
                where = f" ({i}/{len(settings.nodes)})" if len(settings.nodes) > 1 else ""
                progress.show(f"reading node {name}{where}", force=True)
                nodes.append(_get_node(api, name, timeout))
                query = {"fieldSelector": f"spec.nodeName={name}"}
                listed = rest.list_all(api, rest.path("pods"), query=query, timeout=timeout)
                pods += progress.counted(listed, f"reading pods of {name}{where}")
        else:
            listed = rest.list_all(api, rest.path("nodes"), page_size=PAGE_SIZE, timeout=timeout)
            nodes = list(progress.counted(listed, "reading nodes"))
            listed = rest.list_all(api, rest.path("pods"), page_size=PAGE_SIZE, timeout=timeout)
            pods = list(progress.counted(listed, f"nodes: {len(nodes):,}; reading pods"))
        slices, claims = _dra_objects(api, nodes, timeout, progress)
        cluster = counting.cluster_use(
            nodes,
            pods,
            settings.unit,
            settings.names,
            keep_all=bool(settings.nodes),
            slices=slices,
            claims=claims,
        )
        if settings.usage:
            progress.show(f"asking the device plugins of {len(cluster.nodes):,} nodes", force=True)
            found = inspect_usage.fetch_all(api, settings, [n.name for n in cluster.nodes])
            cluster = inspect_usage.merge(cluster, found)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    return cluster


def _dra_objects(
    api: Any, nodes: Sequence[Mapping[str, Any]], timeout: float, progress: progress_line.Progress
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Our DRA driver's ResourceSlices and every ResourceClaim, read only when a node is in a DRA mode
    (a cluster without DRA, or a user without access to claims, is not asked)."""
    if not counting.any_dra(nodes):
        return [], []
    path = rest.path("resourceslices", group=drause.GROUP)
    query = {"fieldSelector": f"spec.driver={draslice.DEFAULT_DRIVER}"}
    listed = rest.list_all(api, path, query=query, page_size=PAGE_SIZE, timeout=timeout)
    slices = list(progress.counted(listed, "reading ResourceSlices"))
    listed = rest.list_all(
        api, rest.path("resourceclaims", group=drause.GROUP), page_size=PAGE_SIZE, timeout=timeout
    )
    return slices, list(progress.counted(listed, "reading ResourceClaims"))


def _get_node(api: Any, name: str, timeout: float) -> dict[str, Any]:
    try:
        node: dict[str, Any] = rest.request(api, "GET", rest.path("nodes", name), timeout=timeout)
    except kube_errors.NotFoundError as err:
        # The API server says which object is missing; a 404 without that came from something else at
        # that address (a wrong path in --server or the kubeconfig, a proxy), not from a missing node.
        if err.details.get("kind") == "nodes":
            raise InspectError(f'node "{name}" not found') from None
        raise InspectError(
            f'{api.configuration.host} answered 404 for node "{name}" without the API '
            "server's NotFound status: is that the API server's address?"
        ) from None
    return node
