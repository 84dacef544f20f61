"""List + watch of one collection, kept going: resume from the last resourceVersion, re-list on 410 Gone.

A `Watcher` delivers `WatchEvent`s to a callback (or a queue): first a RESYNC carrying the complete list,
then ADDED/MODIFIED/DELETED; after any re-list another RESYNC, which replaces everything the consumer
knew (deletions missed during the gap included). Bookmarks only move the resourceVersion. Transport
errors, dropped streams and 5xx answers back off and resume; `stop()` works from any thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import kubernetes.client
import orjson
import urllib3

from webhook.kube import errors, rest

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ADDED, MODIFIED, DELETED, RESYNC = "ADDED", "MODIFIED", "DELETED", "RESYNC"
# A page of a list read on the streamer's loop: its client times out the request first (rest's timeout).
LIST_PAGE_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change: `object` for ADDED/MODIFIED/DELETED; `objects` (the full state) for RESYNC."""

    type: str
    object: Obj | None = None
    objects: tuple[Obj, ...] = ()
    resource_version: str = ""
    # RESYNC: time.monotonic_ns() when the list was asked for. What it lacks was gone by then, so a
    # consumer may drop what it made before that moment for an object the list does not hold.
    listed_ns: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with ±20 % jitter: initial * factor**attempt, capped at `maximum` seconds."""

    initial: float = 0.2
    maximum: float = 30.0
    factor: float = 2.0

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 32))
        return base * random.uniform(0.8, 1.2)


@dataclasses.dataclass(frozen=True, slots=True)
class WatchSettings:
    timeout_seconds: int = 300  # asked of the server per watch request; the stream then ends and resumes
    bookmarks: bool = True
    page_size: int = 500  # list limit; 0 lists in one reply
    connect_timeout: float = 5.0
    backoff: Backoff = Backoff()

    @property
    def read_timeout_s(self) -> float:
        """How long a stream may send nothing before it is cut and resumed: what a silent stall costs."""
        return self.timeout_seconds + 30.0


@dataclasses.dataclass(slots=True)
class WatchStats:
    """Counters for tests and metrics."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    expired: int = 0  # 410 Gone answers (each followed by a re-list)
    errors: int = 0


class Watcher:
    """Keeps one list+watch of `resource_path` (e.g. rest.path("pods")) alive until `stop()`."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        resource_path: str,
        handler: Callable[[WatchEvent], None] | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        settings: WatchSettings = WatchSettings(),
        name: str = "",
        streamer: Streamer | None = None,
    ) -> None:
        self.api = api
        self.streamer = streamer
        self.resource_path = resource_path
        self.selectors = {
            k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v
        }
        self.settings = settings
        self.name = name or resource_path
        self.stats = WatchStats()
        self.synced = threading.Event()  # set after the first complete list was delivered
        self.events: queue.Queue[WatchEvent] = queue.Queue()  # used when no handler is given
        self.resource_version = ""
        self.last_error: errors.ApiError | None = None
        self._handler = handler
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: urllib3.BaseHTTPResponse | concurrent.futures.Future[None] | None = None
        self._thread: threading.Thread | None = None
        self._pending = b""  # a loop stream's bytes after its last full line
        self._fed = False  # whether the loop stream delivered anything
        self._to_loop = False  # a loop came: end the thread's stream and resume it there
        if streamer is not None:
            streamer.when_attached(self._move_to_loop)

    # --- lifecycle ---

    def start(self) -> Watcher:
        self._thread = threading.Thread(target=self.run, name=f"watch {self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and cut the open stream; waits up to `timeout` for the thread."""
        self._stop.set()
        with self._lock:
            response = self._response
        if isinstance(response, concurrent.futures.Future):
            response.cancel()
        elif response is not None:
            _cut(response)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.synced.wait(timeout)

    def run(self) -> None:
        """The loop: list, then watch and resume until stopped. Never raises an API error."""
        attempt = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if not self.resource_version:
                    self._list()
                if self._watch_once():
                    attempt = 0
                    continue
                if time.monotonic() - started >= 1.0:
                    continue  # a quiet stream that ran to its timeout: resume at once
                problem = "watch stream ended at once without events"
            except errors.GoneError:
                self.stats.expired += 1
                self.resource_version = ""
                if attempt == 0:
                    attempt = 1
                    continue  # re-list at once; back off only when 410 comes again straight after
                problem = "410 Gone again right after a list"
            except errors.ApiError as exc:
                if self._stop.is_set():
                    break
                self.stats.errors += 1
                self.last_error = exc
                problem = str(exc)
            delay = self.settings.backoff.delay(attempt)
            attempt += 1
            log.warning("watch %s: %s; retrying in %.2fs", self.name, problem, delay)
            self._stop.wait(delay)

    # --- internals ---

    def _emit(self, event: WatchEvent) -> None:
        if self._handler is None:
            self.events.put(event)
            return
        try:
            self._handler(event)
        except Exception:  # a consumer bug must not end the watch
            log.exception("watch %s: handler failed on %s", self.name, event.type)

    def _list(self) -> None:
        listed_ns = time.monotonic_ns()
        items: list[Obj] = []
        query: dict[str, str | int | bool] = dict(self.selectors)
        if self.settings.page_size:
            query["limit"] = self.settings.page_size
        while True:
            reply = self._get(query)
            meta = reply.get("metadata") or {}
            items += reply.get("items") or []
            if not meta.get("continue"):
                break
            query["continue"] = meta["continue"]
        self.stats.lists += 1
        self.resource_version = str(meta.get("resourceVersion") or "")
        self._emit(
            WatchEvent(
                RESYNC, objects=tuple(items), resource_version=self.resource_version, listed_ns=listed_ns
            )
        )
        self.synced.set()

    def _get(self, query: dict[str, str | int | bool]) -> Any:
        """A page of the list: on the streamer's loop when there is one (read there in large pieces; a
        thread's many small reads each wait for the GIL while the loop is busy), else on this thread."""
        running = self.streamer.get(self.resource_path, query) if self.streamer is not None else None
        if running is None:
            return rest.request(self.api, "GET", self.resource_path, query=query)
        try:
            return running.result(timeout=LIST_PAGE_TIMEOUT_S)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            running.cancel()
            raise errors.ApiError(errors.TRANSPORT, "Cancelled", "the event loop stopped mid-list") from None

    def _watch_once(self) -> bool:
        """One watch request from `resource_version`; True when it delivered anything (healthy)."""
        query: dict[str, str | int | bool] = {
            **self.selectors,
            "watch": True,
            "resourceVersion": self.resource_version,
            "timeoutSeconds": self.settings.timeout_seconds,
        }
        if self.settings.bookmarks:
            query["allowWatchBookmarks"] = True
        read_timeout = self.settings.read_timeout_s
        running = None
        if self.streamer is not None:
            self._pending, self._fed = b"", False  # before the loop may feed it
            running = self.streamer.open(self.resource_path, query, self._feed, read_timeout)
        if running is not None:
            self._to_loop = False
            self.stats.watches += 1
            return self._wait_for(running)
        response = rest.open_stream(
            self.api, self.resource_path, query=query, timeout=(self.settings.connect_timeout, read_timeout)
        )
        self.stats.watches += 1
        with self._lock:
            self._response = response
            if self._stop.is_set() or self._to_loop:
                _cut(response)
        healthy = False
        try:
            with errors.translated():
                pending = b""
                for chunk in response.stream(None, decode_content=False):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip() and not self._stop.is_set():
                            self._handle_line(line)
                            healthy = True
        except errors.ApiError:
            if not self._to_loop or self._stop.is_set():
                raise
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()
        if self._to_loop:
            self._to_loop = False
            return True  # cut to move: resume on the loop at once, from the same resourceVersion
        return healthy

    def _move_to_loop(self) -> None:
        """The streamer's loop started after this watch opened its stream on the thread (the server
        came up late): without this the thread would read it until its timeout, minutes, taking the
        GIL from the loop on every read. Called on the loop's thread."""
        with self._lock:
            self._to_loop = True
            response = self._response
            if response is not None and not isinstance(response, concurrent.futures.Future):
                _cut(response)

    def _wait_for(self, running: concurrent.futures.Future[None]) -> bool:
        """Wait for a stream read on the streamer's loop (`_feed` handles its bytes there)."""
        with self._lock:
            self._response = running
        if self._stop.is_set():
            running.cancel()
        try:
            # Bounded: a loop that stopped before it ran the stream would never answer.
            running.result(timeout=self.settings.timeout_seconds + 60.0)
        except concurrent.futures.TimeoutError:
            running.cancel()
        except concurrent.futures.CancelledError:
            pass  # stopped, or the loop ended: resumed (on this thread while no loop is there)
        finally:
            with self._lock:
                self._response = None
        return self._fed

    def _feed(self, data: bytes) -> None:
        """A loop stream's bytes, as they come: each whole line is an event."""
        *lines, self._pending = (self._pending + data).split(b"\n")
        for line in lines:
            if line.strip() and not self._stop.is_set():
                self._handle_line(line)
                self._fed = True

    def _handle_line(self, line: bytes) -> None:
        try:
            event = orjson.loads(line)  # ~3x faster than json on pod events, the extender's steady load
            kind, obj = event["type"], event["object"]
            # Read here too, so an event of another shape is reported, never raised out of `run`: a
            # watch thread that died would leave the cache frozen while it still answers as synced.
            code = int(obj.get("code") or 500) if kind == "ERROR" and isinstance(obj, dict) else 500
            rv = str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise errors.ApiError(200, "BadWatchEvent", f"undecodable watch event: {line[:200]!r}") from exc
        if kind == "ERROR":
            raise errors.from_status(code, obj)
        if kind == "BOOKMARK":
            self.stats.bookmarks += 1
        elif kind in (ADDED, MODIFIED, DELETED):
            self.stats.events += 1
            self._emit(WatchEvent(kind, object=obj, resource_version=rv))
        if rv:
            self.resource_version = rv


class Streamer(Protocol):
    """Reads watch streams on an event loop instead of the watch's thread (asyncdirect.LoopStreamer)."""

    def open(
        self, resource_path: str, query: rest.Query, on_data: Callable[[bytes], None], timeout_s: float
    ) -> concurrent.futures.Future[None] | None:
        """The stream running on the loop (its result: the stream ended; ApiError: it failed), or None
        when no loop is there now (the watch then streams on its own thread)."""

    def get(self, resource_path: str, query: rest.Query) -> concurrent.futures.Future[Any] | None:
        """A GET of `resource_path` running on the loop (its result: the decoded reply), or None."""

    def when_attached(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever a loop attaches (from then on `open` and `get` run there)."""


def one_node(api: kubernetes.client.ApiClient, name: str, handler: Callable[[WatchEvent], None]) -> Watcher:
    """A watch of the Node `name` alone (its labels decide what a node agent serves)."""
    return Watcher(
        api, rest.path("nodes"), handler, field_selector=f"metadata.name={name}", name=f"node {name}"
    )


def _cut(response: urllib3.BaseHTTPResponse) -> None:
    """Unblock a thread reading `response` (shut the socket's read side)."""
    with contextlib.suppress(ValueError, OSError, NotImplementedError):  # already released or closed
        response.shutdown()
