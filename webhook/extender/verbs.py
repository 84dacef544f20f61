"""filter, prioritize and bind as bare ASGI endpoints (`serving.fastpath`): kube-scheduler calls them
for every pod, so they skip Starlette's middleware, router and Request/Response objects.

Scheduler verbs always answer HTTP 200 with JSON; a failure is carried in `Error` (filter, bind), as
kube-scheduler expects (pkg/scheduler/extender.go). Prioritize has no Error field: bad input gets 400 with
one, and the scheduler then ignores our scores, as it does for any prioritize error. A follower forwards
bind to the leader (`bind/forward.py`). Binds run on the event loop when the app has a loop API, else (and for
a duplicate that must wait for the pod's turn) on threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from prometheus_client import Counter, Gauge
from starlette.types import Receive, Scope, Send

from webhook.extender import scheduling, wire
from webhook.extender.bind import forward
from webhook.extender.bind.backlog import BindBacklog
from webhook.extender.host import Host
from webhook.serving import body as body_limit
from webhook.serving import clientauth, fastpath, metrics, protocol

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
_FORWARDED = forward.FORWARDED_HEADER.lower().encode("latin-1")

# (status, content): what an endpoint answers, encoded by `_Endpoint`.
Answer = tuple[int, Any]


def not_an_allowed_client(name: str, allowed: frozenset[str]) -> str:
    # The subject is the caller's own (verified by our CA); clipped so a long one cannot bloat the reply.
    names = ", ".join(sorted(allowed))
    return (
        f"the client certificate {name[:200]!r} is signed by the extender's client CA but its common name "
        f"is not one the extender accepts ({names}: --client-name)"
    )


def _gone(err: body_limit.ClientDisconnect) -> str:
    """Why the body did not come: the client left, or (a BodyTimeout) stalled past the deadline."""
    return str(err) if isinstance(err, body_limit.BodyTimeout) else DISCONNECTED


def encode(content: Any, fallback: Any = None) -> bytes:
    """`content` as JSON, or `fallback` when it cannot be encoded (filter echoes the Node objects it got,
    and orjson refuses nesting past 254 levels)."""
    try:
        return orjson.dumps(content)
    except orjson.JSONEncodeError:
        return orjson.dumps(fallback)


class Callers:
    """Who may call: with a client CA, a verified client certificate (and with --client-name, one of those
    common names). Over --http2 the server itself required a certificate the client CA signed at the
    handshake, and cannot show which (so no client names there). Also counts calls by HTTP version."""

    def __init__(self, ext: Host, stats: metrics.RequestMetrics) -> None:
        settings = ext.settings
        self.stats = stats
        self.check = settings.client_ca is not None and not settings.http2
        self.allowed = frozenset(settings.client_names)
        self.calls = Counter(
            "scheduler_calls",
            "Calls to filter, prioritize, bind and inspect, by HTTP version: over 2, kube-scheduler sends "
            "them all on one connection (--http2); over 1.1 each call in flight beyond two opens a new one.",
            ["http_version"],
            namespace=METRICS_NAMESPACE,
            registry=ext.registry,
        )
        self._by_version: dict[str, Any] = {}

    def refusal(self, endpoint: str, scope: Scope) -> Answer | None:
        """Count the call; None to answer it, else the 403 to send instead (checked before the body)."""
        version = str(scope.get("http_version", "1.1"))
        counter = self._by_version.get(version)
        if counter is None:
            counter = self._by_version[version] = self.calls.labels(version[:8])
        counter.inc()
        if not self.check:
            return None
        name = clientauth.client_name(scope)
        if name is None:
            self.stats.observe(endpoint, "unauthenticated", 0.0)
            return 403, {"Error": NO_CLIENT_CERTIFICATE}
        if self.allowed and self.allowed.isdisjoint(clientauth.common_names(scope)):
            self.stats.observe(endpoint, "forbidden", 0.0)
            return 403, {"Error": not_an_allowed_client(name, self.allowed)}
        return None


class _Endpoint:
    """One verb as a bare ASGI app: the caller checked, then `answer(scope, receive)` encoded."""

    def __init__(
        self,
        name: str,
        callers: Callers,
        answer: Callable[[Scope, Receive], Awaitable[Answer]],
        fallback: Any,
    ) -> None:
        self.name, self.callers, self.answer, self.fallback = name, callers, answer, fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.callers.refusal(self.name, scope)
        status, content = refused if refused is not None else await self.answer(scope, receive)
        await fastpath.send_json(send, status, encode(content, self.fallback))


class Verbs:
    """The three endpoints of `ext`, by path (under settings.url_prefix); `close()` when the app stops."""

    def __init__(self, ext: Host, stats: metrics.RequestMetrics, callers: Callers) -> None:
        settings = self.settings = ext.settings
        self.ext, self.stats, self.limit = ext, stats, settings.max_body_bytes
        # Binds on threads (no loop API, duplicates): a plain executor hands work over for about half
        # the CPU of Starlette's run_in_threadpool (anyio).
        self.binds = ThreadPoolExecutor(max_workers=settings.bind_workers, thread_name_prefix="extender-bind")
        self.forwarder = forward.Forwarder(
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
        self.forwarded = {outcome: forwarded.labels(outcome) for outcome in forward.OUTCOMES}
        backlog = self.backlog = BindBacklog(settings.bind_backlog, settings.filter_wait_s)
        Gauge(
            "binds_pending",
            "Binds accepted and not yet answered (waiting for a bind worker or for the API server).",
            namespace=METRICS_NAMESPACE,
            registry=ext.registry,
        ).set_function(lambda: backlog.pending)
        self.backlog_waits = Counter(
            "filter_backlog_wait_seconds",
            "Seconds filter held kube-scheduler while more binds than --bind-backlog were pending.",
            namespace=METRICS_NAMESPACE,
            registry=ext.registry,
        )
        # Over --http2 granian sets no deadline on a body, and a half-sent one would hold its stream (and
        # a graceful stop) forever: AppServer's own body deadline, kept here.
        self.body_timeout_s = protocol.Limits().body_timeout_s if settings.http2 else None
        prefix = settings.url_prefix.rstrip("/")
        self.endpoints = {
            f"{prefix}/filter": _Endpoint("filter", callers, self.filter, wire.filter_error(UNENCODABLE)),
            f"{prefix}/prioritize": _Endpoint("prioritize", callers, self.prioritize, []),
            f"{prefix}/bind": _Endpoint("bind", callers, self.bind, wire.binding_result(UNENCODABLE)),
        }

    def close(self) -> None:
        self.binds.shutdown(wait=False)
        if self.ext.loop_api is not None:
            self.ext.loop_api.close()

    async def _args(self, scope: Scope, receive: Receive) -> wire.ExtenderArgs:
        body = await body_limit.receive_body(scope["headers"], receive, self.limit, self.body_timeout_s)
        return wire.extender_args(wire.parse_json(body))

    async def filter(self, scope: Scope, receive: Receive) -> Answer:
        waited = await self.backlog.wait()  # kube-scheduler's pace becomes the pace binds complete
        if waited:
            self.backlog_waits.inc(waited)
        started, outcome = time.perf_counter(), "ok"
        settings = self.settings
        try:
            args = await self._args(scope, receive)
            result = scheduling.filter_nodes(
                self.ext.cache, args, settings.default_policy, settings.best_fit_filter
            )
        except (wire.WireError, body_limit.BodyTooLarge) as err:
            outcome = "bad_request"
            result = wire.filter_error(str(err))
        except body_limit.ClientDisconnect as err:  # nobody reads this answer; not a bug, no traceback
            outcome = "disconnected"
            result = wire.filter_error(_gone(err))
        except Exception:  # a bug of ours: still 200 with Error, which kube-scheduler reports on the pod
            log.exception("filter failed")
            outcome = "error"
            result = wire.filter_error(INTERNAL_ERROR)
        self.stats.observe("filter", outcome, time.perf_counter() - started)
        return 200, result

    async def prioritize(self, scope: Scope, receive: Receive) -> Answer:
        started = time.perf_counter()
        try:
            args = await self._args(scope, receive)
            scores = scheduling.prioritize(self.ext.cache, args, self.settings.default_policy)
        except (wire.WireError, body_limit.BodyTooLarge) as err:
            self.stats.observe("prioritize", "bad_request", time.perf_counter() - started)
            return 400, {"Error": str(err)}
        except body_limit.ClientDisconnect as err:
            self.stats.observe("prioritize", "disconnected", time.perf_counter() - started)
            return 400, {"Error": _gone(err)}
        except Exception:  # no scores: kube-scheduler then ranks nodes without ours
            log.exception("prioritize failed")
            self.stats.observe("prioritize", "error", time.perf_counter() - started)
            return 200, []
        self.stats.observe("prioritize", "ok", time.perf_counter() - started)
        return 200, wire.host_priority_list(scores)

    async def bind(self, scope: Scope, receive: Receive) -> Answer:
        started = time.perf_counter()
        try:
            body = await body_limit.receive_body(scope["headers"], receive, self.limit, self.body_timeout_s)
            args = wire.binding_args(wire.parse_json(body))
        except (wire.WireError, body_limit.BodyTooLarge) as err:
            self.stats.observe("bind", "bad_request", time.perf_counter() - started)
            return 200, wire.binding_result(str(err))
        except body_limit.ClientDisconnect as err:
            self.stats.observe("bind", "disconnected", time.perf_counter() - started)
            return 200, wire.binding_result(_gone(err))
        ext = self.ext
        self.backlog.started()
        try:
            if not ext.leadership.is_leader():
                forwarded = any(name == _FORWARDED and value for name, value in scope["headers"])
                error = await self._forward(args, body, forwarded)
                outcome = "not_leader" if forwarded else "forwarded"
                self.stats.observe("bind", outcome, time.perf_counter() - started)
                return 200, wire.binding_result(error)
            answer = None
            if ext.loop_api is not None:
                answer = await ext.binder.bind_on_loop(args, ext.loop_api)
            if answer is None:  # on a thread: no loop API, or a duplicate that waits for the pod's turn
                answer = await asyncio.get_running_loop().run_in_executor(self.binds, ext.binder.bind, args)
            error = answer
        except Exception:  # a bug of ours: the scheduler retries a bind that answered an Error
            log.exception("bind failed", extra={"fields": {"pod": args.key, "node": args.node}})
            error = INTERNAL_ERROR
        finally:
            self.backlog.finished()
        self.stats.observe("bind", "error" if error else "ok", time.perf_counter() - started)
        if error:
            log.info("bind failed", extra={"fields": {"pod": args.key, "node": args.node, "error": error}})
        return 200, wire.binding_result(error)

    async def _forward(self, args: wire.BindingArgs, body: bytes, forwarded: bool) -> str:
        """A follower's bind: the leader's answer, or why it could not be had."""
        leadership = self.ext.leadership
        holder = leadership.holder() or "unknown"
        not_leader = f"this gpushare extender replica is not the leader (leader: {holder})"
        if forwarded:
            return f"{not_leader} and the bind was already forwarded once; retry"
        url = leadership.leader_url()
        if not url:
            annotation = forward.LEADER_URL_ANNOTATION
            result = forward.Forwarded(
                forward.NO_LEADER_URL,
                f"the leader's URL is unknown (no {annotation} annotation on the Lease)",
            )
        elif url == self.settings.advertise_url:  # we were the leader and the Lease still says so
            result = forward.Forwarded(forward.NO_LEADER_URL, "the Lease still names this replica's URL")
        else:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self.binds, self.forwarder.bind, url, body)
        self.forwarded[result.outcome].inc()
        if result.outcome != forward.BOUND:
            # Not bound: kube-scheduler filters the pod again. Its nomination by this replica's filter
            # would otherwise count for the TTL as memory taken, and kube-scheduler parks the pods that
            # phantom turns away (found with the leader's pod killed during a burst: tests/cluster).
            self.ext.cache.drop_nomination(args.key)
        if result.outcome in (forward.BOUND, forward.REFUSED):
            return result.error
        log.warning(
            "forwarding bind failed",
            extra={"fields": {"pod": args.key, "leader": url, "error": result.error}},
        )
        return f"{not_leader}; {result.error}; retry"
