"""Tests for webhook.extender.binder: GPU choice, annotations in the Binding, retries, no over-commit."""

from __future__ import annotations

import json
import threading

import pytest

from tests.extender.factory import FakeApi, node, pod
from webhook.core import resources
from webhook.extender.binder import Binder
from webhook.extender.cache import MODIFIED, Cache
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs


def setup(*objs, attempts: int = 3) -> tuple[Cache, FakeApi, Binder]:
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([o for o in objs if o.get("kind") == "Node"])
    pods = [o for o in objs if o.get("kind") == "Pod"]
    for p in pods:
        api.add(p)
    cache.pods_resync(pods)
    binder = Binder(
        cache, api, ExtenderSettings(bind_attempts=attempts), clock_ns=lambda: 42, sleep=lambda s: None
    )
    return cache, api, binder


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
    assert binder.bind(args("missing")) == "pod default/missing not found"


def test_pod_without_gpu_memory_gets_a_plain_binding():
    _, api, binder = setup(node("n1", 8))
    api.add(pod("cpu"))
    assert binder.bind(args("cpu")) == ""
    assert api.bound == [("default/cpu", "n1", {})]


def test_bind_to_an_unknown_node_is_refused():
    _, _, binder = setup(node("n1", 8), pod("a", 4))
    assert binder.bind(args("a", "n9")) == "node n9 is not known to the gpushare extender"


def test_pod_already_bound_to_this_node_is_done_and_to_another_is_refused():
    _, _, binder = setup(node("n1", 8), pod("a", 4, node_name="n1", placed={0: {0: 4}}))
    assert binder.bind(args("a")) == ""
    assert binder.bind(args("a", "n2")) == "pod default/a is already on node n1"


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
