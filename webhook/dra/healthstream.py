"""The kubelet's device-health stream (dra-health v1alpha1 NodeWatchResources, on the DRA socket; the
kubelet opens it when ResourceHealthStatus is on, beta and on by default in 1.36): every GPU's health now,
again on every change and every `period_s`, so the kubelet never lets a report age past its timeout. The
kubelet shows it in the status of pods holding the GPU (`allocatedResourcesStatus`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import grpc

from webhook.core.node import devices, draslice
from webhook.dra.health.v1alpha1 import api_pb2 as pb
from webhook.dra.health.v1alpha1 import api_pb2_grpc as pb_grpc

# The service's name in the registration's supported versions: from 1.37 the kubelet opens the stream only
# for a driver that lists it (k8s.io/kubelet dra-health/v1alpha1 DRAResourceHealthService); 1.36 opens it
# regardless and ignores names it does not know.
SERVICE = "v1alpha1.DRAResourceHealth"


class HealthStream(pb_grpc.DRAResourceHealthServicer):
    def __init__(
        self, pool: str, gpus: Sequence[devices.Gpu], period_s: float = 10.0, timeout_s: int = 30
    ) -> None:
        self.pool = pool
        self.gpus = tuple(sorted(gpus, key=lambda g: g.index))
        self.period_s = period_s
        self.timeout_s = timeout_s  # the kubelet counts a report older than this as unknown health
        self.stopping = threading.Event()
        self._changed = threading.Condition()
        self._unhealthy: frozenset[int] = frozenset()
        self._version = 0

    def set_unhealthy(self, indexes: frozenset[int]) -> None:
        with self._changed:
            self._unhealthy = indexes
            self._version += 1
            self._changed.notify_all()

    def stop(self) -> None:
        with self._changed:
            self.stopping.set()
            self._changed.notify_all()

    def report(self, unhealthy: frozenset[int]) -> pb.NodeWatchResourcesResponse:
        now = int(time.time())
        return pb.NodeWatchResourcesResponse(
            devices=[
                pb.DeviceHealth(
                    device=pb.DeviceIdentifier(
                        pool_name=self.pool, device_name=draslice.device_name(g.index)
                    ),
                    health=pb.UNHEALTHY if g.index in unhealthy else pb.HEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=self.timeout_s,
                    message=f"GPU {g.index} failed its health check (NVML XID or the health file)"
                    if g.index in unhealthy
                    else "",
                )
                for g in self.gpus
            ]
        )

    def NodeWatchResources(  # noqa: N802 (the kubelet's method name)
        self, request: pb.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.NodeWatchResourcesResponse]:
        seen = -1
        while context.is_active() and not self.stopping.is_set():
            with self._changed:
                if seen == self._version:
                    self._changed.wait(self.period_s)
                seen, unhealthy = self._version, self._unhealthy
            if self.stopping.is_set():
                return
            yield self.report(unhealthy)


def add(server: grpc.Server, stream: HealthStream) -> None:
    pb_grpc.add_DRAResourceHealthServicer_to_server(stream, server)  # type: ignore[no-untyped-call]
