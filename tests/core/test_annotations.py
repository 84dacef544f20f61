"""Tests for webhook.core.placement.annotations: the gpushare pod annotations and the node's GPU list."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.placement import annotations as ann
from webhook.core.placement.annotations import Allocation, AnnotationError, GpuDevice, NodeDevices, Placement
from webhook.core.wire import resources
from webhook.core.wire.units import memory_unit, unit_mib


def test_encode_writes_the_five_protocol_keys_and_the_allocation_json():
    placement = Placement(
        Allocation({0: {1: 3}, 2: {1: 2}}), device_memory=15, assume_time_ns=1700000000000000000
    )
    assert ann.encode(placement) == {
        resources.ANN_MEM_IDX: "1",
        resources.ANN_MEM_POD: "5",
        resources.ANN_MEM_DEV: "15",
        resources.ANN_MEM_ASSIGNED: "false",
        resources.ANN_MEM_ASSUME_TIME: "1700000000000000000",
        resources.ANN_ALLOCATION: '{"0":{"1":3},"2":{"1":2}}',
    }


def test_multi_gpu_pod_lists_every_gpu_index():
    placement = Placement(Allocation({0: {2: 4, 0: 4}}), device_memory=16, assume_time_ns=1)
    assert ann.encode(placement)[resources.ANN_MEM_IDX] == "0,2"


allocations = st.dictionaries(
    st.integers(0, 5),
    st.dictionaries(st.integers(0, 7), st.integers(1, 64), min_size=1, max_size=3),
    max_size=4,
)


@given(containers=allocations, dev=st.integers(0, 100000), ns=st.integers(0, 2**63), assigned=st.booleans())
def test_decode_inverts_encode(containers, dev, ns, assigned):
    placement = Placement(Allocation(containers), device_memory=dev, assume_time_ns=ns, assigned=assigned)
    assert ann.decode(ann.encode(placement)) == placement


def test_pod_placed_by_the_original_extender_counts_its_total_on_its_index():
    got = ann.decode(
        {resources.ANN_MEM_IDX: "2", resources.ANN_MEM_POD: "6", resources.ANN_MEM_ASSIGNED: "true"}
    )
    assert got is not None
    assert got.allocation.per_gpu() == {2: 6}
    assert got.assigned


def test_pod_without_annotations_has_no_placement():
    assert ann.decode(None) is None
    assert ann.decode({"other": "x"}) is None


@pytest.mark.parametrize(
    ("notes", "fragment"),
    [
        ({resources.ANN_ALLOCATION: "[1]"}, "must be a JSON object"),
        ({resources.ANN_ALLOCATION: '{"0": 3}'}, "must map GPU index to memory"),
        ({resources.ANN_ALLOCATION: '{"0": {"x": 3}}'}, "'x' is not a non-negative integer"),
        ({resources.ANN_ALLOCATION: '{"0": {"0": -3}}'}, "-3 is not a non-negative integer"),
        ({resources.ANN_ALLOCATION: '{"0": {"0": true}}'}, "True is not a non-negative integer"),
        ({resources.ANN_MEM_IDX: "a", resources.ANN_MEM_POD: "3"}, "ALIYUN_COM_GPU_MEM_IDX"),
        ({resources.ANN_MEM_IDX: "0,1", resources.ANN_MEM_POD: "3"}, "does not split"),
        (
            {resources.ANN_MEM_IDX: "0", resources.ANN_MEM_POD: "3", resources.ANN_MEM_ASSIGNED: "yes"},
            "true or false",
        ),
    ],
    ids=[
        "not-object",
        "container-not-object",
        "bad-gpu",
        "negative",
        "bool",
        "bad-idx",
        "uneven",
        "bad-flag",
    ],
)
def test_unreadable_annotations_raise_with_the_key(notes, fragment):
    with pytest.raises(AnnotationError) as err:
        ann.decode(notes)
    assert fragment in str(err.value)


def test_node_devices_round_trip_and_sort_by_index():
    devices = NodeDevices("MiB", (GpuDevice(1, "GPU-b", 15360, False, "T4"), GpuDevice(0, "GPU-a", 16384)))
    back = NodeDevices.from_json(devices.to_json())
    assert [d.index for d in back.devices] == [0, 1]
    assert back.devices[1] == GpuDevice(1, "GPU-b", 15360, False, "T4")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"devices": [{"index": 0, "memory": 8}, {"index": 0, "memory": 8}]}', "appears twice"),
        ('{"devices": [{"index": 0, "memory": 8, "healthy": "yes"}]}', "healthy must be true or false"),
        ('{"devices": {}}', "must be"),
        ('{"devices": [{"index": 0}]}', "None is not a non-negative integer"),
    ],
    ids=["duplicate", "bad-health", "not-list", "no-memory"],
)
def test_bad_node_devices_are_refused(text, fragment):
    with pytest.raises(AnnotationError) as err:
        NodeDevices.from_json(text)
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("unit", "mib"),
    [("GiB", 1024), ("MiB", 1), ("128MiB", 128), ("1MiB", 1)],
    ids=["GiB", "MiB", "128MiB", "1MiB"],
)
def test_memory_units_name_their_size_in_mib(unit: str, mib: int) -> None:
    assert unit_mib(unit) == mib
    assert memory_unit(unit) == unit


@pytest.mark.parametrize("unit", ["gib", "0MiB", "128 MiB", "GB", "", "1234567MiB"], ids=repr)
def test_unknown_memory_units_are_refused(unit: str) -> None:
    with pytest.raises(ValueError, match="is not GiB, MiB or <N>MiB"):
        unit_mib(unit)


@pytest.mark.parametrize("text", ["[" * 1500, '{"0":' * 1500], ids=["arrays", "objects"])
@pytest.mark.parametrize(
    ("read", "key"),
    [
        (Allocation.from_json, resources.ANN_ALLOCATION),
        (NodeDevices.from_json, resources.NODE_DEVICES_ANNOTATION),
    ],
    ids=["allocation", "node-devices"],
)
def test_json_nested_past_the_stack_is_an_annotation_error_not_a_recursion_error(text, read, key):
    # A RecursionError escaping here stopped the plugin's pod store for every pod of the node.
    with pytest.raises(AnnotationError) as err:
        read(text)
    assert err.value.key == key
    assert "nested too deeply" in str(err.value)


def test_a_nested_value_is_named_by_its_kind_not_printed():
    with pytest.raises(AnnotationError) as err:
        Allocation.from_json('{"0":{"0":' + "[" * 500 + "]" * 500 + "}}")
    assert err.value.problem == "a JSON array is not a non-negative integer"
