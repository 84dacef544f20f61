"""Tests for webhook.extender.cache: ledgers kept right through watch events, resyncs and assumptions."""

from __future__ import annotations

import time
from typing import Any

from tests.extender.factory import node, pod
from webhook.core.placement import allocator
from webhook.core.placement import annotations as ann
from webhook.core.specs import podread
from webhook.extender import scheduling, wire
from webhook.extender.assumptions import ASSUME_TTL_NS
from webhook.extender.cache import ADDED, DELETED, MODIFIED, Cache
from webhook.kube import watch


def used(cache: Cache, name: str) -> list[int]:
    view = cache.view(name)
    assert view is not None
    return [g.used for g in view.gpus]


def fed(*objs) -> Cache:
    cache = Cache()
    cache.nodes_resync([o for o in objs if "containers" not in o.get("spec", {})])
    cache.pods_resync([o for o in objs if "containers" in o.get("spec", {})])
    return cache


def test_pods_are_counted_on_their_node_and_gpu():
    cache = fed(node("n1", 16, 16), pod("a", 4, node_name="n1", placed={0: {1: 4}}), pod("b", 2))
    assert used(cache, "n1") == [0, 4]
    assert cache.stats() == {"nodes": 1, "pods": 2, "assumed": 0}


def test_pods_that_ask_for_no_gpu_memory_are_not_kept():
    cache = fed(node("n1", 16), pod("cpu"))
    assert cache.pod("default/cpu") is None


def test_finished_and_deleted_pods_stop_counting():
    cache = fed(node("n1", 16), pod("a", 4, node_name="n1", placed={0: {0: 4}}))
    cache.pod_event(MODIFIED, pod("a", 4, node_name="n1", placed={0: {0: 4}}, phase="Succeeded"))
    assert used(cache, "n1") == [0]
    cache.pod_event(MODIFIED, pod("a", 4, node_name="n1", placed={0: {0: 4}}, phase="Running"))
    cache.pod_event(DELETED, pod("a", 4, node_name="n1", placed={0: {0: 4}}))
    assert used(cache, "n1") == [0]


def test_a_bound_pod_being_deleted_counts_until_it_finishes_or_is_removed():
    placed = {0: {0: 4}}
    cache = fed(node("n1", 16), pod("a", 4, node_name="n1", placed=placed, phase="Running"))
    going = pod("a", 4, node_name="n1", placed=placed, phase="Running")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache.pod_event(MODIFIED, going)  # its containers still run, on that memory
    assert used(cache, "n1") == [4]
    record = cache.pod("default/a")
    assert record is not None and record.deleting and not record.ended
    cache.pod_event(DELETED, going)
    assert used(cache, "n1") == [0]
    cache.pod_event(ADDED, going)
    done = pod("a", 4, node_name="n1", placed=placed, phase="Failed")
    done["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache.pod_event(MODIFIED, done)
    assert used(cache, "n1") == [0]


def test_an_unbound_pod_being_deleted_drops_its_assumption():
    # kube-apiserver refuses the Binding of a pod being deleted: the reservation can never land.
    cache = fed(node("n1", 8), pod("a", 4))
    cache.assume("default/a", "uid-a", "n1", ann.Allocation({0: {0: 4}}), now_ns=1)
    going = pod("a", 4)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache.pod_event(MODIFIED, going)
    assert cache.assumed() == {}
    assert used(cache, "n1") == [0]


def test_pod_seen_before_its_node_counts_once_the_node_arrives():
    cache = Cache()
    cache.pod_event(ADDED, pod("a", 4, node_name="n1", placed={0: {0: 4}}))
    assert cache.view("n1") is None
    cache.node_event(ADDED, node("n1", 8))
    assert used(cache, "n1") == [4]


def test_node_gpu_count_change_is_seen_at_once():
    cache = fed(node("n1", 8), pod("a", 4, node_name="n1", placed={0: {0: 4}}))
    cache.node_event(MODIFIED, node("n1", 8, 8, 8))
    assert used(cache, "n1") == [4, 0, 0]
    cache.node_event(MODIFIED, node("n1", 8, 8, 8, unhealthy=(1,)))
    view = cache.view("n1")
    assert view is not None
    assert [g.free for g in view.gpus] == [4, 0, 8]


def test_resync_removes_what_disappeared_while_the_watch_was_down():
    cache = fed(node("n1", 8), node("n2", 8), pod("a", 4, node_name="n1", placed={0: {0: 4}}))
    cache.nodes_resync([node("n1", 8)])
    cache.pods_resync([])
    assert used(cache, "n1") == [0]
    assert cache.node_names() == ["n1"]


def test_assumed_pod_counts_until_the_watch_shows_it_bound():
    cache = fed(node("n1", 8), pod("a", 4))
    cache.assume("default/a", "uid-a", "n1", ann.Allocation({0: {0: 4}}), now_ns=1)
    assert used(cache, "n1") == [4]
    # A late event from before the bind (no node yet) must not drop the assumption.
    cache.pod_event(MODIFIED, pod("a", 4))
    assert used(cache, "n1") == [4]
    cache.pod_event(MODIFIED, pod("a", 4, node_name="n1", placed={0: {0: 4}}))
    assert cache.assumed() == {}
    assert used(cache, "n1") == [4]


def test_forgetting_a_failed_bind_releases_only_the_memory_that_bind_reserved():
    cache = fed(node("n1", 8), pod("a", 4))
    first = cache.assume("default/a", "uid-a", "n1", ann.Allocation({0: {0: 4}}), now_ns=1)
    second = cache.assume("default/a", "uid-a", "n1", ann.Allocation({0: {0: 4}}), now_ns=2)
    cache.forget("default/a", first)  # an older bind's failure never drops a later reservation
    assert used(cache, "n1") == [4]
    cache.forget("default/a", second)
    assert used(cache, "n1") == [0]


def test_assumption_is_dropped_when_the_pod_is_deleted_or_expires():
    cache = fed(node("n1", 8), pod("a", 4), pod("b", 2))
    cache.assume("default/a", "uid-a", "n1", ann.Allocation({0: {0: 4}}), now_ns=1)
    cache.assume("default/b", "uid-b", "n1", ann.Allocation({0: {0: 2}}), now_ns=1)
    cache.pod_event(DELETED, pod("a", 4))
    assert used(cache, "n1") == [2]
    assert cache.expire_assumptions(now_ns=2) == 0
    assert cache.expire_assumptions(now_ns=2 + ASSUME_TTL_NS) == 1
    assert used(cache, "n1") == [0]


def test_only_expired_assumptions_are_dropped_and_a_renewed_one_is_kept():
    cache = fed(node("n1", 16), pod("a", 4), pod("b", 2), pod("c", 1))
    alloc = ann.Allocation({0: {0: 1}})
    cache.assume("default/a", "uid-a", "n1", alloc, now_ns=1)
    cache.assume("default/b", "uid-b", "n1", alloc, now_ns=5)
    cache.assume("default/c", "uid-c", "n1", alloc, now_ns=10)
    cache.assume("default/a", "uid-a", "n1", alloc, now_ns=20)  # assumed again: now the youngest
    assert cache.expire_assumptions(now_ns=6 + ASSUME_TTL_NS) == 1
    assert cache.assumed() == {"default/c": "n1", "default/a": "n1"}
    assert used(cache, "n1") == [2]
    assert cache.expire_assumptions(now_ns=21 + ASSUME_TTL_NS) == 2
    assert used(cache, "n1") == [0]


def test_unreadable_placement_is_reported_on_the_node():
    broken = pod("a", 4, node_name="n1")
    broken["metadata"]["annotations"] = {"scheduler.framework.gpushare.allocation": "{"}
    cache = fed(node("n1", 8), broken)
    view = cache.view("n1")
    assert view is not None
    assert "not JSON" in view.problems[0]


def test_node_deleted_keeps_no_gpus():
    cache = fed(node("n1", 8))
    cache.node_event(DELETED, node("n1", 8))
    assert cache.view("n1") is None
    assert cache.ledger("n1") is None


def test_a_status_update_reuses_the_demand_and_a_label_change_or_new_uid_rereads_it(monkeypatch):
    cache = fed(node("n1", 16))
    reads = []
    real = podread.of_pod

    def counting(p, names=None, unit="GiB"):
        reads.append(p)
        return real(p, names, unit)

    monkeypatch.setattr(podread, "of_pod", counting)
    cache.pod_event(ADDED, pod("a", 8))
    running = pod("a", 8, phase="Running")
    cache.pod_event(MODIFIED, running)
    assert len(reads) == 1
    cache.pod_event(MODIFIED, pod("a", 8, gpu_count=2))
    record = cache.pod("default/a")
    assert record is not None and record.demand is not None
    assert (len(reads), record.demand.gpu_count) == (2, 2)
    cache.pod_event(MODIFIED, pod("a", 6, uid="another", gpu_count=2))
    record = cache.pod("default/a")
    assert record is not None and record.demand is not None
    assert (len(reads), record.demand.containers) == (3, (6,))


def test_pod_bound_elsewhere_is_adopted_until_the_watch_shows_it():
    cache = fed(node("n1", 8), pod("a", 4))
    seen_bound = pod("a", 4, node_name="n1", placed={0: {0: 4}})
    cache.adopt(seen_bound, now_ns=1)
    assert used(cache, "n1") == [4]
    cache.pod_event(MODIFIED, seen_bound)
    assert cache.assumed() == {}
    assert used(cache, "n1") == [4]


def _created(p: dict[str, Any], at: str) -> dict[str, Any]:
    p["metadata"]["creationTimestamp"] = at
    return p


def test_adopting_what_the_watch_already_shows_or_an_unbound_pod_changes_nothing():
    b = _created(pod("b", 2), "2026-11-28T10:00:05Z")
    cache = fed(node("n1", 8), pod("a", 4, node_name="n1", placed={0: {0: 4}}), b)
    cache.adopt(pod("a", 4, node_name="n1", placed={0: {0: 4}}), now_ns=1)
    cache.adopt(pod("b", 2), now_ns=1)
    # A GET that showed an older pod of b's name (the watch has moved on since): not adopted.
    older = _created(pod("b", 2, uid="older", node_name="n1", placed={0: {0: 2}}), "2026-11-28T10:00:04Z")
    cache.adopt(older, now_ns=1)
    assert cache.assumed() == {}
    assert used(cache, "n1") == [4]


def test_a_bound_successor_of_a_pod_the_watch_still_shows_is_adopted():
    # The watch still shows p (UID A) running on n1; the API already holds its successor (UID B), bound
    # to n2 by a previous leader or by a Binding whose reply was lost: counted until the watch shows it.
    old = _created(pod("p", 12, uid="uid-a", node_name="n1", placed={0: {0: 12}}), "2026-11-28T10:00:00Z")
    cache = fed(node("n1", 16), node("n2", 16), old)
    new = _created(pod("p", 12, uid="uid-b", node_name="n2", placed={0: {0: 12}}), "2026-11-28T10:05:00Z")
    cache.adopt(new, now_ns=1)
    assert cache.assumed() == {"default/p": "n2"}
    assert (used(cache, "n1"), used(cache, "n2")) == ([0], [12])
    cache.pod_event(DELETED, old)  # A's late events leave B counted
    assert used(cache, "n2") == [12]
    cache.pod_event(MODIFIED, new)
    assert cache.assumed() == {} and used(cache, "n2") == [12]


def test_a_namesake_of_the_same_second_that_holds_nothing_leaves_the_assumption_counting():
    # Created and deleted in the second its successor was created (timestamps have seconds): the late
    # events of the older one, which the cache never saw, cannot be told from a newer pod's by time; as
    # they hold no memory, the assumed pod keeps its count.
    cache = fed(node("n1", 16))
    at = "2026-11-28T10:00:07Z"
    cache.assume("default/p", "uid-b", "n1", ann.Allocation({0: {0: 12}}), now_ns=1, created=at)
    older = _created(pod("p", 12, uid="uid-a"), at)
    cache.pod_event(ADDED, older)
    cache.pod_event(DELETED, older)
    assert cache.assumed() == {"default/p": "n1"} and used(cache, "n1") == [12]
    # One that is bound is the API's pod of that name: it is counted in the assumption's place.
    bound = _created(pod("p", 4, uid="uid-c", node_name="n1", placed={0: {0: 4}}), at)
    cache.pod_event(MODIFIED, bound)
    assert cache.assumed() == {} and used(cache, "n1") == [4]


def test_confirmed_assumption_is_marked_bound_and_keeps_its_place_in_expiry_order():
    cache = fed(node("n1", 8), pod("a", 4), pod("b", 2))
    a = cache.assume("default/a", "uid-a", "n1", ann.Allocation({0: {0: 4}}), now_ns=1)
    cache.assume("default/b", "uid-b", "n1", ann.Allocation({0: {0: 2}}), now_ns=2)
    cache.confirm("default/a", a + 100)  # not its token: nothing changes
    assert not cache.assumption("default/a").bound  # type: ignore[union-attr]
    cache.confirm("default/a", a)
    assert cache.assumption("default/a").bound  # type: ignore[union-attr]
    assert cache.expire_assumptions(now_ns=1 + ASSUME_TTL_NS + 1) == 1
    assert cache.assumed() == {"default/b": "n1"}


def test_late_events_of_an_older_pod_of_the_same_name_never_drop_the_newer_ones_reservation():
    old = pod("a", 4, uid="uid-old", node_name="n1", placed={0: {0: 4}}, phase="Running")
    cache = fed(node("n1", 16), old)
    # The old pod was deleted and a new one created; the binder saw the new one by GET and reserved.
    cache.assume("default/a", "uid-new", "n1", ann.Allocation({0: {0: 10}}), now_ns=1)
    assert used(cache, "n1") == [10]
    terminating = pod("a", 4, uid="uid-old", node_name="n1", placed={0: {0: 4}}, phase="Running")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache.pod_event(MODIFIED, terminating)  # the watch is behind: the old pod's last events come now
    cache.pod_event(DELETED, old)
    assert used(cache, "n1") == [10]
    cache.pod_event(ADDED, pod("a", 10, uid="uid-new"))
    assert used(cache, "n1") == [10]
    cache.pod_event(MODIFIED, pod("a", 10, uid="uid-new", node_name="n1", placed={0: {0: 10}}))
    assert cache.assumed() == {}
    assert used(cache, "n1") == [10]


def test_a_newer_pod_of_the_same_name_replaces_the_reservation_of_a_deleted_one():
    cache = fed(node("n1", 16), pod("a", 10))
    cache.assume("default/a", "uid-a", "n1", ann.Allocation({0: {0: 10}}), now_ns=1)
    # A watch gap: the assumed pod was deleted, a new one of the same name created and bound elsewhere.
    cache.pods_resync([pod("a", 4, uid="uid-newer", node_name="n1", placed={0: {0: 4}}, phase="Running")])
    assert cache.assumed() == {}
    assert used(cache, "n1") == [4]


def test_a_relist_drops_reservations_of_pods_gone_before_it_was_asked_for():
    # Bound here, then deleted while the pod watch was down (no DELETED event will come): the re-list
    # lacks them. One made before the list was asked for is dropped; one made after may be of a pod
    # created since, and stays until the watch shows it.
    cache = fed(node("n1", 16))
    cache.assume("default/gone", "uid-gone", "n1", ann.Allocation({0: {0: 8}}), now_ns=100)
    cache.assume("default/new", "uid-new", "n1", ann.Allocation({0: {0: 4}}), now_ns=300)
    cache.pods_resync([], listed_ns=200)
    assert cache.assumed() == {"default/new": "n1"}
    assert used(cache, "n1") == [4]


def test_filter_expires_what_no_bind_came_to_expire():
    # A reservation older than the TTL held the node against every pod that needed its memory: filter
    # failed them all, so no bind came to expire it.
    cache = fed(node("n1", 16), pod("b", 16))
    cache.assume(
        "default/a",
        "uid-a",
        "n1",
        ann.Allocation({0: {0: 16}}),
        now_ns=time.monotonic_ns() - ASSUME_TTL_NS - 1,
    )
    result = scheduling.filter_nodes(
        cache, wire.ExtenderArgs(pod("b", 16), ("n1",)), allocator.Policy.BINPACK
    )
    assert result["NodeNames"] == ["n1"]


def test_a_reservation_outlives_a_silently_stalled_pod_watch():
    # A pod watch that stalls with its connection open is cut after its read timeout and resumes from
    # where it was, showing the binds it missed: reservations must count until then, with room to spare.
    assert 2 * watch.WatchSettings().read_timeout_s <= ASSUME_TTL_NS / 1e9


def test_a_placement_on_a_pod_that_asks_for_nothing_is_not_counted():
    # Anyone may write the placement annotations on a pod they create: one asking for no GPU memory and
    # no whole GPU (unseen by the webhook and by quotas) would otherwise fill any GPU for everyone else.
    forged = pod("forged", 0, node_name="n1", placed={0: {0: 16}}, phase="Running")
    cache = fed(node("n1", 16), forged)
    assert used(cache, "n1") == [0]
    record = cache.pod("default/forged")
    assert record is not None and record.problem.startswith("carries a gpushare placement but asks for no")
