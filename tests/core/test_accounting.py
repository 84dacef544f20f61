"""Tests for webhook.core.placement.accounting: GPUs of a node and the memory its pods hold on each."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.placement import accounting
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources


def node(
    name: str = "n1", devices: str | None = None, capacity: dict[str, Any] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if devices is not None:
        meta["annotations"] = {resources.NODE_DEVICES_ANNOTATION: devices}
    return {"metadata": meta, "status": {"capacity": capacity or {}}}


def devices_json(*sizes: int, unhealthy: tuple[int, ...] = (), unit: str = "GiB") -> str:
    return ann.NodeDevices(
        unit,
        tuple(ann.GpuDevice(i, f"GPU-{i}", m, i not in unhealthy) for i, m in enumerate(sizes)),
    ).to_json()


def pod(
    name: str,
    alloc: dict[int, dict[int, int]] | None,
    *,
    node_name: str = "n1",
    phase: str = "Running",
    deleting: bool = False,
    gpu_mem: int = 0,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if alloc is not None:
        placement = ann.Placement(ann.Allocation(alloc), device_memory=16, assume_time_ns=1)
        meta["annotations"] = ann.encode(placement)
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    limits = {resources.GPU_MEMORY: str(gpu_mem)} if gpu_mem else {}
    return {
        "metadata": meta,
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }


def test_devices_come_from_the_node_annotation_with_their_own_sizes_and_health():
    got = accounting.node_devices(node(devices=devices_json(16, 32, 8, unhealthy=(2,))))
    assert [(d.index, d.memory, d.healthy) for d in got.devices] == [
        (0, 16, True),
        (1, 32, True),
        (2, 8, False),
    ]


def test_devices_fall_back_to_capacity_split_evenly_over_the_gpu_count():
    got = accounting.node_devices(node(capacity={resources.GPU_MEMORY: "62", resources.GPU_COUNT: "4"}))
    assert [d.memory for d in got.devices] == [15, 15, 15, 15]  # 62/4 rounds down: never promise memory


def test_node_without_gpu_memory_has_no_gpus():
    assert accounting.node_devices(node(capacity={"cpu": "4"})).devices == ()


@pytest.mark.parametrize(
    ("n", "fragment"),
    [
        (node(capacity={resources.GPU_MEMORY: "16"}), "no aliyun.com/gpu-count"),
        (node(capacity={resources.GPU_MEMORY: "1.5", resources.GPU_COUNT: "1"}), "not a whole number"),
        (
            node(capacity={resources.GPU_MEMORY: "abc", resources.GPU_COUNT: "1"}),
            "capacity[aliyun.com/gpu-mem]",
        ),
        (node(devices="{nope"), "not JSON"),
        (node(devices='{"unit":"KiB","devices":[]}'), "unit"),
    ],
    ids=["memory-without-count", "fractional", "unparsable", "bad-json", "bad-unit"],
)
def test_unreadable_node_gpus_raise_a_clear_error(n, fragment):
    with pytest.raises(accounting.DevicesError, match=None) as err:
        accounting.node_devices(n)
    assert fragment in str(err.value)


def test_device_memory_is_converted_to_the_extender_unit():
    mib = devices_json(16384, 15360, unit="MiB")
    assert [d.memory for d in accounting.node_devices(node(devices=mib), unit="GiB").devices] == [16, 15]
    gib = devices_json(16)
    assert [d.memory for d in accounting.node_devices(node(devices=gib), unit="MiB").devices] == [16384]


def test_build_counts_live_pods_on_this_node_only():
    pods = [
        pod("a", {0: {0: 4}}),
        pod("b", {0: {0: 2}, 1: {1: 3}}, phase="Pending"),
        pod("done", {0: {0: 8}}, phase="Succeeded"),
        pod("failed", {0: {1: 8}}, phase="Failed"),
        pod("elsewhere", {0: {0: 8}}, node_name="n2"),
    ]
    ledger, skipped = accounting.build(node(devices=devices_json(16, 8)), pods)
    assert [(g.index, g.used, g.free) for g in ledger.gpus()] == [(0, 6, 10), (1, 3, 5)]
    assert [s.key for s in ledger.shares()] == ["ns/a", "ns/b"]
    assert skipped == ()
    assert (ledger.total(), ledger.used()) == (24, 9)


@pytest.mark.parametrize(
    ("phase", "deleting", "holds"),
    [
        ("Running", True, True),
        ("Pending", True, True),
        ("Running", False, True),
        ("Succeeded", True, False),
        ("Failed", False, False),
    ],
    ids=["running-being-deleted", "pending-being-deleted", "running", "succeeded", "failed"],
)
def test_a_bound_pod_holds_its_memory_until_it_finishes_being_deleted_or_not(phase, deleting, holds):
    # Its containers keep the GPU memory until the kubelet stops them; kube-scheduler counts it until gone.
    going = pod("going", {0: {0: 4}}, phase=phase, deleting=deleting)
    assert accounting.holds_memory(going) is holds
    assert accounting.being_deleted(going) is deleting
    ledger, _ = accounting.build(node(devices=devices_json(16)), [going])
    assert ledger.used() == (4 if holds else 0)
    removed, _ = accounting.build(node(devices=devices_json(16)), [])  # removed from the API: gone
    assert removed.used() == 0


def test_build_reads_pods_placed_by_the_original_extender():
    legacy = pod("old", None)
    legacy["metadata"]["annotations"] = {resources.ANN_MEM_IDX: "1", resources.ANN_MEM_POD: "5"}
    ledger, _ = accounting.build(node(devices=devices_json(8, 8)), [legacy])
    assert [g.used for g in ledger.gpus()] == [0, 5]


def test_build_reports_unplaced_and_unreadable_pods_without_counting_them():
    broken = pod("broken", None)
    broken["metadata"]["annotations"] = {resources.ANN_ALLOCATION: "{bad"}
    ledger, skipped = accounting.build(
        node(devices=devices_json(8)), [pod("bypass", None, gpu_mem=4), broken, pod("cpu-only", None)]
    )
    assert ledger.used() == 0
    assert [s.key for s in skipped] == ["ns/bypass", "ns/broken"]
    assert "not placed by the extender" in skipped[0].reason
    assert "not JSON" in skipped[1].reason


def test_build_of_a_node_with_bad_devices_keeps_the_problem():
    ledger, _ = accounting.build(node(capacity={resources.GPU_MEMORY: "16"}), [])
    assert ledger.gpus() == ()
    assert "gpu-count" in ledger.problems()[0]


def test_unhealthy_gpu_has_no_free_memory_but_keeps_its_pods():
    ledger, _ = accounting.build(node(devices=devices_json(16, 16, unhealthy=(1,))), [pod("a", {0: {1: 4}})])
    assert [(g.used, g.free) for g in ledger.gpus()] == [(0, 16), (4, 0)]
    assert ledger.free_desc() == (16,)


def test_placing_the_same_pod_twice_replaces_it_and_release_is_idempotent():
    ledger = accounting.Ledger("n1")
    ledger.set_devices(accounting.node_devices(node(devices=devices_json(16, 16))))
    share = accounting.PodShare("ns/a", "u", ann.Allocation({0: {0: 4}}), assumed=True)
    ledger.place(share)
    assert ledger.free_desc() == (16, 12)
    ledger.place(accounting.PodShare("ns/a", "u", ann.Allocation({0: {1: 6}})))
    assert [g.used for g in ledger.gpus()] == [0, 6]
    assert ledger.free_desc() == (16, 10)
    assert ledger.release("ns/a") is not None
    assert ledger.release("ns/a") is None
    assert [g.used for g in ledger.gpus()] == [0, 0]
    assert ledger.pods_on(0) == ()


def test_each_gpu_counts_the_pods_holding_it_once_however_many_containers_they_put_there():
    # Spread minimises these counts: a pod is one share of each GPU it holds memory on.
    pods = [
        pod("two-containers", {0: {0: 2}, 1: {0: 3}}),
        pod("two-gpus", {0: {0: 4, 1: 4}}),
        pod("one", {0: {2: 1}}),
    ]
    ledger, _ = accounting.build(node(devices=devices_json(16, 16, 16, 16)), pods)
    assert [(g.used, g.shares) for g in ledger.gpus()] == [(9, 2), (4, 1), (1, 1), (0, 0)]
    ledger.release("ns/two-gpus")
    ledger.place(accounting.PodShare("ns/nominated", "u", ann.Allocation({0: {3: 2}}), assumed=True))
    assert [g.shares for g in ledger.gpus()] == [1, 0, 1, 1]


def test_memory_on_a_gpu_the_node_lost_is_reported_and_counts_again_when_it_returns():
    ledger, _ = accounting.build(node(devices=devices_json(8, 8)), [pod("a", {0: {1: 4}})])
    ledger.set_devices(accounting.node_devices(node(devices=devices_json(8))))
    assert ledger.used() == 0
    assert "GPU 1, which the node lacks" in ledger.problems()[0]
    ledger.set_devices(accounting.node_devices(node(devices=devices_json(8, 8))))
    assert [g.used for g in ledger.gpus()] == [0, 4]
    assert ledger.problems() == ()


def test_over_committed_gpu_is_reported():
    ledger, _ = accounting.build(
        node(devices=devices_json(4)), [pod("a", {0: {0: 3}}), pod("b", {0: {0: 3}})]
    )
    assert ledger.gpus()[0].free == 0
    assert "over-committed" in ledger.problems()[0]


@pytest.mark.parametrize(
    ("amount", "src", "dst", "expected"),
    [
        (16, "GiB", "MiB", 16384),
        (16130, "MiB", "GiB", 15),
        (16, "GiB", "128MiB", 128),
        (129, "128MiB", "GiB", 16),
    ],
    ids=["GiB-to-MiB", "MiB-to-GiB-rounds-down", "GiB-to-blocks", "blocks-to-GiB"],
)
def test_convert_between_gib_mib_and_the_plugin_mib_blocks(
    amount: int, src: str, dst: str, expected: int
) -> None:
    assert accounting.convert(amount, src, dst) == expected
