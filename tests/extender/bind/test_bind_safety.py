"""Ways a GPU could be over-committed that an audit found, each now refused or counted: a bind before
the first lists are in, init containers asking more than the pod holds, a late event of an older pod of
the same name, filter and bind judging by different placement orders, a step of the wall clock. Also: a
client that leaves mid-body (no error of ours), messages in the configured unit, and nodes where
preemption cannot help."""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import httpx
import pytest

from tests.extender.factory import FakeApi, node, pod
from webhook.core.placement import allocator
from webhook.extender import app as app_mod
from webhook.extender import scheduling, wire
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import ADDED, MODIFIED, NOT_SYNCED, Cache
from webhook.extender.settings import ExtenderSettings
from webhook.serving.server import AppServer, ServeOptions

PLACEMENT_LABEL = "ack.node.gpu.placement"


def binder_for(cache: Cache, api: FakeApi, **settings: Any) -> Binder:
    return Binder(cache, api, ExtenderSettings(**settings), clock_ns=lambda: 42, sleep=lambda s: None)


def bind(binder: Binder, p: dict[str, Any], node_name: str = "n1") -> str:
    meta = p["metadata"]
    return binder.bind(wire.BindingArgs(meta["name"], meta["namespace"], meta["uid"], node_name))


def used(cache: Cache, name: str = "n1") -> list[int]:
    view = cache.view(name)
    assert view is not None
    return [g.used for g in view.gpus]


def test_no_bind_before_the_pods_are_listed_then_the_running_pods_count():
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 16)])  # the node list is in, the pod list not yet
    running = pod("running", 12, node_name="n1", placed={0: {0: 12}}, phase="Running")
    new = pod("new", 12)
    api.add(running)
    api.add(new)
    binder = binder_for(cache, api)
    assert bind(binder, new) == NOT_SYNCED
    assert api.bound == [] and cache.assumed() == {}
    cache.pods_resync([running, new])
    assert bind(binder, new) == "node n1: largest free GPU has 4 GiB, pod needs 12"
    assert used(cache) == [12]


def test_no_filter_before_the_pods_are_listed_kube_scheduler_retries_the_pod():
    # Before the pod list n1 looks empty (the running pod uncounted) and would pass: no node passes and
    # none fails (no fit error to preempt on), the answer is an Error kube-scheduler retries after backoff.
    cache = Cache()
    cache.nodes_resync([node("n1", 16)])
    running = pod("running", 12, node_name="n1", placed={0: {0: 12}}, phase="Running")
    new = pod("new", 12)
    args = wire.extender_args({"Pod": new, "NodeNames": ["n1"]})
    policy = ExtenderSettings().default_policy
    assert scheduling.filter_nodes(cache, args, policy) == wire.filter_error(NOT_SYNCED)
    assert cache.nominated() == {}
    cache.pods_resync([running, new])
    result = scheduling.filter_nodes(cache, args, policy)
    assert result["Error"] == "" and result["NodeNames"] == []
    assert (result["FailedNodes"] or {})["n1"] == "largest free GPU has 4 GiB, pod needs 12"


@pytest.mark.parametrize(("app", "init"), [((2,), 14), ((0,), 4)], ids=["more-than-the-app", "app-asks-none"])
def test_init_containers_asking_more_than_the_app_containers_are_refused_everywhere(app, init):
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 16), node("n2", 32)])
    p = pod("warm", *app)
    p["spec"]["initContainers"] = [
        {"name": "init", "resources": {"limits": {"aliyun.com/gpu-mem": str(init)}}}
    ]
    api.add(p)
    cache.pods_resync([p])
    args = wire.ExtenderArgs(pod=p, node_names=("n1", "n2"))
    result = scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK)
    assert scheduling.prioritize(cache, args, allocator.Policy.BINPACK) == {"n1": 0, "n2": 0}
    error = bind(binder_for(cache, api), p)
    assert f"an init container asks {init} GiB of aliyun.com/gpu-mem" in error
    assert api.bound == [] and used(cache) == [0]
    unresolvable = result["FailedAndUnresolvableNodes"] or {}
    for reason in unresolvable.values():  # no node can take it: preemption cannot help
        assert f"an init container asks {init} GiB" in reason
    assert set(unresolvable) == {"n1", "n2"} and not result["NodeNames"]


def created(p: dict[str, Any], at: str) -> dict[str, Any]:
    p["metadata"]["creationTimestamp"] = at
    return p


def test_a_late_event_of_an_older_namesake_the_cache_never_saw_keeps_the_newer_pods_memory():
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 16)])
    cache.pods_resync([])
    older = created(pod("p", 12, uid="uid-A"), "2026-11-25T01:00:00Z")
    newer = created(pod("p", 12, uid="uid-B"), "2026-11-25T01:00:07Z")
    api.add(newer)  # the API holds only the newer pod; the watch has shown neither yet
    binder = binder_for(cache, api)
    assert bind(binder, newer) == ""
    assert used(cache) == [12]
    cache.pod_event(ADDED, older)  # the watch catches up, oldest first
    assert used(cache) == [12] and cache.assumed() == {"default/p": "n1"}
    other = pod("q", 12)
    api.add(other)
    cache.pod_event(ADDED, other)
    assert bind(binder, other) == "node n1: largest free GPU has 4 GiB, pod needs 12"
    # A pod of that name created later does show the assumed one gone.
    cache.pod_event(MODIFIED, created(pod("p", 2, uid="uid-C"), "2026-11-25T01:05:00Z"))
    assert cache.assumed() == {} and used(cache) == [0]


def test_filter_judges_by_the_nodes_placement_label_as_prioritize_and_bind_do():
    labelled = node("n1", 16, 6)
    labelled["metadata"]["labels"] = {PLACEMENT_LABEL: "spread"}
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([labelled])
    filler = pod("filler", 10, node_name="n1", placed={0: {0: 10}}, phase="Running")
    other = pod("other", 2, node_name="n1", placed={0: {1: 2}}, phase="Running")
    # 6 and 4 GiB free, one share each: binpack puts 4 on GPU 1, 3+3 on GPU 0; spread puts 4 on the
    # freer GPU 0, 3 on GPU 1, and the last 3 fits nowhere.
    multi = pod("multi", 4, 3, 3)
    for p in (filler, other, multi):
        api.add(p)
    cache.pods_resync([filler, other, multi])
    args = wire.ExtenderArgs(pod=multi, node_names=("n1",))
    result = scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK)
    failed = result["FailedNodes"] or {}
    assert not result["NodeNames"] and "its containers (4, 3, 3) on separate GPUs" in failed["n1"]
    assert scheduling.prioritize(cache, args, allocator.Policy.BINPACK) == {"n1": 0}
    assert bind(binder_for(cache, api), multi) == f"node n1: {failed['n1']}"


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
def test_a_client_that_leaves_mid_body_is_no_error_and_logs_no_traceback(verb, caplog):
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 16)])
    cache.pods_resync([])
    settings = ExtenderSettings()
    ext = app_mod.ExtenderApp(cache, Binder(cache, api, settings, sleep=lambda s: None), settings)
    caplog.set_level(logging.INFO)
    with AppServer(app_mod.build_app(ext), ServeOptions(host="127.0.0.1", port=0), ext.readiness) as srv:
        host, port = srv.url.split("//")[1].split(":")
        with socket.create_connection((host, int(port))) as sock:
            head = f"POST /gpushare-scheduler/{verb} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{"
            sock.sendall(head.encode())
            time.sleep(0.2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not _sample(srv, verb):
            time.sleep(0.05)
        assert _sample(srv, verb), "the request was not counted as disconnected"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def _sample(srv: AppServer, verb: str) -> bool:
    text = httpx.get(srv.url + "/metrics").text
    return f'gpushare_extender_requests_total{{endpoint="{verb}",outcome="disconnected"}} 1.0' in text


def test_bind_names_the_configured_unit_as_filter_does():
    cache, api = Cache(unit="128MiB"), FakeApi()
    cache.nodes_resync([node("n1", 16)])
    p = pod("half", 2)
    p["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "1.5"
    api.add(p)
    cache.pods_resync([p])
    args = wire.ExtenderArgs(pod=p, node_names=("n1",))
    reason = (
        scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK)["FailedAndUnresolvableNodes"] or {}
    )["n1"]
    error = bind(binder_for(cache, api), p)
    assert "blocks of 128 MiB" in reason and error == f"pod default/half: {reason}"


def test_a_pod_too_large_for_the_node_is_told_in_the_nodes_unit():
    cache, api = Cache(unit="128MiB"), FakeApi()
    cache.nodes_resync([node("n1", 16)])
    p = pod("big", 200)
    api.add(p)
    cache.pods_resync([p])
    error = bind(binder_for(cache, api), p)
    assert error == "node n1: largest free GPU has 128 blocks of 128 MiB, pod needs 200"


@pytest.mark.parametrize(
    ("pod_args", "kind"),
    [
        ((pod("big", 20),), "unresolvable"),  # no GPU of 20 GiB on the node
        ((pod("wide", 8, gpu_count=4),), "unresolvable"),  # 4 GPUs asked, the node has 2
        ((pod("fits-empty", 12),), "failed"),  # fits once the running pod is gone: preemption helps
        ((pod("pair", 12, 12),), "failed"),  # one container per GPU once emptied
    ],
    ids=["larger-than-any-gpu", "more-gpus-than-the-node", "room-after-preemption", "split-after-preemption"],
)
def test_filter_tells_apart_nodes_where_preemption_could_make_room(pod_args, kind):
    cache = Cache()
    cache.nodes_resync([node("n1", 16, 16)])
    running = pod("running", 10, 10, node_name="n1", placed={0: {0: 10}, 1: {1: 10}}, phase="Running")
    cache.pods_resync([running])
    (p,) = pod_args
    result = scheduling.filter_nodes(
        cache, wire.ExtenderArgs(pod=p, node_names=("n1",)), allocator.Policy.BINPACK
    )
    failed, unresolvable = result["FailedNodes"] or {}, result["FailedAndUnresolvableNodes"] or {}
    assert list(failed if kind == "failed" else unresolvable) == ["n1"], (failed, unresolvable)
    if kind == "unresolvable":
        assert unresolvable["n1"].startswith("even with no other pod on it: ")


def test_a_step_of_the_wall_clock_does_not_age_what_is_counted():
    # NTP moving the wall clock an hour ahead between two binds: the first pod, bound but not yet shown by
    # the watch, must still hold its memory (else a third pod gets it too). Ages are read from the
    # monotonic clock; the wall clock only writes the assume-time annotation.
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 16)])
    first, second, third = pod("first", 12), pod("second", 4), pod("third", 12)
    for p in (first, second, third):
        api.add(p)
    cache.pods_resync([first, second, third])
    walls = iter([10**18, 10**18 + 3600 * 10**9, 10**18 + 3601 * 10**9])
    binder = Binder(cache, api, ExtenderSettings(), clock_ns=lambda: next(walls), sleep=lambda s: None)
    assert bind(binder, first) == ""
    assert api.bound[0][2]["ALIYUN_COM_GPU_MEM_ASSUME_TIME"] == str(10**18)
    assert bind(binder, second) == ""
    assert bind(binder, third) == "node n1: largest free GPU has 0 GiB, pod needs 12"
    assert used(cache) == [16]


def test_a_successor_already_bound_is_counted_while_the_watch_shows_its_predecessor():
    # kube-scheduler retries the bind of p's successor, which a previous leader bound to n2: the GET shows
    # it bound, the bind says done, and q cannot get the same memory before the watch catches up.
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 16), node("n2", 16)])
    old = created(pod("p", 12, uid="uid-a", node_name="n1", placed={0: {0: 12}}, phase="Running"), "10:00:00")
    cache.pods_resync([old])
    new = created(pod("p", 12, uid="uid-b", node_name="n2", placed={0: {0: 12}}), "10:05:00")
    q = pod("q", 12)
    api.add(new)
    api.add(q)
    cache.pod_event(ADDED, q)
    binder = binder_for(cache, api)
    assert bind(binder, new, "n2") == ""
    assert bind(binder, q, "n2") == "node n2: largest free GPU has 4 GiB, pod needs 12"
    assert api.bound == []
