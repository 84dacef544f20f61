"""Fake devices, their granularity, and the GPU each device ID stands for."""

from __future__ import annotations

import pytest

from webhook.core.node import devices
from webhook.core.placement import annotations as ann

GIB = devices.Granularity.parse("GiB")
GPUS = [
    devices.Gpu(0, "GPU-a", 16 * 1024),
    devices.Gpu(1, "GPU-b", 16130),
    devices.Gpu(2, "GPU-c", 24 * 1024),
]


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


def test_device_split_counts_ids_per_gpu_and_refuses_foreign_ones():
    ids = ["GPU-a-_-0", "GPU-c-_-3", "GPU-a-_-7"]
    assert devices.device_split(ids, GPUS, GIB) == {0: 2, 2: 1}
    assert devices.device_number("GPU-c-_-3") == 3
    with pytest.raises(devices.DeviceError):
        devices.device_split(["GPU-z-_-0"], GPUS, GIB)
