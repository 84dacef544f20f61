"""The extender's HTTP API (Starlette): filter, prioritize, bind, inspect, probes, metrics, version.

Scheduler verbs always answer HTTP 200 with JSON; a failure is carried in `Error` (filter, bind), as
kube-scheduler expects (pkg/scheduler/extender.go). Prioritize has no Error field: bad input gets 400 with
one, and the scheduler then ignores our scores, as it does for any prioritize error. A follower forwards
bind to the leader (`forward.py`). With a client CA (`settings.client_ca`) filter, prioritize, bind and
inspect answer 403 to a caller without a verified client certificate, or (`settings.client_names`) with
another common name; probes, metrics and version stay open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse as StarletteJSONResponse
from starlette.responses import Response
from starlette.routing import Route

from webhook import __version__
from webhook.extender import forward, scheduling, wire
from webhook.extender.backlog import BindBacklog
from webhook.extender.binder import Binder
from webhook.extender.cache import Cache, NodeView
from webhook.extender.settings import ExtenderSettings
from webhook.serving import body as body_limit
from webhook.serving import clientauth, metrics, probes

log = logging.getLogger(__name__)
METRICS_NAMESPACE = "gpushare_extender"
INTERNAL_ERROR = "internal error in the gpushare extender (logged there); retry"
DISCONNECTED = "the client disconnected before sending the whole body"
UNENCODABLE = "the reply cannot be encoded as JSON (the Node objects sent are nested too deeply)"
NO_CLIENT_CERTIFICATE = (
    "the gpushare extender answers filter, prioritize, bind and inspect only to a caller with a client "
    "certificate signed by its client CA (kube-scheduler: enableHTTPS and tlsConfig certFile/keyFile in "
    "its extender configuration); this connection presented none"
)


def not_an_allowed_client(name: str, allowed: frozenset[str]) -> str:
    # The subject is the caller's own (verified by our CA); clipped so a long one cannot bloat the reply.
    names = ", ".join(sorted(allowed))
    return (
        f"the client certificate {name[:200]!r} is signed by the extender's client CA but its common name "
        f"is not one the extender accepts ({names}: --client-name)"
    )


class JSONResponse(StarletteJSONResponse):
    """Compact ASCII JSON: the C encoder's ASCII path writes a 5,000-name reply ~3x faster than the
    non-ASCII one Starlette uses (names and messages are ASCII anyway; others become \\u escapes)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _reply(content: Any, fallback: Any) -> Response:
    """`content` as JSON, or `fallback` when it cannot be encoded (filter echoes the Node objects it got)."""
    try:
        return JSONResponse(content)
    except (RecursionError, ValueError):
        return JSONResponse(fallback)


@dataclass
class Leadership:
    """Who binds: `is_leader()`, the current holder's identity (for messages) and the URL it published
    on the Lease (where a follower forwards bind; "" when unknown)."""

    is_leader: Callable[[], bool] = lambda: True
    holder: Callable[[], str] = lambda: ""
    leader_url: Callable[[], str] = lambda: ""


@dataclass
class ExtenderApp:
    cache: Cache
    binder: Binder
    settings: ExtenderSettings
    leadership: Leadership = field(default_factory=Leadership)
    readiness: probes.Readiness = field(default_factory=probes.Readiness)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)


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
    settings = ext.settings
    limit = settings.max_body_bytes
    request_metrics = metrics.RequestMetrics(ext.registry, METRICS_NAMESPACE)
    leader_gauge = Gauge(
        "leader", "1 when this replica binds.", namespace=METRICS_NAMESPACE, registry=ext.registry
    )
    leader_gauge.set_function(lambda: 1.0 if ext.leadership.is_leader() else 0.0)
    ext.readiness.add_check("cache-synced", ext.cache.synced)
    # Binds wait on the API server, so they run on threads; a plain executor hands work over for about
    # half the CPU of Starlette's run_in_threadpool (anyio), which was a third of a bind's HTTP cost.
    binds = ThreadPoolExecutor(max_workers=settings.bind_workers, thread_name_prefix="extender-bind")
    forwarder = forward.Forwarder(
        settings.url_prefix,
        timeout_s=settings.forward_timeout_s,
        ca_file=settings.forward_ca,
        server_name=settings.forward_server_name,
        cert_file=settings.forward_cert,
        key_file=settings.forward_key,
    )
    forwarded = Counter(
        "forwarded_binds",
        "Binds this follower forwarded to the leader, by outcome.",
        ["outcome"],
        namespace=METRICS_NAMESPACE,
        registry=ext.registry,
    )
    forwarded_by_outcome = {outcome: forwarded.labels(outcome) for outcome in forward.OUTCOMES}
    backlog = BindBacklog(settings.bind_backlog, settings.filter_wait_s)
    Gauge(
        "binds_pending",
        "Binds accepted and not yet answered (waiting for a bind worker or for the API server).",
        namespace=METRICS_NAMESPACE,
        registry=ext.registry,
    ).set_function(lambda: backlog.pending)
    backlog_waits = Counter(
        "filter_backlog_wait_seconds",
        "Seconds filter held kube-scheduler while more binds than --bind-backlog were pending.",
        namespace=METRICS_NAMESPACE,
        registry=ext.registry,
    )

    @contextlib.asynccontextmanager
    async def serving(app: Starlette) -> AsyncIterator[None]:
        try:
            if lifespan is None:
                yield
            else:
                async with lifespan(app):
                    yield
        finally:
            binds.shutdown(wait=False)

    async def read_args(request: Request) -> wire.ExtenderArgs:
        return wire.extender_args(wire.parse_json(await body_limit.read_limited(request, limit)))

    async def filter_(request: Request) -> Response:
        waited = await backlog.wait()  # kube-scheduler's pace becomes the pace binds complete
        if waited:
            backlog_waits.inc(waited)
        started, outcome = time.perf_counter(), "ok"
        try:
            result = scheduling.filter_nodes(
                ext.cache, await read_args(request), settings.default_policy, settings.best_fit_filter
            )
        except (wire.WireError, body_limit.BodyTooLarge) as err:
            outcome = "bad_request"
            result = wire.filter_error(str(err))
        except body_limit.ClientDisconnect:  # nobody reads this answer; not a bug, so no traceback
            outcome = "disconnected"
            result = wire.filter_error(DISCONNECTED)
        except Exception:  # a bug of ours: still 200 with Error, which kube-scheduler reports on the pod
            log.exception("filter failed")
            outcome = "error"
            result = wire.filter_error(INTERNAL_ERROR)
        request_metrics.observe("filter", outcome, time.perf_counter() - started)
        return _reply(result, wire.filter_error(UNENCODABLE))

    async def prioritize(request: Request) -> Response:
        started = time.perf_counter()
        try:
            scores = scheduling.prioritize(ext.cache, await read_args(request), settings.default_policy)
        except (wire.WireError, body_limit.BodyTooLarge) as err:
            request_metrics.observe("prioritize", "bad_request", time.perf_counter() - started)
            return JSONResponse({"Error": str(err)}, status_code=400)
        except body_limit.ClientDisconnect:
            request_metrics.observe("prioritize", "disconnected", time.perf_counter() - started)
            return JSONResponse({"Error": DISCONNECTED}, status_code=400)
        except Exception:  # no scores: kube-scheduler then ranks nodes without ours
            log.exception("prioritize failed")
            request_metrics.observe("prioritize", "error", time.perf_counter() - started)
            return JSONResponse([])
        request_metrics.observe("prioritize", "ok", time.perf_counter() - started)
        return JSONResponse(wire.host_priority_list(scores))

    async def forward_bind(request: Request, args: wire.BindingArgs, body: bytes) -> str:
        """A follower's bind: the leader's answer, or why it could not be had."""
        holder = ext.leadership.holder() or "unknown"
        not_leader = f"this gpushare extender replica is not the leader (leader: {holder})"
        if request.headers.get(forward.FORWARDED_HEADER):
            return f"{not_leader} and the bind was already forwarded once; retry"
        url = ext.leadership.leader_url()
        if not url:
            annotation = forward.LEADER_URL_ANNOTATION
            result = forward.Forwarded(
                forward.NO_LEADER_URL,
                f"the leader's URL is unknown (no {annotation} annotation on the Lease)",
            )
        elif url == settings.advertise_url:  # we were the leader and the Lease still says so
            result = forward.Forwarded(forward.NO_LEADER_URL, "the Lease still names this replica's URL")
        else:
            result = await asyncio.get_running_loop().run_in_executor(binds, forwarder.bind, url, body)
        forwarded_by_outcome[result.outcome].inc()
        if result.outcome in (forward.BOUND, forward.REFUSED):
            return result.error
        log.warning(
            "forwarding bind failed",
            extra={"fields": {"pod": args.key, "leader": url, "error": result.error}},
        )
        return f"{not_leader}; {result.error}; retry"

    async def bind(request: Request) -> Response:
        started = time.perf_counter()
        try:
            body = await body_limit.read_limited(request, limit)
            args = wire.binding_args(wire.parse_json(body))
        except (wire.WireError, body_limit.BodyTooLarge) as err:
            request_metrics.observe("bind", "bad_request", time.perf_counter() - started)
            return JSONResponse(wire.binding_result(str(err)))
        except body_limit.ClientDisconnect:
            request_metrics.observe("bind", "disconnected", time.perf_counter() - started)
            return JSONResponse(wire.binding_result(DISCONNECTED))
        backlog.started()
        try:
            if not ext.leadership.is_leader():
                error = await forward_bind(request, args, body)
                outcome = "not_leader" if request.headers.get(forward.FORWARDED_HEADER) else "forwarded"
                request_metrics.observe("bind", outcome, time.perf_counter() - started)
                return JSONResponse(wire.binding_result(error))
            error = await asyncio.get_running_loop().run_in_executor(binds, ext.binder.bind, args)
        except Exception:  # a bug of ours: the scheduler retries a bind that answered an Error
            log.exception("bind failed", extra={"fields": {"pod": args.key, "node": args.node}})
            error = INTERNAL_ERROR
        finally:
            backlog.finished()
        request_metrics.observe("bind", "error" if error else "ok", time.perf_counter() - started)
        if error:
            log.info("bind failed", extra={"fields": {"pod": args.key, "node": args.node, "error": error}})
        return JSONResponse(wire.binding_result(error))

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

    calls = Counter(
        "scheduler_calls",
        "Calls to filter, prioritize, bind and inspect, by HTTP version: over 2, kube-scheduler sends them "
        "all on one connection (--http2); over 1.1 each call in flight beyond two opens a new one.",
        ["http_version"],
        namespace=METRICS_NAMESPACE,
        registry=ext.registry,
    )
    calls_by_version: dict[str, Any] = {}

    def caller_checked(
        endpoint: str, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """`handler`, refusing callers without a verified client certificate when a client CA is set
        (checked before the body is read). Over --http2 the server itself required a certificate the
        client CA signed at the handshake, and cannot show which (so no client names there)."""
        check = settings.client_ca is not None and not settings.http2
        allowed = frozenset(settings.client_names)

        async def checked(request: Request) -> Response:
            version = str(request.scope.get("http_version", "1.1"))
            counter = calls_by_version.get(version)
            if counter is None:
                counter = calls_by_version[version] = calls.labels(version[:8])
            counter.inc()
            if check:
                name = clientauth.client_name(request.scope)
                if name is None:
                    request_metrics.observe(endpoint, "unauthenticated", 0.0)
                    return JSONResponse({"Error": NO_CLIENT_CERTIFICATE}, status_code=403)
                if allowed and allowed.isdisjoint(clientauth.common_names(request.scope)):
                    request_metrics.observe(endpoint, "forbidden", 0.0)
                    return JSONResponse({"Error": not_an_allowed_client(name, allowed)}, status_code=403)
            return await handler(request)

        return checked

    prefix = settings.url_prefix.rstrip("/")
    routes = [
        Route(f"{prefix}/filter", caller_checked("filter", filter_), methods=["POST"]),
        Route(f"{prefix}/prioritize", caller_checked("prioritize", prioritize), methods=["POST"]),
        Route(f"{prefix}/bind", caller_checked("bind", bind), methods=["POST"]),
        Route(f"{prefix}/inspect", caller_checked("inspect", inspect_all), methods=["GET"]),
        Route(f"{prefix}/inspect/{{node}}", caller_checked("inspect", inspect_node), methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        *probes.probe_routes(ext.readiness, ext.registry),
    ]
    return Starlette(routes=routes, lifespan=serving)
