"""Fake devices, their granularity, and matching the kubelet's Allocate to the placed pod."""

from __future__ import annotations

import pytest

from tests.deviceplugin.placed import placed_pod
from webhook.core import annotations as ann
from webhook.core import devices

GIB = devices.Granularity.parse("GiB")
GPUS = [
    devices.Gpu(0, "GPU-a", 16 * 1024),
    devices.Gpu(1, "GPU-b", 16130),
    devices.Gpu(2, "GPU-c", 24 * 1024),
]


def view(pod, arrival=0):
    v = devices.pod_view(pod, arrival)
    assert v is not None
    return v


def views(*pods):
    return [v for v in (devices.pod_view(p, n) for n, p in enumerate(pods)) if v is not None]


@pytest.mark.parametrize(
    ("unit", "block", "label", "units_of_16130"),
    [
        ("GiB", None, "GiB", 15),
        ("MiB", 1, "MiB", 16130),
        ("MiB", None, "128MiB", 126),
        ("MiB", 64, "64MiB", 252),
    ],
    ids=["gib-rounds-down", "mib-one-per-mib", "mib-default-block", "mib-64-block"],
)
def test_granularity_units_and_label(unit, block, label, units_of_16130):
    g = devices.Granularity.parse(unit, block)
    assert (g.label, g.units(16130)) == (label, units_of_16130)


@pytest.mark.parametrize(
    ("unit", "block", "needle"),
    [
        ("KiB", None, "is not GiB or MiB"),
        ("GiB", 64, "applies to --memory-unit MiB only"),
        ("MiB", 0, "between 1"),
    ],
    ids=["unknown-unit", "block-with-gib", "zero-block"],
)
def test_bad_granularity_is_refused(unit, block, needle):
    with pytest.raises(devices.DeviceError, match=needle):
        devices.Granularity.parse(unit, block)


def test_block_unit_label_is_readable_by_the_node_annotation_codec():
    published = devices.node_devices(GPUS, devices.Granularity.parse("MiB"), unhealthy={2})
    back = ann.NodeDevices.from_json(published.to_json())
    assert back.unit == "128MiB"
    assert [(d.index, d.memory, d.healthy) for d in back.devices] == [
        (0, 128, True),
        (1, 126, True),
        (2, 192, False),
    ]


def test_fake_devices_are_one_per_unit_per_gpu_and_decode_to_their_gpu():
    fakes = devices.fake_devices(GPUS, GIB, unhealthy={1})
    assert len(fakes) == 16 + 15 + 24
    assert fakes[0].id == "GPU-a-_-0"
    assert {f.gpu_index for f in fakes if not f.healthy} == {1}
    assert all(devices.decode_device_id(f.id, GPUS, GIB) == f.gpu_index for f in fakes)


@pytest.mark.parametrize(
    "ident",
    ["GPU-a", "GPU-a-_-x", "GPU-z-_-0", "GPU-a-_-16", "-_-1", ""],
    ids=["no-separator", "not-a-number", "unknown-uuid", "past-the-memory", "empty-uuid", "empty"],
)
def test_unknown_device_ids_are_refused(ident):
    with pytest.raises(devices.DeviceError):
        devices.decode_device_id(ident, GPUS, GIB)


@pytest.mark.parametrize(
    "gpus",
    [
        [devices.Gpu(0, "GPU-a", 1024), devices.Gpu(0, "GPU-b", 1024)],
        [devices.Gpu(0, "GPU-a", 1024), devices.Gpu(1, "GPU-a", 1024)],
        [devices.Gpu(0, "GPU-a-_-1", 1024)],
        [devices.Gpu(0, "GPU-a", 0)],
    ],
    ids=["index-twice", "uuid-twice", "separator-in-uuid", "no-memory"],
)
def test_bad_inventories_are_refused(gpus):
    with pytest.raises(devices.DeviceError):
        devices.check_inventory(gpus)


def test_device_id_longer_than_the_kubelet_allows_is_refused():
    with pytest.raises(devices.DeviceError, match="longer than 63"):
        devices.fake_devices([devices.Gpu(0, "G" * 60, 2048)], GIB)


def test_mib_mode_for_eight_141_gib_gpus_stays_small():
    big = [devices.Gpu(i, f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd", 141 * 1024) for i in range(8)]
    fakes = devices.fake_devices(big, devices.Granularity.parse("MiB"))
    assert len(fakes) == 8 * 141 * 8  # 128 MiB blocks: 9,024 devices, not 1,155,072


def test_multi_container_pod_is_answered_container_by_container():
    pod = placed_pod("p", [2, 0, 3], {0: {1: 2}, 2: {0: 3}})
    book = devices.AllocationBook()
    first = book.match(2, views(pod))
    book.commit(first)
    second = book.match(3, views(pod))
    book.commit(second)
    assert (first.slot.container, first.slot.gpus, first.last) == ("c0", {1: 2}, False)
    assert (second.slot.container, second.slot.gpus, second.last) == ("c2", {0: 3}, True)
    with pytest.raises(devices.NoMatch):
        book.match(2, views(pod))


def test_pods_with_equal_requests_are_matched_in_arrival_order_and_each_once():
    a = placed_pod("a", [4], {0: {0: 4}}, assume=20)
    b = placed_pod("b", [4], {0: {2: 4}}, assume=10)
    book = devices.AllocationBook()
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
    assert devices.AllocationBook().match(4, pods).pod.name == "b"


def test_the_pod_in_progress_is_continued_before_any_other():
    # a: containers 2 then 2; b arrived earlier with a first container of 2 as well, but b is done.
    a = placed_pod("a", [2, 2], {0: {0: 2}, 1: {1: 2}}, assume=1)
    c = placed_pod("c", [2], {0: {2: 2}}, assume=2)
    book = devices.AllocationBook()
    pods = views(a, c)
    book.commit(book.match(2, pods))
    second = book.match(2, pods)
    assert (second.pod.name, second.slot.container) == ("a", "c1")


def test_a_pod_abandoned_midway_is_skipped():
    a = placed_pod("a", [2, 5], {0: {0: 2}, 1: {1: 5}}, assume=1)
    b = placed_pod("b", [3], {0: {2: 3}}, assume=2)
    book = devices.AllocationBook()
    pods = views(a, b)
    book.commit(book.match(2, pods))
    # The kubelet gave up on a (another admit handler refused it) and admits b next.
    assert book.match(3, pods).pod.name == "b"


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
    with pytest.raises(devices.NoMatch):
        devices.AllocationBook().match(4, views(pod))


def test_assigned_pods_are_never_matched_again():
    pod = placed_pod("p", [4], {0: {0: 4}})
    pod["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"] = "true"
    with pytest.raises(devices.NoMatch, match="no pod on this node is waiting"):
        devices.AllocationBook().match(4, views(pod))


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
    book = devices.AllocationBook()
    pods = views(pod)
    init = book.match(2, pods)
    book.commit(init)
    env = devices.container_env(init, GPUS, GIB, isolation_disabled=False)
    assert env["ALIYUN_COM_GPU_MEM_IDX"] == "0,2" and env["ALIYUN_COM_GPU_MEM_CONTAINER"] == "1"
    app = book.match(8, pods)
    env = devices.container_env(app, GPUS, GIB, isolation_disabled=True)
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
    with pytest.raises(devices.Unplaceable, match=needle) as err:
        devices.AllocationBook().match(4, views(pod))
    assert err.value.uid == "uid-p"


def test_unreadable_request_is_reported_and_not_matched():
    pod = placed_pod("p", [4], {0: {0: 4}})
    pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "1.5"
    (view,) = views(pod)
    assert view.problem and "unreadable request" in view.problem
    with pytest.raises(devices.NoMatch, match="unreadable request"):
        devices.AllocationBook().match(4, [view])


def test_zero_count_and_non_gpu_pods():
    assert devices.pod_view(placed_pod("cpu", [0], None), 0) is None
    with pytest.raises(devices.NoMatch, match="no devices"):
        devices.AllocationBook().match(0, [])


def test_forget_drops_pods_that_left_the_node():
    book = devices.AllocationBook(progress={"a": 1, "b": 1}, current="a", refused={"c"})
    book.forget_except(["b"])
    assert (book.progress, book.current, book.refused) == ({"b": 1}, None, set())
