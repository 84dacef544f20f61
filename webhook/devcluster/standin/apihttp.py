"""HTTP/1.1 side of the Kubernetes API stand-in: routing, verbs, chunked watch streams, injected faults.

The store (`apistore.py`) holds state; `Controls` holds what tests steer (faults, latency, request
counts, open watches). See `apiserver.py` for the fixture API.
"""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from webhook.devcluster.standin.apistore import Store
from webhook.devcluster.standin.apiwire import (
    BY_PLURAL,
    ApiStatusError,
    Change,
    Filter,
    Obj,
    ResourceType,
    success_status,
)

MAX_BODY = 3 * 1024 * 1024


@dataclass
class Fault:
    verb: str
    resource: str
    status: int
    remaining: int


@dataclass(eq=False)
class WatchSession:
    dropped: bool = False


class Controls:
    """What a test steers: injected faults, latency, request counts, open watches, watch timings."""

    def __init__(self, bookmark_interval: float, watch_timeout: float) -> None:
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.latency = 0.0
        self.delays: dict[tuple[str, str], float] = {}  # (verb, resource) -> extra seconds, "*" matches all
        self.stopping = False
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.faults: list[Fault] = []
        self.watches: set[WatchSession] = set()
        self.lock = threading.Lock()

    def take_fault(self, verb: str, resource: str) -> int | None:
        with self.lock:
            self.requests[(verb, resource)] += 1
            for fault in self.faults:
                if fault.verb in (verb, "*") and fault.resource in (resource, "*") and fault.remaining > 0:
                    fault.remaining -= 1
                    return fault.status
            return None

    def delay_for(self, verb: str, resource: str) -> float:
        with self.lock:
            return max(
                (s for (v, r), s in self.delays.items() if v in (verb, "*") and r in (resource, "*")),
                default=0.0,
            )

    def open_watch(self) -> WatchSession:
        session = WatchSession()
        with self.lock:
            self.watches.add(session)
        return session

    def close_watch(self, session: WatchSession) -> None:
        with self.lock:
            self.watches.discard(session)


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, store: Store, controls: Controls) -> None:
        self.store = store
        self.controls = controls
        self.connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        super().__init__(("127.0.0.1", port), Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.conn_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.conn_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away mid-request (a stopped part, cut_connections) is no server error;
        # socketserver would print a traceback on stderr for it.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def cut_connections(self) -> None:
        """Close every client connection (keep-alive ones included), as a crashing server would."""
        with self.conn_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class Dropped(Exception):
    """The watch stream is cut on purpose (drop_watches or stop)."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small JSON replies on keep-alive connections: no 40 ms ACK stalls
    server: HttpServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _send_json(self, code: int, body: Obj) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_raw(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            raise ApiStatusError(413, "request entity too large")
        return self.rfile.read(length) if length > 0 else b""

    def _handle(self, method: str) -> None:
        controls = self.server.controls
        try:
            raw = self._read_raw()  # always drain the body, so a refusal keeps the connection usable
            if controls.latency:
                time.sleep(controls.latency)
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            if url.path in ("/version", "/healthz", "/readyz"):
                self._send_json(200, {"major": "1", "minor": "37", "gitVersion": "v1.37.0-standin"})
                return
            rt, namespace, name, sub = route(url.path)
            verb = request_verb(method, name, query)
            label = f"{rt.plural}/{sub}" if sub else rt.plural
            delay = controls.delay_for(verb, label)
            if delay:
                time.sleep(delay)
            fault = controls.take_fault(verb, label)
            if fault is not None and not (verb == "watch" and fault == 410):
                raise ApiStatusError(fault, f"injected fault {fault} for {verb} {label}")
            if verb == "watch":
                self._watch(rt, namespace, query, expired=fault == 410)
                return
            code, reply = dispatch(
                self.server.store,
                verb=verb,
                rt=rt,
                namespace=namespace,
                name=name,
                sub=sub,
                query=query,
                body=decode(raw),
                content_type=self.headers.get("Content-Type", ""),
            )
            self._send_json(code, reply)
        except ApiStatusError as exc:
            self._send_json(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError, Dropped):
            self.close_connection = True
        except Exception as exc:  # a stand-in bug must reach the test as a 500, not a hung client
            self.close_connection = True
            self._send_json(500, ApiStatusError(500, f"stand-in error: {exc!r}").status())

    def _chunk(self, event: Obj) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _watch(self, rt: ResourceType, namespace: str | None, query: dict[str, str], expired: bool) -> None:
        controls, store = self.server.controls, self.server.store
        flt = Filter.parse(namespace, query.get("labelSelector", ""), query.get("fieldSelector", ""))
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or controls.watch_timeout)
        requested = query.get("resourceVersion", "")
        last = 0 if requested in ("", "0") else int_rv(requested)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        session = controls.open_watch()
        try:
            initial: list[Obj] = []
            if requested in ("", "0") and not expired:  # "most recent": synthetic ADDED for the current state
                with store.cond:
                    initial = [o for o in store.objects[rt.plural].values() if flt.matches(o)]
                    last = store.rv
            for obj in initial:
                self._chunk({"type": "ADDED", "object": obj})
            last_bookmark = time.monotonic()
            while not expired:
                with store.cond:
                    got = store.changes_after(rt.plural, last)
                    while got is not None and not got[0] and not session.dropped and not controls.stopping:
                        left = deadline - time.monotonic()
                        since = time.monotonic() - last_bookmark
                        if left <= 0 or (bookmarks and since >= controls.bookmark_interval):
                            break
                        store.cond.wait(min(left, controls.bookmark_interval) if bookmarks else left)
                        got = store.changes_after(rt.plural, last)
                if session.dropped or controls.stopping:
                    raise Dropped
                if got is None:
                    expired = True
                    break
                changes, current = got
                for change in changes:
                    event = visible(change, flt)
                    if event is not None:
                        self._chunk(event)
                    last = change.rv
                if bookmarks and time.monotonic() - last_bookmark >= controls.bookmark_interval:
                    last = max(last, current)
                    meta = {"resourceVersion": str(last)}
                    obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
                    self._chunk({"type": "BOOKMARK", "object": obj})
                    last_bookmark = time.monotonic()
                if time.monotonic() >= deadline:
                    break
            if expired:
                gone = ApiStatusError(410, f"too old resource version: {last} ({store.rv})", "Expired")
                self._chunk({"type": "ERROR", "object": gone.status()})
            self.wfile.write(b"0\r\n\r\n")
        except Dropped:
            with contextlib.suppress(OSError):  # cut without the final chunk, as a broken network does
                self.connection.shutdown(socket.SHUT_RDWR)
            raise
        finally:
            controls.close_watch(session)


def visible(change: Change, flt: Filter) -> Obj | None:
    """The event a filtered watch sees: objects moving out of (into) the selection are DELETED (ADDED)."""
    if change.type == "DELETED":
        return {"type": "DELETED", "object": change.obj} if flt.matches(change.obj) else None
    now, before = flt.matches(change.obj), change.type == "MODIFIED" and flt.matches(change.old)
    if now and before:
        return {"type": "MODIFIED", "object": change.obj}
    if now:
        return {"type": "ADDED", "object": change.obj}
    if before:
        return {"type": "DELETED", "object": change.obj}
    return None


def int_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise ApiStatusError(400, f"invalid resource version: {text!r}") from exc


def decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiStatusError(400, f"the body of the request could not be decoded as JSON: {exc}") from exc


def route(path: str) -> tuple[ResourceType, str | None, str, str]:
    """URL path -> (resource type, namespace, name, subresource); 404 Status for anything not served."""
    parts = [p for p in path.split("/") if p]
    not_found = ApiStatusError(404, "the server could not find the requested resource")
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise not_found
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise not_found
    if rest == ["bindings"] and namespace and group == "":  # legacy POST .../namespaces/{ns}/bindings
        return BY_PLURAL["pods"], namespace, "", "bindings"
    rt = BY_PLURAL.get(rest[0])
    if (
        rt is None
        or (rt.group, rt.version) != (group, version)
        or (namespace is not None and not rt.namespaced)
    ):
        raise not_found
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and not ((sub == "status" and rt.has_status) or (sub == "binding" and rt.plural == "pods")):
        raise not_found
    if rt.namespaced and name and namespace is None:
        raise not_found
    return rt, namespace, name, sub


def request_verb(method: str, name: str, query: dict[str, str]) -> str:
    if method == "GET":
        if name:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
    if verb != "create" and not name:
        raise ApiStatusError(405, f"{method} needs an object name")
    return verb


def dispatch(
    store: Store,
    *,
    verb: str,
    rt: ResourceType,
    namespace: str | None,
    name: str,
    sub: str,
    query: dict[str, str],
    body: Any,
    content_type: str,
) -> tuple[int, Obj]:
    """One non-watch request -> (HTTP code, JSON reply)."""
    if sub in ("binding", "bindings"):
        if verb != "create" or namespace is None:
            raise ApiStatusError(405, "the server does not allow this method on the requested resource")
        name = name or str(((body if isinstance(body, dict) else {}).get("metadata") or {}).get("name") or "")
        return 201, store.bind(namespace, name, body)
    if verb == "get":
        return 200, store.get(rt, namespace, name)
    if verb == "list":
        flt = Filter.parse(namespace, query.get("labelSelector", ""), query.get("fieldSelector", ""))
        try:
            limit = int(query.get("limit") or 0)
        except ValueError as exc:
            raise ApiStatusError(400, "limit must be an integer") from exc
        items, rv, cont = store.list_objects(rt, flt, limit, query.get("continue", ""))
        meta: Obj = {"resourceVersion": str(rv)}
        if cont:
            meta["continue"] = cont
        return 200, {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items}
    if verb == "create":
        if rt.namespaced and namespace is None:
            raise ApiStatusError(404, "the server could not find the requested resource")
        return 201, store.create(rt, namespace, body)
    if verb == "update":
        return 200, store.update(rt, namespace, name, body, sub=sub)
    if verb == "patch":
        media = content_type.split(";", 1)[0].strip().lower()
        return 200, store.patch(rt, namespace, name, body, content_type=media, sub=sub)
    deleted = store.delete(rt, namespace, name, body if isinstance(body, dict) else None)
    if rt.plural == "pods" or deleted["metadata"].get("deletionTimestamp"):
        return 200, deleted
    details = {"name": name, "kind": rt.plural, "uid": deleted["metadata"]["uid"]}
    return 200, success_status(200, details)
