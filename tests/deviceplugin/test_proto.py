"""The committed stubs use the kubelet's names: device-plugin v1beta1 and PodResources v1
(tests/test_gen_proto.py checks that they equal what scripts/gen-proto makes)."""

from __future__ import annotations

from webhook.deviceplugin.podresources.v1 import api_pb2 as pr_pb2
from webhook.deviceplugin.v1beta1 import api_pb2


def test_package_services_and_field_numbers_are_the_kubelets():
    file = api_pb2.DESCRIPTOR
    assert file.package == "v1beta1"
    assert sorted(file.services_by_name) == ["DevicePlugin", "Registration"]
    methods = [m.full_name for m in file.services_by_name["DevicePlugin"].methods]
    assert methods == [
        "v1beta1.DevicePlugin.GetDevicePluginOptions",
        "v1beta1.DevicePlugin.ListAndWatch",
        "v1beta1.DevicePlugin.GetPreferredAllocation",
        "v1beta1.DevicePlugin.Allocate",
        "v1beta1.DevicePlugin.PreStartContainer",
    ]
    fields = {
        m: {f.name: f.number for f in file.message_types_by_name[m].fields}
        for m in (
            "RegisterRequest",
            "Device",
            "ContainerPreferredAllocationRequest",
            "ContainerAllocateResponse",
        )
    }
    assert fields == {
        "RegisterRequest": {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
        "Device": {"ID": 1, "health": 2, "topology": 3},
        "ContainerPreferredAllocationRequest": {
            "available_deviceIDs": 1,
            "must_include_deviceIDs": 2,
            "allocation_size": 3,
        },
        "ContainerAllocateResponse": {
            "envs": 1,
            "mounts": 2,
            "devices": 3,
            "annotations": 4,
            "cdi_devices": 5,
        },
    }


def test_pod_resources_package_services_and_field_numbers_are_the_kubelets():
    file = pr_pb2.DESCRIPTOR
    assert file.package == "v1"
    methods = [m.full_name for m in file.services_by_name["PodResourcesLister"].methods]
    assert methods == [
        "v1.PodResourcesLister.List",
        "v1.PodResourcesLister.GetAllocatableResources",
        "v1.PodResourcesLister.Get",
    ]
    fields = {
        m: {f.name: f.number for f in file.message_types_by_name[m].fields}
        for m in ("ListPodResourcesResponse", "PodResources", "ContainerResources", "ContainerDevices")
    }
    assert fields == {
        "ListPodResourcesResponse": {"pod_resources": 1},
        "PodResources": {"name": 1, "namespace": 2, "containers": 3},
        "ContainerResources": {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5},
        "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
    }
