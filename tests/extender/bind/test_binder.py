"""Tests for webhook.extender.bind.binder: GPU choice, annotations in the Binding, retries, no over-commit."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.extender.factory import FakeApi, LoopBinder, api_error, node, pod
from webhook.core.wire import resources
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import MODIFIED, Cache
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs

# Every test binds both ways: on a thread (Binder.bind) and as the app does on its event loop.
BINDERS: dict[str, type[Binder]] = {"thread": Binder, "loop": LoopBinder}
_binder_class: list[type[Binder]] = [Binder]


@pytest.fixture(autouse=True, params=sorted(BINDERS))
def _driver(request: pytest.FixtureRequest) -> Any:
    _binder_class[0] = BINDERS[request.param]
    yield
    _binder_class[0] = Binder


def setup(*objs, attempts: int = 3) -> tuple[Cache, FakeApi, Binder]:
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([o for o in objs if o.get("kind") == "Node"])
    pods = [o for o in objs if o.get("kind") == "Pod"]
    for p in pods:
        api.add(p)
    cache.pods_resync(pods)
    binder = _binder_class[0](
        cache, api, ExtenderSettings(bind_attempts=attempts), clock_ns=lambda: 42, sleep=lambda s: None
    )
    return cache, api, binder


def used(cache: Cache, name: str) -> list[int]:
    view = cache.view(name)
    assert view is not None
    return [g.used for g in view.gpus]


def args(name: str, node_name: str = "n1", uid: str | None = None) -> BindingArgs:
    return BindingArgs(name, "default", uid if uid is not None else f"uid-{name}", node_name)


def test_bind_writes_the_placement_annotations_into_the_binding_and_counts_it():
    cache, api, binder = setup(node("n1", 16, 8), pod("a", 2, 3))
    assert binder.bind(args("a")) == ""
    key, bound_node, notes = api.bound[0]
    assert (key, bound_node) == ("default/a", "n1")
    assert notes[resources.ANN_MEM_IDX] == "1"  # best fit: the 8 GiB GPU
    assert notes[resources.ANN_MEM_POD] == "5"
    assert notes[resources.ANN_MEM_DEV] == "8"
    assert notes[resources.ANN_MEM_ASSIGNED] == "false"
    assert notes[resources.ANN_MEM_ASSUME_TIME] == "42"
    assert json.loads(notes[resources.ANN_ALLOCATION]) == {"0": {"1": 2}, "1": {"1": 3}}
    view = cache.view("n1")
    assert view is not None
    assert [g.used for g in view.gpus] == [0, 5]


def test_bind_of_a_multi_gpu_pod_splits_it():
    _, api, binder = setup(node("n1", 16, 16, 16), pod("a", 8, gpu_count=2))
    assert binder.bind(args("a")) == ""
    assert json.loads(api.bound[0][2][resources.ANN_ALLOCATION]) == {"0": {"0": 4, "1": 4}}
    assert api.bound[0][2][resources.ANN_MEM_IDX] == "0,1"


def test_bind_that_does_not_fit_says_why_and_counts_nothing():
    cache, api, binder = setup(node("n1", 4), pod("a", 5))
    assert binder.bind(args("a")) == "node n1: largest free GPU has 4 GiB, pod needs 5"
    assert api.bound == []
    assert cache.assumed() == {}


def test_failed_binding_leaves_no_memory_counted():
    cache, api, binder = setup(node("n1", 8), pod("a", 4), attempts=1)
    api.failures = [(500, "etcd is down")]
    error = binder.bind(args("a"))
    assert "etcd is down" in error
    view = cache.view("n1")
    assert view is not None
    assert [g.used for g in view.gpus] == [0]


@pytest.mark.parametrize("status", [409, 500, 0], ids=["conflict", "server-error", "no-answer"])
def test_transient_failures_are_retried(status):
    _, api, binder = setup(node("n1", 8), pod("a", 4))
    api.failures = [(status, "try again")]
    assert binder.bind(args("a")) == ""
    assert len(api.bound) == 1


def test_binding_whose_reply_was_lost_counts_as_done():
    _, api, binder = setup(node("n1", 8), pod("a", 4))
    api.failures = [(500, "reply lost")]
    api.apply_failed_bind = True
    assert binder.bind(args("a")) == ""
    assert len(api.bound) == 1


def test_client_errors_are_not_retried():
    _, api, binder = setup(node("n1", 8), pod("a", 4))
    api.failures = [(422, "target.name: Required value"), (422, "again")]
    assert "Required value" in binder.bind(args("a"))
    assert api.failures == [(422, "again")]


def test_pod_deleted_mid_bind_is_not_retried_and_frees_its_memory():
    cache, api, binder = setup(node("n1", 8), pod("a", 4))
    api.failures = [(409, "pod a is being deleted")]
    api.pods.pop("default/a")
    assert binder.bind(args("a")) == "pod default/a was deleted"
    assert cache.assumed() == {}


def test_recreated_pod_with_another_uid_is_refused():
    _, api, binder = setup(node("n1", 8), pod("a", 4))
    assert "re-created" in binder.bind(args("a", uid="old-uid"))
    assert api.bound == []


def test_pod_not_yet_in_the_cache_is_fetched_once():
    _, api, binder = setup(node("n1", 8))
    api.add(pod("late", 4))
    assert binder.bind(args("late")) == ""
    assert api.gets == ["default/late"]
    assert [key for key, _, _ in api.bound] == ["default/late"]
    assert binder.bind(args("missing")) == "pod default/missing not found"
    assert api.gets == ["default/late", "default/missing"]


def test_pod_that_asks_for_no_gpu_memory_is_refused():
    _, api, binder = setup(node("n1", 8))
    api.add(pod("cpu"))
    error = binder.bind(args("cpu"))
    assert error.startswith(
        "pod default/cpu asks for no aliyun.com/gpu-mem and no nvidia.com/gpu: the gpushare extender binds"
    )
    assert api.bound == []


def test_bind_to_an_unknown_node_is_refused():
    _, _, binder = setup(node("n1", 8), pod("a", 4))
    assert binder.bind(args("a", "n9")) == "node n9 is not known to the gpushare extender"


def test_pod_already_bound_to_this_node_is_done_and_to_another_is_refused():
    _, _, binder = setup(node("n1", 8), pod("a", 4, node_name="n1", placed={0: {0: 4}}))
    assert binder.bind(args("a")) == ""
    assert binder.bind(args("a", "n2")) == "pod default/a is already bound to node n1, not n2"


def test_concurrent_bind_storm_never_over_commits():
    names = [f"p{i}" for i in range(60)]
    cache, api, binder = setup(node("n1", 16, 16), node("n2", 8), *[pod(n, 3) for n in names])
    errors: list[str] = []

    def worker(chunk: list[str]) -> None:
        for n in chunk:
            for target in ("n1", "n2"):
                if binder.bind(args(n, target)) == "":
                    break
            else:
                errors.append(n)

    threads = [threading.Thread(target=worker, args=(names[i::6],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    placed = {
        n: sum(int(notes[resources.ANN_MEM_POD]) for _, nn, notes in api.bound if nn == n)
        for n in ("n1", "n2")
    }
    assert placed == {"n1": 30, "n2": 6}  # 5 pods of 3 on each 16 GiB GPU, 2 on the 8 GiB one
    assert len(errors) == 60 - 12
    for name in ("n1", "n2"):
        view = cache.view(name)
        assert view is not None
        assert all(g.used <= g.memory for g in view.gpus)
        assert view.problems == ()
    # The watch then reports the bound pods; the counts stay the same.
    for p in api.pods.values():
        cache.pod_event(MODIFIED, p)
    assert cache.assumed() == {}
    views = [cache.view(n) for n in ("n1", "n2")]
    assert sum(g.used for v in views if v is not None for g in v.gpus) == 36


# --- duplicates: one pod bound twice at once, or again before the watch shows it (issue 11) ---------


def in_thread(binder: Binder, a: BindingArgs, results: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: results.append(binder.bind(a)))
    thread.start()
    return thread


def test_duplicate_bind_waits_for_the_first_and_never_moves_its_reservation():
    cache, api, binder = setup(node("n1", 16, 16), pod("a", 10), pod("c", 10))
    api.gate.clear()  # the API server is slow: the first Binding hangs
    results: list[str] = []
    first = in_thread(binder, args("a"), results)
    assert api.entered.wait(5)
    second = in_thread(binder, args("a"), results)  # the scheduler retries, same node
    other = in_thread(binder, args("a", "n2"), results)  # or a second scheduler, another node
    assert used(cache, "n1") == [10, 0]  # the duplicates reserved nothing
    api.gate.set()
    for thread in (first, second, other):
        thread.join(5)
    assert sorted(results) == ["", "", "pod default/a is already bound to node n1, not n2"]
    assert len(api.bound) == 1
    assert binder.bind(args("c")) == ""
    assert used(cache, "n1") == [10, 10]  # c went to the free GPU, not onto a's


def test_bind_again_before_the_watch_shows_the_pod_returns_the_same_placement():
    cache, api, binder = setup(node("n1", 16, 16), pod("a", 10))
    assert binder.bind(args("a")) == ""
    assert binder.bind(args("a")) == ""
    assert binder.bind(args("a", "n2")) == "pod default/a is already bound to node n1, not n2"
    assert len(api.bound) == 1
    assert used(cache, "n1") == [10, 0]


def test_duplicate_binds_after_a_failed_first_bind_bind_once():
    cache, api, binder = setup(node("n1", 16), pod("a", 10), attempts=1)
    api.failures = [(422, "refused")]
    api.gate.clear()
    results: list[str] = []
    first = in_thread(binder, args("a"), results)
    assert api.entered.wait(5)
    second = in_thread(binder, args("a"), results)
    api.gate.set()
    first.join(5)
    second.join(5)
    assert sorted(results) == ["", "binding pod default/a to n1: refused"]
    assert used(cache, "n1") == [10]


def test_duplicate_that_waits_too_long_is_refused_with_a_clear_error():
    cache, api, binder = setup(node("n1", 16), pod("a", 10))
    binder.wait_s = 0.05
    api.gate.clear()
    results: list[str] = []
    first = in_thread(binder, args("a"), results)
    assert api.entered.wait(5)
    assert binder.bind(args("a")) == (
        "pod default/a: an earlier bind of it is still running after 0.05 s; retry"
    )
    api.gate.set()
    first.join(5)
    assert results == [""]
    assert used(cache, "n1") == [10]


def test_bind_whose_outcome_is_unknown_keeps_its_memory_until_the_api_says():
    cache, api, binder = setup(node("n1", 16), pod("a", 10), attempts=1)
    api.failures = [(500, "etcd timeout")]
    api.get_failures = [(500, "still down")]
    error = binder.bind(args("a"))
    assert error == "binding pod default/a to n1: etcd timeout; whether it landed is unknown"
    assert used(cache, "n1") == [10]  # it may have landed: keep counting it
    # The scheduler retries: the API shows the pod unbound, so it is bound afresh.
    assert binder.bind(args("a")) == ""
    assert len(api.bound) == 1
    assert used(cache, "n1") == [10]


def test_bind_whose_lost_binding_did_land_is_recognised_on_the_retry():
    cache, api, binder = setup(node("n1", 16), pod("a", 10), attempts=1)
    api.failures = [(500, "reply lost")]
    api.apply_failed_bind = True
    api.get_failures = [(500, "still down")]
    assert "unknown" in binder.bind(args("a"))
    assert binder.bind(args("a")) == ""
    assert binder.bind(args("a", "n2")) == "pod default/a is already bound to node n1, not n2"
    assert len(api.bound) == 1
    assert used(cache, "n1") == [10]


def test_a_refusal_after_a_lost_reply_no_get_settled_keeps_the_memory_counted(monkeypatch):
    cache, api, binder = setup(node("n1", 16), pod("a", 10), attempts=2)
    api.failures = [(0, "connection reset")]  # the first Binding landed; its reply was lost
    api.apply_failed_bind = True
    api.get_failures = [(503, "still down")]
    first = api.bind

    def bind(*a: Any) -> None:
        if api.bound:  # the retry is refused before the API looks at the pod (an RBAC roll-out)
            raise api_error(403, "cannot create resource pods/binding")
        first(*a)

    monkeypatch.setattr(api, "bind", bind)
    error = binder.bind(args("a"))
    assert error.endswith("pods/binding; whether it landed is unknown")
    assert len(api.bound) == 1 and used(cache, "n1") == [10]  # not freed for another pod


def test_pod_bound_by_someone_else_is_counted_where_it_is_not_where_we_reserved():
    cache, api, binder = setup(node("n1", 16, 16), pod("a", 10))
    other = pod("a", 10, node_name="n1", placed={0: {1: 10}})  # another replica put it on GPU 1
    api.failures = [(409, "pod a is already assigned to node n1")]
    api.pods["default/a"] = other
    assert binder.bind(args("a")) == ""  # bound where asked, with a placement: done
    assert used(cache, "n1") == [0, 10]
    cache.pod_event(MODIFIED, other)
    assert used(cache, "n1") == [0, 10]
    assert cache.assumed() == {}


def test_pod_already_bound_without_a_placement_is_refused():
    _, _, binder = setup(node("n1", 16), pod("a", 4, node_name="n1"))
    assert binder.bind(args("a")) == "pod default/a is already bound to node n1 without a gpushare placement"


def test_pod_the_watch_has_not_shown_bound_elsewhere_is_refused_and_counted():
    cache, api, binder = setup(node("n1", 16), node("n2", 16))
    api.add(pod("late", 4, node_name="n2", placed={0: {0: 4}}))
    assert binder.bind(args("late")) == "pod default/late is already bound to node n2, not n1"
    assert used(cache, "n2") == [4]
    assert api.bound == []


def test_pod_bound_and_finished_says_so():
    finished = pod("a", 4, node_name="n1", placed={0: {0: 4}}, phase="Succeeded")
    _, api, binder = setup(node("n1", 16), finished)
    assert binder.bind(args("a")) == "pod default/a is bound to node n1 and has finished"
    assert api.bound == []


def test_pod_bound_and_being_deleted_says_so_and_keeps_its_memory():
    going = pod("a", 4, node_name="n1", placed={0: {0: 4}}, phase="Running")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache, api, binder = setup(node("n1", 16), going)
    assert binder.bind(args("a")) == "pod default/a is bound to node n1 and is being deleted"
    assert api.bound == []
    assert used(cache, "n1") == [4]
