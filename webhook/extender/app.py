"""The extender's HTTP API: filter, prioritize and bind (`verbs`, bare ASGI endpoints), inspect, probes,
metrics and version (Starlette).

With a client CA (`settings.client_ca`) filter, prioritize, bind and inspect answer 403 to a caller
without a verified client certificate, or (`settings.client_names`) with another common name; probes,
metrics and version stay open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse as StarletteJSONResponse
from starlette.responses import Response
from starlette.routing import Route

from webhook import __version__
from webhook.extender.bind import calls
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import Cache, NodeView
from webhook.extender.host import Leadership
from webhook.extender.settings import ExtenderSettings
from webhook.extender.verbs import (
    METRICS_NAMESPACE,
    NO_CLIENT_CERTIFICATE,
    Callers,
    Verbs,
    not_an_allowed_client,
)
from webhook.kube import asyncdirect
from webhook.serving import buildinfo, fastpath, metrics, probes

__all__ = [
    "METRICS_NAMESPACE",
    "NO_CLIENT_CERTIFICATE",
    "ExtenderApp",
    "Leadership",
    "build_app",
    "inspect_json",
    "not_an_allowed_client",
]


class JSONResponse(StarletteJSONResponse):
    """Compact ASCII JSON: the C encoder's ASCII path writes a 5,000-node inspect reply ~3x faster than
    the non-ASCII one Starlette uses (names and messages are ASCII anyway; others become \\u escapes)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


@dataclass
class ExtenderApp:
    """The app's parts; a `host.Host`, which is all the verbs see of it (so verbs never import app)."""

    cache: Cache
    binder: Binder
    settings: ExtenderSettings
    leadership: Leadership = field(default_factory=Leadership)
    readiness: probes.Readiness = field(default_factory=probes.Readiness)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    # Binds on the event loop with this API (None: on threads, binder.api): the Binding is the one call
    # per pod that waits on the API server, and a thread costs two hand-overs per bind.
    loop_api: calls.AsyncBindingApi | None = None
    # Reads the watches' streams on the app's loop while it runs (attached by the lifespan).
    streamer: asyncdirect.LoopStreamer | None = None

    def __post_init__(self) -> None:
        self.binder.leading = self.leadership.is_leader  # asked again before every Binding


def inspect_json(view: NodeView) -> dict[str, Any]:
    """One node as the original gpushare inspect API wrote it (name, totalGPU, usedGPU, devs), plus ours."""
    devices = []
    for gpu in view.gpus:
        pods = [
            {
                "name": s.key.split("/", 1)[1],
                "namespace": s.key.split("/", 1)[0],
                "usedGPU": s.allocation.per_gpu()[gpu.index],
                "assigned": s.assigned,
                "assumed": s.assumed,
            }
            for s in view.shares
            if gpu.index in s.allocation.per_gpu()
        ]
        devices.append(
            {
                "id": gpu.index,
                "uuid": gpu.uuid,
                "model": gpu.model,
                "healthy": gpu.healthy,
                "totalGPU": gpu.memory,
                "usedGPU": gpu.used,
                "pods": pods,
            }
        )
    return {
        "name": view.name,
        "unit": view.unit,
        "totalGPU": sum(g.memory for g in view.gpus),
        "usedGPU": sum(g.used for g in view.gpus),
        "devs": devices,
        "problems": list(view.problems),
        "mode": view.mode,
    }


def build_app(
    ext: ExtenderApp,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
) -> Starlette:
    request_metrics = metrics.RequestMetrics(ext.registry, METRICS_NAMESPACE)
    buildinfo.register(ext.registry)
    leader_gauge = Gauge(
        "leader", "1 when this replica binds.", namespace=METRICS_NAMESPACE, registry=ext.registry
    )
    leader_gauge.set_function(lambda: 1.0 if ext.leadership.is_leader() else 0.0)
    ext.readiness.add_check("cache-synced", ext.cache.synced)
    callers = Callers(ext, request_metrics)
    verbs = Verbs(ext, request_metrics, callers)

    @contextlib.asynccontextmanager
    async def serving(app: Starlette) -> AsyncIterator[None]:
        if ext.streamer is not None:
            ext.streamer.attach(asyncio.get_running_loop())
        try:
            if lifespan is None:
                yield
            else:
                async with lifespan(app):
                    yield
        finally:
            if ext.streamer is not None:
                ext.streamer.detach()
            verbs.close()

    async def inspect_all(request: Request) -> Response:
        views = [ext.cache.view(name) for name in ext.cache.node_names()]
        return JSONResponse({"nodes": [inspect_json(v) for v in views if v is not None]})

    async def inspect_node(request: Request) -> Response:
        view = ext.cache.view(request.path_params["node"])
        if view is None:
            return JSONResponse({"nodes": [], "error": f"node {request.path_params['node']} not found"}, 404)
        return JSONResponse({"nodes": [inspect_json(view)]})

    async def version(request: Request) -> Response:
        return JSONResponse(
            {"version": __version__, "leader": ext.leadership.is_leader(), **ext.cache.stats()}
        )

    def caller_checked(
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def checked(request: Request) -> Response:
            refused = callers.refusal("inspect", request.scope)
            if refused is not None:
                return JSONResponse(refused[1], status_code=refused[0])
            return await handler(request)

        return checked

    prefix = ext.settings.url_prefix.rstrip("/")
    routes = [
        Route(f"{prefix}/inspect", caller_checked(inspect_all), methods=["GET"]),
        Route(f"{prefix}/inspect/{{node}}", caller_checked(inspect_node), methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        *probes.probe_routes(ext.readiness, ext.registry),
    ]
    return fastpath.FastPathApp(verbs.endpoints, routes, lifespan=serving)
