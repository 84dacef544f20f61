"""Duplicate binds of one pod (a scheduler retry, two replicas, a slow API server) against the stand-in:
the second never moves or drops the first's reservation, so no GPU is over-committed (issue 11)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.extender import invariant
from tests.extender.factory import node, pod
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.extender.service import Extender
from webhook.extender.settings import ExtenderSettings

PREFIX = "/gpushare-scheduler"


@pytest.fixture
def extender(apiserver: ApiServer) -> Iterator[Extender]:
    apiserver.put(node("g1", 16, 16))
    apiserver.put(node("g2", 16))
    ext = Extender(ExtenderSettings(host="127.0.0.1", port=0, bind_backoff_s=0.01), apiserver.new_client())
    ext.start()
    assert ext.wait_synced(10)
    yield ext
    ext.stop()


def bind(ext: Extender, name: str, node_name: str, uid: str = "") -> str:
    body = {"PodName": name, "PodNamespace": "default", "PodUID": uid or f"uid-{name}", "Node": node_name}
    with httpx.Client(base_url=ext.url, timeout=10) as client:
        error: str = client.post(f"{PREFIX}/bind", json=body).json()["Error"]
    return error


def in_background(ext: Extender, name: str, node_name: str, results: dict[str, str]) -> threading.Thread:
    label = f"{name}->{node_name}" + ("'" if f"{name}->{node_name}" in results else "")
    results[label] = "pending"

    def call() -> None:
        results[label] = bind(ext, name, node_name)

    thread = threading.Thread(target=call)
    thread.start()
    return thread


CAPACITY = {("g1", 0): 16, ("g1", 1): 16, ("g2", 0): 16}


@pytest.mark.parametrize("second_node", ["g1", "g2"], ids=["same-node", "other-node"])
def test_duplicate_bind_on_a_slow_api_server_never_over_commits(apiserver, extender, second_node):
    """Before the fix the duplicate moved the first bind's reservation, c took the memory a was getting,
    and the duplicate's 409 then dropped a's reservation: 20 GiB on GPU 0 of g1 (16 GiB)."""
    apiserver.put(pod("a", 10))
    apiserver.put(pod("c", 10))
    apiserver.wait_for(lambda: extender.cache.pod("default/a") and extender.cache.pod("default/c"))
    apiserver.latency = 0.3  # every API call takes 0.3 s; the watch stream still flows
    results: dict[str, str] = {}
    first = in_background(extender, "a", "g1", results)
    time.sleep(0.05)
    second = in_background(extender, "a", second_node, results)  # the duplicate
    time.sleep(0.05)
    third = in_background(extender, "c", "g1", results)
    for thread in (first, second, third):
        thread.join(10)
    apiserver.latency = 0.0
    assert invariant.violations(apiserver.objects("pods"), CAPACITY) == []
    duplicate = "" if second_node == "g1" else "pod default/a is already bound to node g1, not g2"
    assert results == {"a->g1": "", f"a->{second_node}" + "'" * (second_node == "g1"): duplicate, "c->g1": ""}
    placed = {
        p["metadata"]["name"]: p["metadata"]["annotations"][resources.ANN_MEM_IDX]
        for p in apiserver.objects("pods")
    }
    assert placed == {"a": "0", "c": "1"}
    apiserver.wait_for(lambda: extender.cache.assumed() == {}, what="the watch shows both pods bound")
    view = extender.cache.view("g1")
    assert view is not None and [g.used for g in view.gpus] == [10, 10]
