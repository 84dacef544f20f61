"""The committed DRA and plugin-registration stubs equal what scripts/gen-proto makes, and carry the
kubelet's package, service and field names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from webhook.dra.health.v1alpha1 import api_pb2 as health_pb2
from webhook.dra.pluginregistration.v1 import api_pb2 as reg_pb2
from webhook.dra.v1 import api_pb2 as v1_pb2
from webhook.dra.v1beta1 import api_pb2 as v1beta1_pb2

ROOT = Path(__file__).resolve().parents[2]
GENERATED = [
    f"webhook/dra/{d}/{n}"
    for d in ("v1", "v1beta1", "pluginregistration/v1", "health/v1alpha1")
    for n in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")
]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen")
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen-proto"), str(out)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    return out


@pytest.mark.parametrize("name", GENERATED, ids=GENERATED)
def test_regenerating_the_stubs_gives_identical_files(regenerated, name):
    assert (regenerated / name).read_bytes() == (ROOT / name).read_bytes()


@pytest.mark.parametrize(
    ("module", "package"),
    [(v1_pb2, "k8s.io.kubelet.pkg.apis.dra.v1"), (v1beta1_pb2, "k8s.io.kubelet.pkg.apis.dra.v1beta1")],
    ids=["v1", "v1beta1"],
)
def test_the_dra_service_has_the_kubelets_names(module, package):
    file = module.DESCRIPTOR
    assert file.package == package
    methods = [m.full_name for m in file.services_by_name["DRAPlugin"].methods]
    assert methods == [
        f"{package}.DRAPlugin.NodePrepareResources",
        f"{package}.DRAPlugin.NodeUnprepareResources",
    ]
    device = {f.name: f.number for f in file.message_types_by_name["Device"].fields}
    expected = {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
    if package.endswith("v1"):
        expected["share_id"] = 5
    assert device == expected


def test_the_registration_service_has_the_kubelets_names():
    file = reg_pb2.DESCRIPTOR
    assert file.package == "pluginregistration"
    methods = [m.full_name for m in file.services_by_name["Registration"].methods]
    assert methods == [
        "pluginregistration.Registration.GetInfo",
        "pluginregistration.Registration.NotifyRegistrationStatus",
    ]


def test_the_health_service_has_the_kubelets_names():
    file = health_pb2.DESCRIPTOR
    assert file.package == "v1alpha1"
    methods = [m.full_name for m in file.services_by_name["DRAResourceHealth"].methods]
    assert methods == ["v1alpha1.DRAResourceHealth.NodeWatchResources"]
    fields = {f.name: f.number for f in file.message_types_by_name["DeviceHealth"].fields}
    assert fields == {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    }
