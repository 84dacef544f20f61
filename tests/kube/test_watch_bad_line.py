"""An undecodable watch line ends the stream at that line on both paths: on the loop path httptools
kept parsing the rest of the bytes already received, and later events were applied and the
resourceVersion moved past the bad event, so the resume skipped it for good. Now both resume from the
last good resourceVersion. A raw HTTP server sends the three events in one write."""

from __future__ import annotations

import json
import socket
import threading
import time

import kubernetes.client
import pytest

from tests.kube.watchkit import FAST, Loop, Mirror
from webhook.kube import asyncdirect, rest, watch


def ev(kind, name, rv):
    return (
        json.dumps({"type": kind, "object": {"metadata": {"name": name, "resourceVersion": rv}}}).encode()
        + b"\n"
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Server:
    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.watch_rvs = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn):
        with conn:
            f = conn.makefile("rb")
            while True:
                line = f.readline()
                if not line:
                    return
                target = line.split()[1].decode()
                while f.readline() not in (b"\r\n", b""):
                    pass
                if "watch=true" not in target:
                    body = json.dumps(
                        {"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []}
                    ).encode()
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(body), body)
                    )
                    continue
                rv = target.split("resourceVersion=")[1].split("&")[0]
                self.watch_rvs.append(rv)
                head = (
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                if len(self.watch_rvs) == 1:
                    # one TCP write: a good event, a corrupted line, another good event, end of stream
                    conn.sendall(
                        head
                        + chunk(ev("ADDED", "a", "2"))
                        + chunk(b"{corrupt\n")
                        + chunk(ev("ADDED", "c", "4"))
                        + b"0\r\n\r\n"
                    )
                else:
                    conn.sendall(head)
                    time.sleep(0.5)
                    conn.sendall(b"0\r\n\r\n")
                return


@pytest.mark.parametrize("path", ["thread", "loop"])
def test_events_after_a_failed_line_are_not_applied(path):
    server = Server()
    api = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=f"http://127.0.0.1:{server.port}"))
    running = streamer = None
    if path == "loop":
        running = Loop()
        running.clients.append(asyncdirect.AsyncDirectClient(api))
        streamer = asyncdirect.LoopStreamer(running.clients[0])
        streamer.attach(running.loop)
    mirror = Mirror()
    w = watch.Watcher(api, rest.path("pods"), mirror, settings=FAST, name="pods", streamer=streamer).start()
    try:
        deadline = time.monotonic() + 5
        while len(server.watch_rvs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        w.stop()
        if running is not None and streamer is not None:
            streamer.detach()
            running.close()
        server.sock.close()
    assert server.watch_rvs[:2] == ["1", "2"], (
        f"resumed from {server.watch_rvs[1:2]} after the bad line at rv 3; applied: {mirror.changes()}"
    )
    assert mirror.changes() == [("ADDED", "a")]
