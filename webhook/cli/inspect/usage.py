"""`gpushare inspect --usage`: what each GPU and pod really uses, beside what is allocated, from each node's
device plugin: its `/usage` report (core/usage/usagereport.py), fetched through the API server's pod proxy
(`GET /api/v1/namespaces/<ns>/pods/<plugin pod>:<health port>/proxy/usage`).

Why the proxy: the figures are read when asked, fresh, with no write anywhere; a node annotation would
rewrite every Node every few seconds, waking every Node watcher in the cluster for numbers nobody reads,
and a metrics API (PodMetrics-style) would add an aggregated API server to run. It needs the API server
to reach the plugin pods' port (as metrics-server and any pod proxy need) and, for the user, `get` on
`pods/proxy` in the plugin's namespace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from webhook.cli.inspect import table
from webhook.cli.inspect.settings import InspectSettings
from webhook.core.usage import usage, usagereport
from webhook.kube import errors as kube_errors
from webhook.kube import rest

PORT_NAME = "health"  # the chart's name of the plugin's /healthz, /metrics, /usage port
Fetch = Callable[[str], Any]  # proxy path -> decoded JSON (raises kube_errors.ApiError)


def agents(pods: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Node -> its device plugin pod (a running one first: a rolling update may leave two)."""
    found: dict[str, Mapping[str, Any]] = {}
    for pod in sorted(pods, key=lambda p: (p.get("status") or {}).get("phase") == "Running"):
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if node:
            found[node] = pod
    return found


def proxy_path(pod: Mapping[str, Any]) -> str:
    """The API server's proxy path to the pod's /usage; ValueError when the pod has no `health` port."""
    meta = pod.get("metadata") or {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME and isinstance(port.get("containerPort"), int):
                base = rest.path("pods", namespace=str(meta.get("namespace") or "default"))
                return f"{base}/{meta.get('name')}:{port['containerPort']}/proxy/usage"
    raise ValueError(
        f"device plugin pod {meta.get('namespace')}/{meta.get('name')} has no port named {PORT_NAME}"
    )


def reports(
    nodes: Sequence[str], plugin_pods: Sequence[Mapping[str, Any]], fetch: Fetch
) -> dict[str, usage.NodeUsage | str]:
    """Node -> its usage report, or the reason there is none (shown as the node's problem)."""
    by_node = agents(plugin_pods)
    out: dict[str, usage.NodeUsage | str] = {}
    for node in nodes:
        pod = by_node.get(node)
        if pod is None:
            out[node] = "usage: no gpushare device plugin pod on this node"
            continue
        try:
            report = usagereport.decode(fetch(proxy_path(pod)))
            if report.node != node:  # a pod object whose address is another node's plugin
                raise ValueError(f"the device plugin asked for node {node} answered for node {report.node!r}")
            out[node] = report
        except ValueError as err:  # no health port, or an answer that is not a report
            out[node] = f"usage: {err}"
        except kube_errors.ForbiddenError as err:
            why = "the API server refused the proxy to the device plugin (needs get on pods/proxy)"
            out[node] = f"usage: {why}: {err.message}"
        except kube_errors.ApiError as err:
            out[node] = f"usage: the device plugin could not be asked: {err.message}"
    return out


def merge(cluster: table.ClusterUse, found: Mapping[str, usage.NodeUsage | str]) -> table.ClusterUse:
    """The map with each GPU's and pod's use beside what it holds; pods using a GPU they hold nothing of
    are added with 0 allocated."""
    nodes = []
    for node in cluster.nodes:
        report = found.get(node.name)
        if report is None:
            nodes.append(node)
        elif isinstance(report, str):
            nodes.append(dataclasses.replace(node, problems=(*node.problems, report)))
        else:
            nodes.append(_merge_node(node, report))
    return dataclasses.replace(cluster, nodes=tuple(nodes), usage=True)


def _merge_node(node: table.NodeUse, report: usage.NodeUsage) -> table.NodeUse:
    sampled = {g.index: g for g in report.gpus}
    gpus = tuple(
        dataclasses.replace(
            g,
            used_bytes=sampled[g.index].used_bytes if g.index in sampled else None,
            utilization=sampled[g.index].utilization if g.index in sampled else None,
            unattributed=dict(sampled[g.index].unattributed) if g.index in sampled else {},
        )
        for g in node.gpus
    )
    used: dict[tuple[str, str, int], int] = {}
    over: set[tuple[str, str, int]] = set()
    for c in report.containers:
        key = (c.namespace, c.pod, c.gpu)
        used[key] = used.get(key, 0) + c.used_bytes
        if c.over_share:
            over.add(key)
    pods = [
        dataclasses.replace(
            p,
            used_bytes=used.pop((p.namespace, p.name, p.gpu), 0),
            over_share=(p.namespace, p.name, p.gpu) in over,
        )
        for p in node.pods
    ]
    for (namespace, name, gpu), amount in sorted(used.items()):
        if amount or (namespace, name, gpu) in over:  # a pod with no share that uses the GPU
            pods.append(table.PodUse(namespace, name, gpu, 0, True, amount, (namespace, name, gpu) in over))
    return dataclasses.replace(node, gpus=gpus, pods=tuple(pods))


def fetch_all(api: Any, settings: InspectSettings, nodes: Sequence[str]) -> dict[str, usage.NodeUsage | str]:
    """List the plugin pods, then ask each node's plugin through the API server."""
    query = {"labelSelector": settings.agent_selector}
    listed = list(
        rest.list_all(
            api,
            rest.path("pods", namespace=settings.agent_namespace),
            query=query,
            timeout=settings.timeout_s,
        )
    )

    def fetch(path: str) -> Any:
        return rest.request(api, "GET", path, timeout=settings.timeout_s)

    return reports(nodes, listed, fetch)
