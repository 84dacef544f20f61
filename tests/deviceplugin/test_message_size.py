"""MiB mode registers 8 x 141 GiB under the kubelet's 4 MB limit; one device per MiB would not (fault 5)."""

from __future__ import annotations

from webhook.core.node import devices
from webhook.deviceplugin import server, state

BIG = [devices.Gpu(i, f"GPU-{i:08x}-1111-2222-3333-444444444444", 141 * 1024, "H200") for i in range(8)]


def size(granularity: devices.Granularity) -> int:
    return server.list_response(state.DeviceState(BIG, granularity))[1].ByteSize()


def test_default_mib_mode_stays_far_below_the_kubelet_limit():
    assert size(devices.Granularity.parse("MiB")) < 4 * 1024 * 1024 // 5


def test_one_device_per_mib_passes_the_limit_with_a_single_80_gib_gpu():
    one = [devices.Gpu(0, BIG[0].uuid, 80 * 1024)]
    message = server.list_response(state.DeviceState(one, devices.Granularity.parse("MiB", 1)))[1]
    assert message.ByteSize() > 4 * 1024 * 1024


def test_mib_mode_list_reaches_the_kubelet_stand_in(make_plugin, kubelet):
    make_plugin("0:141GiB,1:141GiB,2:141GiB,3:141GiB,4:141GiB,5:141GiB,6:141GiB,7:141GiB", unit="MiB")
    kubelet.wait(lambda k: len(k.devices) == 8 * 141 * 8, timeout=10)
    assert kubelet.stream_errors == []
