"""webhook.kube.watch with asyncdirect.LoopStreamer: which thread reads a stream and handles its events
while the app's loop comes and goes (the extender's server starts after its watches, and stops first)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube.watchkit import FAST, Loop, Mirror
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import asyncdirect, rest, watch


@pytest.fixture
def mirror() -> Mirror:
    return Mirror()


@pytest.fixture
def own_loop(apiserver: ApiServer) -> Iterator[tuple[Loop, asyncdirect.LoopStreamer]]:
    """A loop with a streamer attached, for the tests of the loop's own behaviour."""
    running = Loop()
    running.clients.append(asyncdirect.AsyncDirectClient(apiserver.api))
    streamer = asyncdirect.LoopStreamer(running.clients[0])
    streamer.attach(running.loop)
    try:
        yield running, streamer
    finally:
        streamer.detach()
        running.close()


def watching(apiserver: ApiServer, handler: Any, streamer: asyncdirect.LoopStreamer) -> watch.Watcher:
    """A started pods watch with `streamer`, once it has listed and its stream is open."""
    watcher = watch.Watcher(
        apiserver.api, rest.path("pods"), handler, settings=FAST, name="pods", streamer=streamer
    ).start()
    try:
        assert watcher.wait_synced(5)
        apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
    except BaseException:
        watcher.stop()
        raise
    return watcher


def test_on_the_loop_events_are_handled_on_the_loops_thread(apiserver, own_loop):
    threads: list[str] = []

    def handler(event: watch.WatchEvent) -> None:
        threads.append(threading.current_thread().name)

    watcher = watching(apiserver, handler, own_loop[1])
    try:
        apiserver.add_pod("a")
        apiserver.wait_for(lambda: len(threads) == 2, what="ADDED")
    finally:
        watcher.stop()
    assert threads == ["watch pods", "test loop"]  # the list on the watch's thread, events on the loop


def test_when_the_loop_ends_the_watch_resumes_on_its_own_thread(apiserver, mirror, own_loop):
    running, streamer = own_loop
    watcher = watching(apiserver, mirror, streamer)
    try:
        streamer.detach()  # the server stopped: its lifespan detaches, its loop cancels the stream
        running.close()
        apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open again")
        apiserver.add_pod("after")
        apiserver.wait_for(lambda: mirror.names() == ["after"], what="event on the thread")
    finally:
        watcher.stop()
    assert watcher.stats.lists == 1  # resumed from its resourceVersion


def test_a_streamer_with_no_loop_yet_leaves_the_stream_to_the_thread(apiserver, mirror):
    client = asyncdirect.AsyncDirectClient(apiserver.api)
    streamer = asyncdirect.LoopStreamer(client, wait_s=0.1)  # never attached: no server runs
    watcher = watching(apiserver, mirror, streamer)
    try:
        apiserver.add_pod("a")
        apiserver.wait_for(lambda: mirror.names() == ["a"], what="ADDED")
    finally:
        watcher.stop()


def test_a_loop_that_starts_late_takes_over_the_threads_stream(apiserver):
    threads: list[str] = []

    def handler(event: watch.WatchEvent) -> None:
        if event.type != watch.RESYNC:
            threads.append(threading.current_thread().name)

    client = asyncdirect.AsyncDirectClient(apiserver.api)
    streamer = asyncdirect.LoopStreamer(client, wait_s=0.05)  # the server came up after the window
    watcher = watching(apiserver, handler, streamer)  # on its thread
    running = Loop()
    running.clients.append(client)
    try:
        apiserver.add_pod("before")
        apiserver.wait_for(lambda: len(threads) == 1, what="ADDED on the thread")
        running.loop.call_soon_threadsafe(streamer.attach, running.loop)  # as the app's lifespan does
        apiserver.wait_for(lambda: watcher.stats.watches == 2, what="the stream moved")
        apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open on the loop")
        apiserver.add_pod("after")
        apiserver.wait_for(lambda: len(threads) == 2, what="ADDED on the loop")
    finally:
        watcher.stop()
        streamer.detach()
        running.close()
    assert threads == ["watch pods", "test loop"]
    assert watcher.stats.lists == 1  # moved from its resourceVersion, nothing listed again
    assert watcher.stats.errors == 0  # the cut is no failure: no backoff, no warning


def test_every_watch_waits_out_the_same_window_for_the_loop(apiserver, monkeypatch):
    """Two watches start before the server: the second to ask must wait too, not fall to its thread."""
    client = asyncdirect.AsyncDirectClient(apiserver.api)
    streamer = asyncdirect.LoopStreamer(client, wait_s=5.0)
    on_loop: list[bool] = []
    real_get = streamer.get

    def get(*args: Any) -> Any:
        running = real_get(*args)
        on_loop.append(running is not None)
        return running

    monkeypatch.setattr(streamer, "get", get)
    running = Loop()
    running.clients.append(client)
    watchers = [
        watch.Watcher(apiserver.api, rest.path("pods"), None, settings=FAST, name=f"w{i}", streamer=streamer)
        for i in range(2)
    ]
    for w in watchers:
        w.start()
    try:
        time.sleep(0.3)
        running.loop.call_soon_threadsafe(streamer.attach, running.loop)
        assert all(w.wait_synced(5) for w in watchers)
    finally:
        for w in watchers:
            w.stop()
        streamer.detach()
        running.close()
    assert on_loop and all(on_loop)
    assert [w.stats.watches for w in watchers] == [1, 1]
