"""Tests for filter's nominations (Cache.nominate): a pod best fit sent to one node counts there until its
bind arrives, so the next pod's filter, which kube-scheduler may send before that bind, cannot pick the
same memory; the nomination never counts twice and never outlives the pod's bind, deletion or its TTL."""

from __future__ import annotations

import time
from typing import Any

from tests.extender.factory import FakeApi, node, pod
from webhook.core.placement import allocator
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.extender import nominations as nominations_mod
from webhook.extender import scheduling, wire
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import DELETED, MODIFIED, Cache
from webhook.extender.nominations import NOMINATION_TTL_NS
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs

NAMES = ("n1", "n2")


def cluster(*pods: dict[str, Any]) -> tuple[Cache, FakeApi, Binder]:
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 8), node("n2", 16)])
    for p in pods:
        api.add(p)
    cache.pods_resync(list(pods))
    return cache, api, Binder(cache, api, ExtenderSettings(), clock_ns=lambda: 42, sleep=lambda s: None)


def filtered(cache: Cache, body: dict[str, Any], best_fit: bool = True) -> list[str]:
    result = scheduling.filter_nodes(
        cache, wire.ExtenderArgs(body, NAMES), allocator.Policy.BINPACK, best_fit
    )
    return list(result["NodeNames"] or [])


def used(cache: Cache, name: str) -> list[int]:
    view = cache.view(name)
    assert view is not None
    return [g.used for g in view.gpus]


def test_the_next_pods_filter_sees_the_memory_of_a_pod_whose_bind_has_not_come():
    a, b = pod("a", 8), pod("b", 8)
    cache, _, _ = cluster(a, b)
    assert filtered(cache, a) == ["n1"]  # the exact fit
    assert cache.nominated() == {"default/a": "n1"}
    assert filtered(cache, b) == ["n2"]  # n1's GPU is a's until its bind says otherwise
    assert used(cache, "n1") == [8] and used(cache, "n2") == [8]


def test_bind_replaces_the_nomination_and_the_pod_fits_its_own_memory():
    a = pod("a", 8)
    cache, api, binder = cluster(a)
    assert filtered(cache, a) == ["n1"]
    assert binder.bind(BindingArgs("a", "default", "uid-a", "n1")) == ""  # not blocked by itself
    assert cache.nominated() == {}
    assert cache.assumed() == {"default/a": "n1"}
    assert used(cache, "n1") == [8]
    assert api.bound[0][1] == "n1"


def test_bind_to_another_node_drops_the_nomination():
    a = pod("a", 8)
    cache, _, binder = cluster(a)
    assert filtered(cache, a) == ["n1"]
    assert binder.bind(BindingArgs("a", "default", "uid-a", "n2")) == ""
    assert used(cache, "n1") == [0] and used(cache, "n2") == [8]


def test_the_watch_showing_the_pod_bound_or_gone_replaces_the_nomination():
    a = pod("a", 8)
    cache, _, _ = cluster(a)
    filtered(cache, a)
    cache.pod_event(MODIFIED, pod("a", 8, node_name="n1", placed={0: {0: 8}}))
    assert cache.nominated() == {}
    assert used(cache, "n1") == [8]  # counted once
    b = pod("b", 4)
    cache.pod_event(MODIFIED, b)
    assert filtered(cache, b) == ["n2"]
    cache.pod_event(DELETED, b)
    assert cache.nominated() == {} and used(cache, "n2") == [0]


def test_a_pod_recreated_under_the_same_name_drops_the_old_ones_nomination():
    a = pod("a", 8)
    cache, _, _ = cluster(a)
    filtered(cache, a)
    cache.pod_event(MODIFIED, pod("a", 8, uid="uid-a-2"))
    assert cache.nominated() == {} and used(cache, "n1") == [0]


def test_filtering_the_same_pod_again_does_not_count_its_earlier_nomination():
    a = pod("a", 8)
    cache, _, _ = cluster(a)
    assert filtered(cache, a) == ["n1"]
    assert filtered(cache, a) == ["n1"]  # kube-scheduler retries it: still the exact fit
    assert used(cache, "n1") == [8]


def test_nominations_expire():
    a = pod("a", 8)
    cache, _, _ = cluster(a)
    filtered(cache, a)
    cache.expire_assumptions(10**30)  # any bind expires stale nominations too
    assert cache.nominated() == {} and used(cache, "n1") == [0]
    assert NOMINATION_TTL_NS < 60 * 10**9


def test_of_equal_nodes_the_first_is_nominated_and_the_next_pod_sees_it():
    cache, _, _ = cluster()
    cache.nodes_resync([node("n1", 16), node("n2", 16)])
    assert filtered(cache, pod("tie", 12)) == ["n1"]  # kube-scheduler's order decides between equals
    assert cache.nominated() == {"default/tie": "n1"}
    assert filtered(cache, pod("next", 12)) == ["n2"]


def test_no_nomination_without_best_fit_or_while_a_bind_is_in_flight():
    cache, _, _ = cluster()
    cache.nodes_resync([node("n1", 16), node("n2", 16)])
    assert filtered(cache, pod("all", 4), best_fit=False) == ["n1", "n2"]
    assert cache.nominated() == {}
    cache.assume("default/busy", "uid-busy", "n1", ann.Allocation({0: {0: 4}}), 1)
    assert not cache.nominate("default/busy", "uid-busy", "n2", ann.Allocation({0: {0: 4}}), 2)
    assert cache.nominated() == {}


def test_a_filter_that_passes_no_node_still_lets_stale_nominations_expire():
    # Pods filter nominated and then never bound nor asked again (kube-scheduler's own filters reject them
    # now, or a follower, which never binds): without expiry in filter, a later pod that fits only in
    # their memory fails filter everywhere, which nominates nothing, so nothing ever expires them.
    cache, _, _ = cluster()
    stale = time.monotonic_ns() - NOMINATION_TTL_NS - 10**9
    assert cache.nominate("default/gone-1", "uid-gone-1", "n1", ann.Allocation({0: {0: 8}}), stale)
    assert cache.nominate("default/gone-2", "uid-gone-2", "n2", ann.Allocation({0: {0: 16}}), stale)
    assert filtered(cache, pod("b", 8)) == ["n1"]
    assert cache.nominated() == {"default/b": "n1"}
    assert used(cache, "n2") == [0]


def test_a_whole_card_pod_is_not_kept_off_a_gpu_by_a_stale_nomination():
    cache, _, _ = cluster()
    stale = time.monotonic_ns() - NOMINATION_TTL_NS - 10**9
    assert cache.nominate("default/gone", "uid-gone", "n1", ann.Allocation({0: {0: 1}}), stale)
    card = pod("card")
    card["spec"]["containers"][0]["resources"] = {"limits": {resources.NVIDIA_GPU: "1"}}
    assert filtered(cache, card) == ["n1", "n2"]
    assert cache.nominated() == {}


def test_a_pod_the_watch_showed_deleted_is_never_nominated():
    # kube-scheduler's filter of a pod can arrive after the watch showed the pod deleted (its scheduling
    # cycle was under way); counting it then would hold its memory for the whole TTL, with no event left
    # to drop it. The same for a pod a re-list no longer shows.
    a, b = pod("a", 8), pod("b", 8)
    cache, _, _ = cluster(a, b)
    cache.pod_event(DELETED, a)
    assert filtered(cache, a) == ["n1"]
    cache.pods_resync([])
    assert filtered(cache, b) == ["n1"]  # a's memory is not held
    assert cache.nominated() == {} and used(cache, "n1") == [0]
    cache.pod_event(MODIFIED, pod("a", 8, uid="uid-a-2"))  # a pod of the same name, created anew
    assert filtered(cache, pod("a", 8, uid="uid-a-2")) == ["n1"]
    assert cache.nominated() == {"default/a": "n1"}


def test_the_uids_of_deleted_pods_are_kept_only_up_to_a_bound(monkeypatch):
    monkeypatch.setattr(nominations_mod, "GONE_REMEMBERED", 2)
    cache, _, _ = cluster()
    for name in ("x", "y", "z"):
        cache.pod_event(DELETED, pod(name, 8))
    assert filtered(cache, pod("x", 8)) == ["n1"]  # the oldest is forgotten: nominated as unseen pods are
    assert filtered(cache, pod("z", 8)) == ["n2"]  # x's nomination holds n1; z is remembered: not nominated
    assert cache.nominated() == {"default/x": "n1"}


def test_a_bind_arriving_after_later_pods_filters_keeps_the_gpu_its_filter_chose():
    # kube-scheduler filters a, then b, and a's bind comes after b's filter: fitting a anew would see b
    # counted on GPU 1 and find that tighter than GPU 0, the GPU online best fit gave a.
    a, b = pod("a", 8), pod("b", 7)
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 12, 16)])
    for p in (a, b):
        api.add(p)
    cache.pods_resync([a, b])
    binder = Binder(cache, api, ExtenderSettings(), clock_ns=lambda: 42, sleep=lambda s: None)
    for p in (a, b):
        result = scheduling.filter_nodes(cache, wire.ExtenderArgs(p, ("n1",)), allocator.Policy.BINPACK, True)
        assert result["NodeNames"] == ["n1"]
    assert used(cache, "n1") == [8, 7]
    assert binder.bind(BindingArgs("a", "default", "uid-a", "n1")) == ""
    assert binder.bind(BindingArgs("b", "default", "uid-b", "n1")) == ""
    assert used(cache, "n1") == [8, 7]
    placed = {key: ann.decode(notes) for key, _, notes in api.bound}
    first = placed["default/a"]
    assert first is not None and first.allocation.gpus() == (0,) and first.device_memory == 12


def test_a_bind_fits_anew_when_its_filters_gpu_no_longer_has_the_room():
    a = pod("a", 8)
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 12, 16)])
    api.add(a)
    cache.pods_resync([a])
    binder = Binder(cache, api, ExtenderSettings(), clock_ns=lambda: 42, sleep=lambda s: None)
    result = scheduling.filter_nodes(cache, wire.ExtenderArgs(a, ("n1",)), allocator.Policy.BINPACK, True)
    assert result["NodeNames"] == ["n1"] and used(cache, "n1") == [8, 0]
    # A pod kube-scheduler placed elsewhere shows up bound on GPU 0 meanwhile (e.g. another scheduler).
    other = pod("o", 6, node_name="n1", placed={0: {0: 6}}, phase="Running")
    cache.pod_event(MODIFIED, other)
    assert binder.bind(BindingArgs("a", "default", "uid-a", "n1")) == ""
    assert used(cache, "n1") == [6, 8]  # GPU 0 has 6 left, not 8: a fits anew on GPU 1
