"""The whole extender against the API stand-in: official client, watches, binds over real HTTP, restarts."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.extender.factory import node, pod
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.extender import service
from webhook.extender.service import Extender
from webhook.extender.settings import ExtenderSettings, LeaderSettings

PREFIX = "/gpushare-scheduler"


def start(apiserver: ApiServer, **leader: object) -> Extender:
    settings = ExtenderSettings(
        host="127.0.0.1",
        port=0,
        bind_backoff_s=0.01,
        leader=LeaderSettings(**leader) if leader else LeaderSettings(),  # type: ignore[arg-type]
    )
    ext = Extender(settings, apiserver.new_client()).start()
    assert ext.wait_synced(10)
    return ext


@pytest.fixture
def extender(cluster: ApiServer) -> Iterator[Extender]:
    ext = start(cluster)
    yield ext
    ext.stop()


def bind(client: httpx.Client, name: str, node_name: str, uid: str | None = None) -> str:
    body = {"PodName": name, "PodNamespace": "default", "PodUID": uid or f"uid-{name}", "Node": node_name}
    r = client.post(f"{PREFIX}/bind", json=body)
    assert r.status_code == 200
    error: str = r.json()["Error"]
    return error


def inspect(ext: Extender) -> list[dict[str, Any]]:
    with httpx.Client(base_url=ext.url, timeout=5) as client:
        nodes: list[dict[str, Any]] = client.get(f"{PREFIX}/inspect").json()["nodes"]
    # "assumed" differs by design between a replica that just bound and one that read it back.
    for n in nodes:
        for d in n["devs"]:
            for p in d["pods"]:
                p.pop("assumed")
    return nodes


def used(ext: Extender, name: str) -> list[int]:
    view = ext.cache.view(name)
    assert view is not None
    return [g.used for g in view.gpus]


def test_filter_then_bind_places_the_pod_through_the_api(cluster, extender):
    cluster.put(pod("a", 5))
    cluster.wait_for(lambda: extender.cache.pod("default/a"))
    with httpx.Client(base_url=extender.url, timeout=5) as client:
        r = client.post(
            f"{PREFIX}/filter", json={"Pod": pod("a", 5), "Nodes": None, "NodeNames": ["n1", "n2"]}
        )
        assert r.json()["NodeNames"] == ["n1"]  # best fit: n1's GPU 1 keeps 3 GiB, n2's more
        assert bind(client, "a", "n1") == ""
    stored = cluster.get("pods", "a", "default")
    assert stored is not None
    assert stored["spec"]["nodeName"] == "n1"
    notes = stored["metadata"]["annotations"]
    assert notes[resources.ANN_MEM_IDX] == "1"  # best fit: 8 GiB GPU has 8 free, 16 GiB GPU has 10
    assert notes[resources.ANN_MEM_ASSIGNED] == "false"
    assert json.loads(notes[resources.ANN_ALLOCATION]) == {"0": {"1": 5}}
    cluster.wait_for(lambda: extender.cache.assumed() == {}, what="watch shows the bound pod")
    assert used(extender, "n1") == [6, 5]


def test_restart_rebuilds_identical_accounting(cluster, extender):
    for i in range(6):
        cluster.put(pod(f"p{i}", 2 + i % 3))
    with httpx.Client(base_url=extender.url, timeout=5) as client:
        for i in range(6):
            assert bind(client, f"p{i}", "n1" if i % 2 else "n2") == ""
    cluster.wait_for(lambda: extender.cache.assumed() == {}, what="watch caught up")
    before = inspect(extender)
    extender.stop()
    again = start(cluster)
    try:
        assert inspect(again) == before
    finally:
        again.stop()


def test_no_pod_list_per_request(cluster, extender):
    cluster.reset_counts()
    with httpx.Client(base_url=extender.url, timeout=5) as client:
        for _ in range(20):
            client.post(f"{PREFIX}/filter", json={"Pod": pod("x", 1), "NodeNames": ["n1", "n2"]})
    assert cluster.requests.get(("list", "pods"), 0) == 0


def test_watch_dropped_and_resumed_sees_later_changes(cluster, extender):
    cluster.drop_watches()
    cluster.put(pod("late", 4, node_name="n2", placed={0: {0: 4}}, phase="Running"))
    cluster.wait_for(lambda: used(extender, "n2") == [4], what="late pod counted")


def test_expired_watch_relists_and_forgets_pods_deleted_in_the_gap(cluster, extender):
    pods_watch = extender.watchers[1]
    lists = pods_watch.stats.lists
    cluster.wait_for(lambda: cluster.open_watches == 2, what="both watches open")
    cluster.latency = 0.2  # keep the watches away while history changes and is compacted
    cluster.drop_watches()
    cluster.remove("pods", "running", "default")
    cluster.put(pod("after", 2, node_name="n2", placed={0: {0: 2}}, phase="Running"))
    cluster.compact()
    cluster.latency = 0.0
    cluster.wait_for(
        lambda: used(extender, "n2") == [2] and used(extender, "n1") == [0, 0], what="re-listed state"
    )
    assert pods_watch.stats.expired >= 1
    assert pods_watch.stats.lists > lists


def test_a_relist_releases_a_pod_bound_here_and_deleted_while_the_watch_was_down(cluster, extender):
    # Bound by this extender, the watch down before it showed the pod bound, the pod deleted meanwhile and
    # the history compacted: no DELETED event will come, and the re-list no longer holds the pod.
    cluster.put(pod("short", 6))
    cluster.wait_for(lambda: extender.cache.pod("default/short"), what="pod seen")
    cluster.wait_for(lambda: cluster.open_watches == 2, what="both watches open")
    before = used(extender, "n1")
    cluster.delay("watch", "pods", 1.0)  # the pods watch stays away meanwhile
    cluster.drop_watches()
    with httpx.Client(base_url=extender.url, timeout=5) as client:
        assert bind(client, "short", "n1") == ""
    assert extender.cache.assumed() == {"default/short": "n1"}
    cluster.remove("pods", "short", "default")
    cluster.compact()
    cluster.delay("watch", "pods", 0)
    cluster.wait_for(
        lambda: extender.cache.assumed() == {} and used(extender, "n1") == before, what="reservation released"
    )
    assert extender.watchers[1].stats.expired >= 1


def test_node_gpu_count_change_is_seen_without_restart(cluster, extender):
    cluster.put(node("n2", 16, 16, 16))
    cluster.wait_for(lambda: len(used(extender, "n2")) == 3, what="new GPUs seen")
    with httpx.Client(base_url=extender.url, timeout=5) as client:
        body = client.post(
            f"{PREFIX}/filter", json={"Pod": pod("b", 24, gpu_count=3), "NodeNames": ["n1", "n2"]}
        )
    assert body.json()["NodeNames"] == ["n2"]


def test_pod_deleted_mid_bind_fails_cleanly(cluster, extender):
    cluster.put(pod("doomed", 4))
    cluster.wait_for(lambda: extender.cache.pod("default/doomed"))
    cluster.mark_deleting("doomed")
    with httpx.Client(base_url=extender.url, timeout=5) as client:
        error = bind(client, "doomed", "n2")
    assert "deleted" in error
    assert extender.cache.assumed() == {}
    assert used(extender, "n2") == [0]


@pytest.mark.parametrize("status", [409, 500], ids=["conflict", "server-error"])
def test_binding_api_errors_are_retried(cluster, extender, status):
    cluster.put(pod("a", 4))
    cluster.fail_next("create", "pods/binding", status=status, count=1)
    with httpx.Client(base_url=extender.url, timeout=5) as client:
        assert bind(client, "a", "n2") == ""
    assert cluster.get("pods", "a", "default")["spec"]["nodeName"] == "n2"


def test_persistent_binding_failure_leaves_no_memory_counted(cluster, extender):
    cluster.put(pod("a", 4))
    cluster.fail_next("create", "pods/binding", status=500, count=10)
    with httpx.Client(base_url=extender.url, timeout=5) as client:
        assert bind(client, "a", "n2") != ""
    assert extender.cache.assumed() == {}
    assert used(extender, "n2") == [0]


def test_concurrent_bind_storm_over_http_never_over_commits(cluster, extender):
    names = [f"s{i}" for i in range(40)]
    for n in names:
        cluster.put(pod(n, 3))
    cluster.wait_for(lambda: all(extender.cache.pod(f"default/{n}") for n in names))
    results: dict[str, str] = {}

    def worker(chunk: list[str]) -> None:
        with httpx.Client(base_url=extender.url, timeout=10) as client:
            for n in chunk:
                results[n] = bind(client, n, "n1" if int(n[1:]) % 2 else "n2")

    threads = [threading.Thread(target=worker, args=(names[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    placed: dict[str, dict[int, int]] = {"n1": {}, "n2": {}}
    for p in cluster.objects("pods"):
        node_name = p["spec"].get("nodeName")
        if node_name:
            alloc = json.loads(p["metadata"]["annotations"][resources.ANN_ALLOCATION])
            for gpus in alloc.values():
                for g, units in gpus.items():
                    placed[node_name][int(g)] = placed[node_name].get(int(g), 0) + units
    assert all(v <= 16 for v in placed["n2"].values())
    assert placed["n1"].get(0, 0) <= 16 and placed["n1"].get(1, 0) <= 8
    assert sum(1 for e in results.values() if e == "") == 3 + 2 + 5  # n1: (16-6)//3 + 8//3, n2: 16//3


def test_only_the_leader_binds(cluster):
    first = start(
        cluster, enabled=True, identity="a", lease_name="ext", lease_namespace="default", retry_period_s=0.1
    )
    try:
        cluster.wait_for(first.elector.is_leader, what="first replica leads")  # type: ignore[union-attr]
        second = start(
            cluster,
            enabled=True,
            identity="b",
            lease_name="ext",
            lease_namespace="default",
            retry_period_s=0.1,
        )
        try:
            cluster.put(pod("a", 4))
            cluster.wait_for(lambda: second.elector.holder == "a")  # type: ignore[union-attr]
            with httpx.Client(base_url=second.url, timeout=5) as client:
                # No --advertise-url on a: b cannot forward (test_service_forwarding.py covers that).
                error = bind(client, "a", "n2")
                assert "not the leader (leader: a)" in error and "URL is unknown" in error
            with httpx.Client(base_url=first.url, timeout=5) as client:
                assert bind(client, "a", "n2") == ""
            first.stop_feeds()  # releases the lease
            cluster.wait_for(second.elector.is_leader, what="second replica takes over")  # type: ignore[union-attr]
        finally:
            second.stop()
    finally:
        first.stop()


def test_gc_is_frozen_once_the_first_lists_are_in_and_not_before(cluster):
    ext = service.Extender(ExtenderSettings(host="127.0.0.1", port=0), cluster.new_client())
    stop = threading.Event()
    freezer = threading.Thread(target=service.freeze_when_synced, args=(ext, stop))
    try:
        freezer.start()
        freezer.join(0.6)
        assert freezer.is_alive()  # feeds not started: nothing synced, nothing frozen yet
        ext.start_feeds()
        freezer.join(10)
        assert not freezer.is_alive()
        assert gc.get_freeze_count() > 0
    finally:
        stop.set()
        freezer.join(5)
        ext.stop_feeds()
        ext.server.stop()
        gc.unfreeze()


def test_freezer_gives_up_when_stopped_before_the_sync(cluster):
    ext = service.Extender(ExtenderSettings(host="127.0.0.1", port=0), cluster.new_client())
    stop = threading.Event()
    stop.set()
    try:
        service.freeze_when_synced(ext, stop)  # returns at once
        assert gc.get_freeze_count() == 0
    finally:
        ext.server.stop()
