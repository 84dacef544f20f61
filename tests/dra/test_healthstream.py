"""The kubelet's device-health stream over the real gRPC: every GPU at once, a change pushed at once, a
repeat before the kubelet's timeout, and the end of the stream when the driver stops."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from webhook.core.node import devices
from webhook.dra import healthstream
from webhook.dra.health.v1alpha1 import api_pb2 as pb
from webhook.dra.health.v1alpha1 import api_pb2_grpc as pb_grpc

GPUS = (devices.Gpu(1, "GPU-b", 16384), devices.Gpu(0, "GPU-a", 16384))


@pytest.fixture
def stream(
    short_root: Path,
) -> Iterator[tuple[healthstream.HealthStream, Iterator[pb.NodeWatchResourcesResponse]]]:
    service = healthstream.HealthStream("node-1", GPUS, period_s=0.3, timeout_s=30)
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    healthstream.add(srv, service)
    socket = short_root / "dra.sock"
    srv.add_insecure_port(f"unix://{socket}")
    srv.start()
    channel = grpc.insecure_channel(f"unix://{socket}")
    replies = pb_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
        pb.NodeWatchResourcesRequest(), timeout=20
    )
    try:
        yield service, replies
    finally:
        service.stop()
        channel.close()
        srv.stop(0).wait()


def _health(reply: pb.NodeWatchResourcesResponse) -> dict[str, int]:
    return {d.device.device_name: d.health for d in reply.devices}


def test_the_first_report_names_every_gpu_of_the_pool_healthy(stream):
    _, replies = stream
    first = next(replies)
    assert _health(first) == {"gpu-0": pb.HEALTHY, "gpu-1": pb.HEALTHY}
    assert {d.device.pool_name for d in first.devices} == {"node-1"}
    assert {d.health_check_timeout_seconds for d in first.devices} == {30}
    assert abs(first.devices[0].last_updated_time - time.time()) < 5


def test_a_change_is_pushed_with_a_message_and_reports_repeat_before_the_timeout(stream):
    service, replies = stream
    next(replies)
    service.set_unhealthy(frozenset({1}))
    changed = next(replies)
    assert _health(changed) == {"gpu-0": pb.HEALTHY, "gpu-1": pb.UNHEALTHY}
    (bad,) = (d for d in changed.devices if d.device.device_name == "gpu-1")
    assert "GPU 1 failed its health check" in bad.message
    started = time.monotonic()
    assert _health(next(replies)) == _health(changed)  # the periodic repeat, unchanged
    assert time.monotonic() - started < 5


def test_stopping_the_driver_ends_the_stream(stream):
    service, replies = stream
    next(replies)
    service.stop()
    assert list(replies) == []
