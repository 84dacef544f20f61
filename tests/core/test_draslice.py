"""The DRA driver's ResourceSlice: one device per healthy GPU, a memory capacity in the protocol's unit
whose default is the whole GPU, attributes for selectors, and names the API server accepts."""

from __future__ import annotations

import pytest

from webhook.core.node import devices, draslice

V100 = devices.Gpu(0, "GPU-a", 16130, "Tesla V100-SXM2-16GB", "7.0")
T4 = devices.Gpu(1, "GPU-b", 16384, "", "")
GIB = devices.Granularity()


def test_a_gib_node_publishes_whole_gib_with_the_whole_gpu_as_default():
    (device,) = draslice.devices_of([V100], GIB)
    assert device["name"] == "gpu-0"
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"] == {
        "memory": {
            "value": "15Gi",  # 16130 MiB: 15 whole GiB, as the device plugin counts it
            "requestPolicy": {"default": "15Gi", "validRange": {"min": "1Gi", "max": "15Gi", "step": "1Gi"}},
        }
    }


def test_a_mib_node_steps_by_its_block():
    one_mib = devices.Granularity.parse("MiB", 1)
    capacity = draslice.capacity(V100, one_mib)
    assert capacity is not None
    assert capacity["value"] == "16130Mi"
    assert capacity["requestPolicy"]["validRange"] == {"min": "1Mi", "max": "16130Mi", "step": "1Mi"}
    blocks = draslice.capacity(T4, devices.Granularity.parse("MiB", 128))
    assert blocks is not None
    assert blocks["requestPolicy"]["validRange"]["step"] == "128Mi"
    assert blocks["value"] == "16Gi"


def test_attributes_carry_uuid_index_model_memory_and_the_compute_capability_as_a_version():
    assert draslice.attributes(V100) == {
        "uuid": {"string": "GPU-a"},
        "index": {"int": 0},
        "memoryMiB": {"int": 16130},
        "model": {"string": "Tesla V100-SXM2-16GB"},
        "cudaComputeCapability": {"version": "7.0.0"},
    }
    assert set(draslice.attributes(T4)) == {"uuid", "index", "memoryMiB"}  # unknown ones left out


def test_unhealthy_gpus_and_gpus_smaller_than_one_unit_leave_the_slice():
    tiny = devices.Gpu(2, "GPU-c", 512)
    names = [d["name"] for d in draslice.devices_of([T4, V100, tiny], GIB, unhealthy={1})]
    assert names == ["gpu-0"]


def test_the_slice_is_the_nodes_pool_owned_by_the_node_and_carries_the_devices_hash():
    found = draslice.devices_of([V100], GIB)
    obj = draslice.resource_slice("node-1", "gpushare.aliyun.com", 3, found, node_uid="u-1")
    assert obj["metadata"]["name"] == "node-1-gpushare.aliyun.com"
    assert obj["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-1",
        "uid": "u-1",
        "controller": True,
    }
    assert obj["spec"]["pool"] == {"name": "node-1", "generation": 3, "resourceSliceCount": 1}
    assert draslice.published_hash(obj) == draslice.devices_hash(found)
    assert draslice.generation(obj) == 3
    assert (
        draslice.published_hash({}) == ""
        and draslice.generation({"spec": {"pool": {"generation": "x"}}}) == 0
    )


def test_a_long_node_name_gives_a_slice_name_within_253_characters():
    node = "n" * 250
    name = draslice.slice_name(node, "gpushare.aliyun.com")
    assert len(name) <= 253
    assert name != draslice.slice_name("m" * 250, "gpushare.aliyun.com")


@pytest.mark.parametrize(
    ("name", "index"),
    [("gpu-0", 0), ("gpu-12", 12), ("gpu-01", None), ("gpu-", None), ("cpu-1", None), ("gpu-1x", None)],
    ids=["zero", "twelve", "leading-zero", "empty", "other-prefix", "junk"],
)
def test_device_names_map_back_to_gpu_indexes_only_as_we_write_them(name, index):
    assert draslice.gpu_index(name) == index


@pytest.mark.parametrize("name", ["", "Gpushare.io", "a_b.io", "x" * 64, "-a.io"], ids=str)
def test_a_driver_name_that_is_no_dns_subdomain_is_refused(name):
    with pytest.raises(draslice.SliceError, match="must be a lower-case DNS subdomain"):
        draslice.driver_name(name)
    assert draslice.driver_name("gpu.example.com") == "gpu.example.com"
