"""`gpushare inspect --extender`: the extender's own view (GET <prefix>/inspect[/<node>]), shown as it is."""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from webhook.cli import progress as progress_line
from webhook.cli.inspect import table
from webhook.cli.inspect.settings import InspectError, InspectSettings
from webhook.core.node import gpulabels
from webhook.core.placement import accounting
from webhook.serving import tls

EXTENDER_INSPECT = "/inspect"


def from_extender(
    settings: InspectSettings, progress: progress_line.Progress | None = None
) -> table.ClusterUse:
    """The extender's own view (GET <prefix>/inspect[/<node>]): what it schedules with right now."""
    progress = progress or progress_line.Progress(enabled=False)
    base = settings.extender.rstrip("/")
    if not base.endswith(EXTENDER_INSPECT):
        base += EXTENDER_INSPECT
    urls = [f"{base}/{urllib.parse.quote(n, safe='')}" for n in settings.nodes] or [base]
    rows: list[table.NodeUse] = []
    context = _extender_tls(settings) if base.startswith("https://") else None
    for i, url in enumerate(urls, 1):
        progress.show(f"asking the extender ({i}/{len(urls)})", force=True)
        data = _fetch(url, settings.timeout_s, context)
        nodes = data.get("nodes") if isinstance(data, dict) else None
        if not isinstance(nodes, list):
            raise InspectError(f"{url} answered without a list of nodes")
        try:
            rows += [_extender_node(n, settings.unit) for n in nodes if isinstance(n, dict)]
        except (KeyError, TypeError, ValueError) as err:
            raise InspectError(f"{url} answered a node that cannot be read: {err!r}") from None
    rows.sort(key=lambda n: n.name)
    return table.ClusterUse(unit=settings.unit, nodes=tuple(rows))


def _extender_tls(settings: InspectSettings) -> ssl.SSLContext:
    try:
        return tls.client_context(
            settings.extender_ca,
            settings.extender_cert,
            settings.extender_key,
            settings.extender_server_name,
        )
    except (OSError, ssl.SSLError) as err:
        files = ", ".join(
            f for f in (settings.extender_ca, settings.extender_cert, settings.extender_key) if f
        )
        raise InspectError(f"cannot load {files}: {err}") from None


def _fetch(url: str, timeout: float, context: ssl.SSLContext | None = None) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            body = response.read()
    except urllib.error.HTTPError as err:
        detail = err.read(2000).decode("utf-8", "replace")
        err.close()
        with contextlib.suppress(ValueError, AttributeError):  # the extender's {"error"|"Error": ...} body
            reply = json.loads(detail)
            detail = str(reply.get("error") or reply.get("Error") or detail)
        raise InspectError(f"extender at {url} answered HTTP {err.code}: {detail.strip()}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, OSError) and reason.strerror:  # "connection refused", not "[Errno 111] ..."
            reason = reason.strerror[:1].lower() + reason.strerror[1:]
        raise InspectError(f"cannot reach the extender at {url}: {reason}") from None
    try:
        return json.loads(body)
    except ValueError:
        raise InspectError(f"extender at {url} answered something that is not JSON") from None


def _extender_node(node: Mapping[str, Any], unit: str) -> table.NodeUse:
    source_unit = str(node.get("unit") or "GiB")

    def units(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{value!r} is not a whole amount of memory")
        return accounting.convert(value, source_unit, unit)

    gpus, pods = [], []
    for dev in node.get("devs") or []:
        index = dev["id"]
        gpus.append(
            table.GpuUse(
                index=index,
                total=units(dev.get("totalGPU", 0)),
                used=units(dev.get("usedGPU", 0)),
                healthy=bool(dev.get("healthy", True)),
                model=str(dev.get("model") or ""),
                uuid=str(dev.get("uuid") or ""),
            )
        )
        for pod in dev.get("pods") or []:
            pods.append(
                table.PodUse(
                    namespace=str(pod.get("namespace") or ""),
                    name=str(pod["name"]),
                    gpu=index,
                    units=units(pod.get("usedGPU", 0)),
                    assigned=bool(pod.get("assigned", False)),
                )
            )
    return table.NodeUse(
        name=str(node["name"]),
        address="",
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        pods=tuple(pods),
        problems=tuple(str(p) for p in node.get("problems") or []),
        model=gpulabels.model(g.model for g in gpus if g.model),
        mode=str(node.get("mode") or ""),
    )
