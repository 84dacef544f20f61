"""Matching the kubelet's device requests to placed pods, preferring IDs on the placed GPU, and
reconciling with the kubelet's PodResources list."""

from __future__ import annotations

import pytest

from tests.deviceplugin.placed import placed_pod
from webhook.core.node import devices, matching, podviews

GIB = devices.Granularity.parse("GiB")
GPUS = [
    devices.Gpu(0, "GPU-a", 16 * 1024),
    devices.Gpu(1, "GPU-b", 16130),
    devices.Gpu(2, "GPU-c", 24 * 1024),
]


def view(pod, arrival=0):
    v = podviews.pod_view(pod, arrival)
    assert v is not None
    return v


def views(*pods):
    return [v for v in (podviews.pod_view(p, n) for n, p in enumerate(pods)) if v is not None]


def test_multi_container_pod_is_answered_container_by_container():
    pod = placed_pod("p", [2, 0, 3], {0: {1: 2}, 2: {0: 3}})
    book = matching.AllocationBook()
    first = book.match(2, views(pod))
    book.commit(first)
    second = book.match(3, views(pod))
    book.commit(second)
    assert (first.slot.container, first.slot.gpus, first.last) == ("c0", {1: 2}, False)
    assert (second.slot.container, second.slot.gpus, second.last) == ("c2", {0: 3}, True)
    with pytest.raises(matching.NoMatch):
        book.match(2, views(pod))


def test_pods_with_equal_requests_are_matched_in_arrival_order_and_each_once():
    a = placed_pod("a", [4], {0: {0: 4}}, assume=20)
    b = placed_pod("b", [4], {0: {2: 4}}, assume=10)
    book = matching.AllocationBook()
    # arrival (watch order) first: a arrived before b although b's assume time is older
    pods = [view(a, 1), view(b, 2)]
    got = []
    for _ in range(2):
        m = book.match(4, pods)
        book.commit(m)
        got.append(m.pod.name)
    assert got == ["a", "b"]


def test_same_arrival_falls_back_to_bind_time():
    a = placed_pod("a", [4], {0: {0: 4}}, assume=20)
    b = placed_pod("b", [4], {0: {2: 4}}, assume=10)
    pods = [view(a), view(b)]
    assert matching.AllocationBook().match(4, pods).pod.name == "b"


def test_the_pod_in_progress_is_continued_before_any_other():
    # a: containers 2 then 2; b arrived earlier with a first container of 2 as well, but b is done.
    a = placed_pod("a", [2, 2], {0: {0: 2}, 1: {1: 2}}, assume=1)
    c = placed_pod("c", [2], {0: {2: 2}}, assume=2)
    book = matching.AllocationBook()
    pods = views(a, c)
    book.commit(book.match(2, pods))
    second = book.match(2, pods)
    assert (second.pod.name, second.slot.container) == ("a", "c1")


def test_a_pod_abandoned_midway_is_skipped():
    a = placed_pod("a", [2, 5], {0: {0: 2}, 1: {1: 5}}, assume=1)
    b = placed_pod("b", [3], {0: {2: 3}}, assume=2)
    book = matching.AllocationBook()
    pods = views(a, b)
    book.commit(book.match(2, pods))
    # The kubelet gave up on a (another admit handler refused it) and admits b next.
    assert book.match(3, pods).pod.name == "b"


def test_a_pod_rejected_midway_is_not_continued():
    a = placed_pod("a", [4, 4], {0: {0: 4}, 1: {1: 4}}, assume=1)
    b = placed_pod("b", [4], {0: {0: 4}}, assume=2)
    book = matching.AllocationBook()
    book.commit(book.match(4, views(a)))
    # The kubelet rejected a before its second container: its GPU1 slot must not go to b.
    a["status"]["phase"] = "Failed"
    match = book.match(4, views(a, b))
    assert (match.pod.name, dict(match.slot.gpus)) == ("b", {0: 4})


@pytest.mark.parametrize(
    ("status", "meta"),
    [
        ({"phase": "Running"}, {}),
        ({"phase": "Pending", "containerStatuses": [{"name": "c0"}]}, {}),
        ({"phase": "Failed"}, {}),
        ({"phase": "Pending"}, {"deletionTimestamp": "2024-01-01T00:00:00Z"}),
    ],
    ids=["running", "started-by-kubelet", "failed", "being-deleted"],
)
def test_pods_past_admission_are_never_matched(status, meta):
    pod = placed_pod("p", [4], {0: {0: 4}})
    pod["status"] = status
    pod["metadata"].update(meta)
    with pytest.raises(matching.NoMatch):
        matching.AllocationBook().match(4, views(pod))


def test_assigned_pods_are_never_matched_again():
    pod = placed_pod("p", [4], {0: {0: 4}})
    pod["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"] = "true"
    with pytest.raises(matching.NoMatch, match="no pod on this node is waiting"):
        matching.AllocationBook().match(4, views(pod))


def test_legacy_annotations_split_a_multi_container_pod_over_its_gpu():
    pod = placed_pod("p", [1, 3], None)
    pod["metadata"]["annotations"] = {
        "ALIYUN_COM_GPU_MEM_IDX": "1",
        "ALIYUN_COM_GPU_MEM_POD": "4",
        "ALIYUN_COM_GPU_MEM_DEV": "15",
        "ALIYUN_COM_GPU_MEM_ASSIGNED": "false",
        "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "5",
    }
    (view,) = views(pod)
    assert [(s.container, dict(s.gpus)) for s in view.slots] == [("c0", {1: 1}), ("c1", {1: 3})]


def test_multi_gpu_split_and_init_container_env():
    pod = placed_pod("p", [8], {0: {0: 4, 2: 4}}, labels={"aliyun.com/gpu-count": "2"}, init_gpu_mem=[2])
    book = matching.AllocationBook()
    pods = views(pod)
    init = book.match(2, pods)
    book.commit(init)
    env = matching.container_env(init, GPUS, GIB, isolation_disabled=False)
    assert env["ALIYUN_COM_GPU_MEM_IDX"] == "0,2" and env["ALIYUN_COM_GPU_MEM_CONTAINER"] == "1"
    app = book.match(8, pods)
    env = matching.container_env(app, GPUS, GIB, isolation_disabled=True)
    assert env == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-c",
        "ALIYUN_COM_GPU_MEM_IDX": "0,2",
        "ALIYUN_COM_GPU_MEM_POD": "8",
        "ALIYUN_COM_GPU_MEM_CONTAINER": "4",
        "ALIYUN_COM_GPU_MEM_DEV": "16",
        "CGPU_DISABLE": "true",
    }


@pytest.mark.parametrize(
    ("annotations_", "needle"),
    [
        (None, "has no gpushare placement"),
        ({"scheduler.framework.gpushare.allocation": "[]"}, "malformed placement"),
        (
            {"scheduler.framework.gpushare.allocation": '{"0":{"0":1}}'},
            "asks 4 units but the allocation annotation gives it 1",
        ),
        ({"ALIYUN_COM_GPU_MEM_IDX": "x"}, "malformed placement"),
    ],
    ids=["none", "not-an-object", "wrong-amount", "bad-index"],
)
def test_unusable_placements_refuse_the_pod_by_name(annotations_, needle):
    pod = placed_pod("p", [4], None)
    pod["metadata"]["annotations"] = annotations_ or {}
    with pytest.raises(matching.Unplaceable, match=needle) as err:
        matching.AllocationBook().match(4, views(pod))
    assert err.value.uid == "uid-p"


def test_unreadable_request_is_reported_and_not_matched():
    pod = placed_pod("p", [4], {0: {0: 4}})
    pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "1.5"
    (view,) = views(pod)
    assert view.problem and "unreadable request" in view.problem
    with pytest.raises(matching.NoMatch, match="unreadable request"):
        matching.AllocationBook().match(4, [view])


def test_zero_count_and_non_gpu_pods():
    assert podviews.pod_view(placed_pod("cpu", [0], None), 0) is None
    with pytest.raises(matching.NoMatch, match="no devices"):
        matching.AllocationBook().match(0, [])


def test_forget_drops_pods_that_left_the_node():
    book = matching.AllocationBook(progress={"a": 1, "b": 1}, current="a", refused={"c"})
    book.forget_except(["b"])
    assert (book.progress, book.current, book.refused) == ({"b": 1}, None, set())


def ids_on(gpu: int, *numbers: int) -> list[str]:
    return [f"{GPUS[gpu].uuid}-_-{n}" for n in numbers]


def test_the_kubelets_list_names_the_pod_being_admitted_whatever_the_arrival_order():
    a = placed_pod("a", [4], {0: {0: 4}}, assume=1)
    b = placed_pod("b", [4], {0: {2: 4}}, assume=2)
    book = matching.AllocationBook()
    # The kubelet lists a pod it is admitting before its devices; b is in its list, a is not yet.
    kubelet = matching.KubeletView({"default/b": {"c0": ()}, "default/other": {"x": ("id",)}})
    assert book.match(4, views(a, b), kubelet=kubelet).pod.name == "b"
    # Without the list, arrival order decides.
    assert book.match(4, views(a, b)).pod.name == "a"


def test_of_several_listed_pods_the_one_the_kubelet_started_else_the_last_listed_is_admitted():
    x = placed_pod("x", [4], {0: {0: 4}}, assume=1)
    y = placed_pod("y", [4], {0: {2: 4}}, assume=2)
    z = placed_pod("z", [2, 4], {0: {1: 2}, 1: {1: 4}}, assume=3)
    book = matching.AllocationBook()
    # x is listed without devices because the kubelet rejected it before Allocate; y came after it.
    both = matching.KubeletView({"default/x": {"c0": ()}, "default/y": {"c0": ()}})
    assert [m.pod.name for m in book.candidates(4, views(x, y), both)] == ["y", "x"]
    assert book.match(4, views(x, y), kubelet=both).pod.name == "y"
    # A pod whose first container already has devices is the one being admitted, though it came first.
    started = matching.KubeletView({**both.pods, "default/z": {"c0": tuple(ids_on(1, 0, 1)), "c1": ()}})
    assert [m.pod.name for m in book.candidates(4, views(z, x, y), started)] == ["z", "y", "x"]


def test_the_kubelets_list_says_which_container_of_a_pod_comes_next():
    pod = placed_pod("p", [2, 2], {0: {0: 2}, 1: {2: 2}})
    kubelet = matching.KubeletView({"default/p": {"c0": tuple(ids_on(0, 0, 1)), "c1": ()}})
    match = matching.AllocationBook().match(2, views(pod), kubelet=kubelet)
    assert (match.slot.container, dict(match.slot.gpus)) == ("c1", {2: 2})


def test_device_ids_on_a_placed_gpu_pick_that_pod_among_equal_counts():
    a = placed_pod("a", [4], {0: {0: 4}}, assume=1)
    b = placed_pod("b", [4], {0: {2: 4}}, assume=2)
    book = matching.AllocationBook()
    assert book.match(4, views(a, b), split={2: 4}).pod.name == "b"
    assert book.match(4, views(a, b), split={1: 4}).pod.name == "a"  # no pod there: arrival order


@pytest.mark.parametrize(
    ("available", "must", "expected", "advised"),
    [
        (ids_on(0, 5, 0, 1, 2, 3, 4) + ids_on(2, 0, 1, 2, 3), [], ids_on(2, 0, 1, 2, 3), "b"),
        (ids_on(0, 0, 1, 2, 3, 4) + ids_on(2, 0, 1, 2), [], ids_on(0, 0, 1, 2, 3), None),
        (ids_on(0, 0, 1) + ids_on(2, 5, 6, 7, 8), ids_on(2, 8), ids_on(2, 8, 5, 6, 7), "b"),
    ],
    ids=["on-the-placed-gpu", "no-room-there-packs-one-gpu", "must-include-first"],
)
def test_preferred_ids_lie_on_the_placed_gpu(available, must, expected, advised):
    b = placed_pod("b", [4], {0: {2: 4}})
    found = matching.AllocationBook().candidates(4, views(b))
    ids, match = matching.prefer(available, must, 4, found, gpus=GPUS, granularity=GIB)
    assert ids == expected
    assert (match.pod.name if match else None) == advised


def test_preferred_ids_follow_a_split_placement_and_skip_foreign_ids():
    pod = placed_pod("s", [4], {0: {0: 2, 2: 2}}, labels={"aliyun.com/gpu-count": "2"})
    found = matching.AllocationBook().candidates(4, views(pod))
    available = ["junk", *ids_on(0, 3, 1, 2), *ids_on(2, 9, 4)]
    ids, match = matching.prefer(available, [], 4, found, gpus=GPUS, granularity=GIB)
    assert (ids, match is not None) == ([*ids_on(0, 1, 2), *ids_on(2, 4, 9)], True)


def test_no_advice_for_another_pod_when_the_likeliest_one_will_be_refused():
    rogue = placed_pod("rogue", [4], None, assume=1)
    placed = placed_pod("placed", [4], {0: {2: 4}}, assume=2)
    found = matching.AllocationBook().candidates(4, views(rogue, placed))
    _, match = matching.prefer(ids_on(2, 0, 1, 2, 3), [], 4, found, gpus=GPUS, granularity=GIB)
    assert match is None


def test_reconcile_corrects_the_pods_whose_containers_got_each_others_gpu():
    a = placed_pod("a", [4], {0: {0: 4}}, assume=1)
    b = placed_pod("b", [4], {0: {2: 4}}, assume=2)
    pods = views(a, b)
    book = matching.AllocationBook()
    # The kubelet admitted b first; by arrival order the book gave it a's placement, then a got b's.
    first = book.match(4, pods)
    book.commit(first, ids_on(0, 0, 1, 2, 3))
    second = book.match(4, pods)
    book.commit(second, ids_on(2, 0, 1, 2, 3))
    kubelet = matching.KubeletView(
        {"default/b": {"c0": tuple(ids_on(0, 0, 1, 2, 3))}, "default/a": {"c0": tuple(ids_on(2, 0, 1, 2, 3))}}
    )
    fixes, moves = matching.reconcile(pods, kubelet, book, {0: 16, 1: 15, 2: 24})
    by_name = {f.pod.name: f for f in fixes}
    assert by_name["b"].annotations["ALIYUN_COM_GPU_MEM_IDX"] == "0"
    assert by_name["a"].annotations["ALIYUN_COM_GPU_MEM_IDX"] == "2"
    assert by_name["a"].annotations["ALIYUN_COM_GPU_MEM_DEV"] == "24"
    assert "ALIYUN_COM_GPU_MEM_ASSIGNED" not in by_name["a"].annotations
    assert by_name["a"].containers == ("c0",)
    book.sync(pods, kubelet, moves)
    assert book.given[frozenset(ids_on(0, 0, 1, 2, 3))].uid == "uid-b"
    assert book.progress == {"uid-a": 1, "uid-b": 1}


def test_reconcile_of_an_original_extenders_placement_counts_each_container_once():
    # The original extender's annotations put the whole pod (2 + 2) on container 0 of GPU 0; the kubelet
    # shows container c1 on GPU 1 instead. The correction gives each container its own 2, in all 4.
    legacy = placed_pod("legacy", [2, 2], None, assume=1)
    legacy["metadata"]["annotations"] = {
        "ALIYUN_COM_GPU_MEM_IDX": "0",
        "ALIYUN_COM_GPU_MEM_POD": "4",
        "ALIYUN_COM_GPU_MEM_DEV": "16",
        "ALIYUN_COM_GPU_MEM_ASSIGNED": "true",
        "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "1",
    }
    pods = views(legacy)
    book = matching.AllocationBook()
    book.given[frozenset({"a"})] = matching.Given("uid-legacy", "c0", {0: 2})
    book.given[frozenset({"b"})] = matching.Given("uid-other", "c0", {1: 2})
    kubelet = matching.KubeletView({"default/legacy": {"c0": ("a",), "c1": ("b",)}})
    (fix,), _ = matching.reconcile(pods, kubelet, book, {0: 16, 1: 16})
    assert fix.containers == ("c1",)
    assert fix.annotations["scheduler.framework.gpushare.allocation"] == '{"0":{"0":2},"1":{"1":2}}'
    assert fix.annotations["ALIYUN_COM_GPU_MEM_POD"] == "4"


def test_sync_after_a_restart_continues_the_pod_in_flight():
    earlier = placed_pod("earlier", [2], {0: {1: 2}}, assume=1)
    split = placed_pod("split", [2, 2], {0: {0: 2}, 1: {2: 2}}, assume=2)
    pods = views(earlier, split)
    book = matching.AllocationBook()
    book.sync(pods, matching.KubeletView({"default/split": {"c0": tuple(ids_on(0, 0, 1)), "c1": ()}}))
    assert (book.progress, book.current) == ({"uid-split": 1}, "uid-split")
    match = book.match(2, pods)
    assert (match.pod.name, match.slot.container) == ("split", "c1")
