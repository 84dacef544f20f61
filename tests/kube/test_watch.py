"""webhook.kube.watch against the API stand-in: list, watch, resume, re-list on 410, backoff, stop.

Every test runs twice: streams read on the watch's thread, and on an event loop (asyncdirect.LoopStreamer,
as the extender reads them), where the handler then runs too. The loop's own behaviour: test_watch_loop.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube.watchkit import FAST, Loop, Mirror
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import asyncdirect, rest, watch


@pytest.fixture(autouse=True, params=["thread", "loop"])
def streams(request: pytest.FixtureRequest, apiserver: ApiServer, monkeypatch) -> Iterator[Loop | None]:
    """Under "loop", every Watcher made without a streamer gets one on a running loop."""
    if request.param == "thread":
        yield None
        return
    running = Loop()
    client = asyncdirect.AsyncDirectClient(apiserver.api)
    running.clients.append(client)
    streamer = asyncdirect.LoopStreamer(client)
    streamer.attach(running.loop)
    real_init = watch.Watcher.__init__

    def init(self: watch.Watcher, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("streamer", streamer)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(watch.Watcher, "__init__", init)
    try:
        yield running
    finally:
        streamer.detach()
        running.close()


@pytest.fixture
def mirror() -> Mirror:
    return Mirror()


@pytest.fixture
def pod_watcher(apiserver: ApiServer, mirror: Mirror) -> Iterator[watch.Watcher]:
    watcher = watch.Watcher(apiserver.api, rest.path("pods"), mirror, settings=FAST, name="pods")
    try:
        yield watcher
    finally:
        watcher.stop()


def test_first_event_is_a_resync_with_every_object_across_pages(apiserver, mirror, pod_watcher):
    for i in range(5):
        apiserver.add_pod(f"p{i}")
    pod_watcher.start()
    assert pod_watcher.wait_synced(5)
    assert mirror.log[0] == ("RESYNC", "p0,p1,p2,p3,p4")
    assert apiserver.requests[("list", "pods")] == 3  # page size 2


def test_a_resync_says_when_its_list_was_asked_for(apiserver, mirror, pod_watcher):
    # Consumers drop what they made before that moment for objects the list lacks (the extender's
    # reservations of pods deleted while the watch was down).
    before = time.monotonic_ns()
    pod_watcher.start()
    assert pod_watcher.wait_synced(5)
    [(listed, arrived)] = mirror.listed
    assert before <= listed <= arrived


def test_changes_after_the_list_arrive_in_order(apiserver, mirror, pod_watcher):
    pod_watcher.start()
    assert pod_watcher.wait_synced(5)
    apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
    apiserver.add_pod("a")
    apiserver.edit("pods", "a", {"metadata": {"labels": {"x": "1"}}}, "default")
    apiserver.remove("pods", "a", "default")
    apiserver.wait_for(lambda: len(mirror.changes()) == 3, what="three events")
    assert mirror.changes() == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert pod_watcher.resource_version == str(apiserver.resource_version)


def test_dropped_streams_resume_without_losing_or_duplicating_events(apiserver, mirror, pod_watcher):
    pod_watcher.start()
    assert pod_watcher.wait_synced(5)
    expected = []
    for i in range(30):
        if i % 6 == 0:
            apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
        apiserver.add_pod(f"p{i}")
        expected.append(("ADDED", f"p{i}"))
        if i % 6 == 2:
            apiserver.drop_watches()  # some events are written while no stream is open
    apiserver.wait_for(lambda: len(mirror.changes()) >= 30, what="all events")
    time.sleep(0.1)  # room for a duplicate to show up
    assert mirror.changes() == expected
    assert pod_watcher.stats.lists == 1
    assert pod_watcher.stats.watches >= 6


def test_410_on_resume_relists_and_the_resync_catches_missed_deletions(apiserver, mirror, pod_watcher):
    apiserver.add_pod("old")
    pod_watcher.start()
    assert pod_watcher.wait_synced(5)
    apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
    apiserver.latency = 0.2  # keep the watcher away while history changes and is compacted
    apiserver.drop_watches()
    apiserver.remove("pods", "old", "default")
    apiserver.add_pod("new")
    apiserver.compact()
    apiserver.latency = 0.0
    apiserver.wait_for(lambda: mirror.names() == ["new"], what="re-list")
    assert pod_watcher.stats.expired >= 1
    assert pod_watcher.stats.lists == 2
    assert mirror.log[-1] == ("RESYNC", "new")


def test_410_error_event_on_a_fresh_watch_relists(apiserver, mirror, pod_watcher):
    apiserver.fail_next("watch", "pods", status=410)
    pod_watcher.start()
    apiserver.wait_for(lambda: pod_watcher.stats.lists == 2, what="second list")
    assert pod_watcher.stats.expired == 1


def test_5xx_answers_back_off_and_then_recover(apiserver, mirror, pod_watcher):
    apiserver.add_pod("a")
    apiserver.fail_next("list", "pods", status=500, count=3)
    apiserver.fail_next("watch", "pods", status=503, count=2)
    pod_watcher.start()
    assert pod_watcher.wait_synced(5)
    apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
    apiserver.add_pod("b")
    apiserver.wait_for(lambda: mirror.names() == ["a", "b"], what="b")
    assert pod_watcher.stats.errors == 5
    assert pod_watcher.last_error is not None and pod_watcher.last_error.status == 503


def test_selectors_are_applied_to_list_and_watch(apiserver, mirror):
    apiserver.add_pod("mine", node_name="n1")
    apiserver.add_pod("other", node_name="n2")
    watcher = watch.Watcher(
        apiserver.api, rest.path("pods"), mirror, field_selector="spec.nodeName=n1", settings=FAST
    )
    watcher.start()
    try:
        assert watcher.wait_synced(5)
        apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
        apiserver.add_pod("later", node_name="n1")
        apiserver.add_pod("elsewhere", node_name="n2")
        apiserver.wait_for(lambda: mirror.names() == ["later", "mine"], what="later")
    finally:
        watcher.stop()
    assert "elsewhere" not in mirror.names()


def test_stop_from_another_thread_ends_an_idle_watch_quickly(apiserver, pod_watcher):
    pod_watcher.start()
    apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
    started = time.monotonic()
    pod_watcher.stop()
    assert time.monotonic() - started < 2
    assert pod_watcher._thread is not None and not pod_watcher._thread.is_alive()


def test_without_a_handler_events_go_to_the_queue(apiserver):
    apiserver.add_node("n1")
    watcher = watch.Watcher(apiserver.api, rest.path("nodes"), settings=FAST).start()
    try:
        first = watcher.events.get(timeout=5)
        assert first.type == watch.RESYNC and [o["metadata"]["name"] for o in first.objects] == ["n1"]
        apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
        apiserver.edit("nodes", "n1", {"metadata": {"labels": {"a": "b"}}})
        second = watcher.events.get(timeout=5)
        assert second.type == watch.MODIFIED and second.object is not None
        assert second.object["metadata"]["labels"] == {"a": "b"}
    finally:
        watcher.stop()


def test_bookmarks_advance_the_resource_version(apiserver, pod_watcher):
    pod_watcher.start()
    assert pod_watcher.wait_synced(5)
    apiserver.add_node("n1")  # moves the global resourceVersion; the pod watch sees only a bookmark
    target = str(apiserver.resource_version)
    apiserver.wait_for(lambda: pod_watcher.resource_version == target, what="bookmark")
    assert pod_watcher.stats.bookmarks >= 1


def test_a_failing_handler_does_not_stop_the_watch(apiserver):
    seen: list[str] = []

    def handler(event: watch.WatchEvent) -> None:
        seen.append(event.type)
        if event.type == watch.ADDED:
            raise RuntimeError("consumer bug")

    watcher = watch.Watcher(apiserver.api, rest.path("pods"), handler, settings=FAST).start()
    try:
        assert watcher.wait_synced(5)
        apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
        apiserver.add_pod("a")
        apiserver.edit("pods", "a", {"metadata": {"labels": {"x": "1"}}}, "default")
        apiserver.wait_for(lambda: seen[-1:] == [watch.MODIFIED], what="event after the failure")
    finally:
        watcher.stop()


def test_the_watch_survives_an_api_server_restart(apiserver, mirror, pod_watcher):
    apiserver.add_pod("before")
    pod_watcher.start()
    assert pod_watcher.wait_synced(5)
    apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch open")
    apiserver.restart()
    apiserver.add_pod("after")
    apiserver.wait_for(lambda: mirror.names() == ["after", "before"], what="event after restart")
    assert pod_watcher.stats.lists == 1  # resumed from its resourceVersion, no re-list
    assert mirror.changes() == [("ADDED", "after")]


def test_a_stream_that_ends_at_once_is_retried_with_backoff_not_in_a_loop(apiserver, pod_watcher):
    apiserver.fail_next("watch", "pods", status=410, count=1000)  # every watch: instant 410
    pod_watcher.start()
    time.sleep(0.5)
    pod_watcher.stop()
    assert pod_watcher.stats.lists < 20  # backoff 0.02 s doubling to 0.1 s: a hot loop would do hundreds
    assert pod_watcher.stats.expired >= 2


def test_one_node_watches_that_node_alone(apiserver, mirror):
    apiserver.add_node("n1")
    apiserver.add_node("n2")
    watcher = watch.one_node(apiserver.api, "n1", mirror)
    assert watcher.name == "node n1"
    watcher.start()
    try:
        assert watcher.wait_synced(5)
        assert mirror.names() == ["n1"]
    finally:
        watcher.stop()
