"""The watch-fed pod store keeps arrival order; the marker writes `assigned` and survives API errors."""

from __future__ import annotations

import logging

from tests.deviceplugin.placed import placed_pod
from webhook.core.node import matching, podviews
from webhook.deviceplugin import podsource


def test_arrival_order_survives_updates_and_relists():
    store = podsource.PodStore()
    a, b = placed_pod("a", [1], {0: {0: 1}}, assume=9), placed_pod("b", [1], {0: {0: 1}}, assume=1)
    store.resync([])
    store.apply("ADDED", a)
    store.apply("ADDED", b)
    store.apply("MODIFIED", a)  # an update does not move a to the back
    store.resync([a, b, placed_pod("c", [1], {0: {0: 1}})])
    _, views = store.snapshot()
    order = [v.name for v in sorted(views, key=lambda v: v.order)]
    assert order == ["a", "b", "c"]
    assert matching.AllocationBook().match(1, views).pod.name == "a"


def test_deleted_and_non_gpu_pods_leave_the_store():
    store = podsource.PodStore()
    a = placed_pod("a", [1], {0: {0: 1}})
    store.apply("ADDED", a)
    store.apply("ADDED", placed_pod("cpu", [0], None))
    version, views = store.snapshot()
    assert [v.name for v in views] == ["a"]
    store.apply("DELETED", a)
    assert store.wait_newer(version, 0.1)
    assert store.snapshot()[1] == []


def test_marker_gives_up_on_a_pod_that_is_gone(apiserver, caplog):
    caplog.set_level(logging.INFO, "webhook.deviceplugin.podsource")
    marker = podsource.AssignMarker(apiserver.api, backoff_s=0.01)
    try:
        view = podviews.pod_view(placed_pod("ghost", [1], {0: {0: 1}}), 0)
        assert view is not None
        apiserver.reset_counts()
        marker.mark(view)
        assert marker.join(5)
        assert marker.failed == []
        # It asked once, learnt the pod is gone, and neither retried nor patched anything.
        assert apiserver.requests[("get", "pods")] == 1
        assert apiserver.requests.get(("patch", "pods"), 0) == 0
        assert "pod default/ghost is gone; not marking it assigned" in caplog.text
    finally:
        marker.stop()


def test_marker_gives_up_after_repeated_server_errors_and_says_so(apiserver):
    pod = apiserver.put(placed_pod("p", [1], {0: {0: 1}}))
    apiserver.fail_next("get", "pods", status=500, count=50)
    marker = podsource.AssignMarker(apiserver.api, attempts=3, backoff_s=0.01)
    try:
        view = podviews.pod_view(pod, 0)
        assert view is not None
        marker.mark(view)
        assert marker.join(5)
        assert marker.failed == ["default/p"]
    finally:
        marker.stop()
