"""The committed stubs equal what scripts/gen-proto makes from api.proto, and use the kubelet's names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from webhook.deviceplugin.v1beta1 import api_pb2

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


@pytest.mark.parametrize("name", GENERATED, ids=GENERATED)
def test_regenerating_the_stubs_gives_identical_files(tmp_path, name):
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen-proto"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    committed = ROOT / "webhook" / "deviceplugin" / "v1beta1" / name
    assert (tmp_path / "webhook" / "deviceplugin" / "v1beta1" / name).read_bytes() == committed.read_bytes()


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
