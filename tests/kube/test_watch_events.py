"""webhook.kube.watch on watch events that are JSON but not the shape the API server writes: the watch
reports them and keeps retrying, it never dies (a dead pods watch would freeze the extender's cache while
it still answers as synced)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kubernetes.client
import pytest

from webhook.kube import rest, watch

FAST = watch.WatchSettings(timeout_seconds=30, page_size=0, backoff=watch.Backoff(initial=0.01, maximum=0.02))
EMPTY_LIST = b'{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[]}'


def serve(line: bytes) -> tuple[ThreadingHTTPServer, list[int]]:
    """An API server that lists no pods and answers every watch with `line` alone."""
    watches = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            streaming = "watch=true" in self.path
            if streaming:
                watches[0] += 1
            body = line + b"\n" if streaming else EMPTY_LIST
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, watches


@pytest.fixture
def api() -> Iterator[kubernetes.client.ApiClient]:
    client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host="http://127.0.0.1:1"))
    yield client
    client.close()


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"ADDED","object":"a pod"}',
        b'{"type":"ADDED","object":[1]}',
        b'{"type":"MODIFIED","object":{"metadata":"a pod"}}',
        b'{"type":"ERROR","object":{"code":"Gone"}}',
        b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"2"},"x":NaN}}',
        b'{"type":"ADDED","object":{"metadata":{"name":"a\\ud800","resourceVersion":"2"}}}',
    ],
    ids=["object-string", "object-list", "metadata-string", "error-code-string", "nan", "lone-surrogate"],
)
def test_a_watch_event_of_the_wrong_shape_is_reported_and_the_watch_goes_on(api, line):
    server, watches = serve(line)
    api.configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    seen: list[watch.WatchEvent] = []
    watcher = watch.Watcher(api, rest.path("pods"), seen.append, settings=FAST, name="pods").start()
    try:
        deadline = time.monotonic() + 5
        while watches[0] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watches[0] >= 3, "the watch stopped retrying"
        assert watcher._thread is not None and watcher._thread.is_alive()
        assert watcher.last_error is not None and watcher.last_error.reason == "BadWatchEvent"
        assert [e.type for e in seen] == [watch.RESYNC]
    finally:
        watcher.stop()
        server.shutdown()
        server.server_close()
