"""The committed DRA and plugin-registration stubs carry the kubelet's package, service and field names
(tests/test_gen_proto.py checks that they equal what scripts/gen-proto makes)."""

from __future__ import annotations

import pytest

from webhook.dra.health.v1alpha1 import api_pb2 as health_pb2
from webhook.dra.pluginregistration.v1 import api_pb2 as reg_pb2
from webhook.dra.v1 import api_pb2 as v1_pb2
from webhook.dra.v1beta1 import api_pb2 as v1beta1_pb2


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
