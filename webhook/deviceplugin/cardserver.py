"""The whole-card DevicePlugin service, our second endpoint (NVIDIA's plugin registers one per resource
too): one device per GPU, its ID the GPU's UUID, Unhealthy with its GPU; nothing while the node's mode
shares no GPUs (the same `DeviceState.advertised` switch as the gpu-mem endpoint). Translates kubelet
calls into `CardAllocator` calls; a refusal is a gRPC status the kubelet shows as UnexpectedAdmissionError.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from webhook.deviceplugin import server
from webhook.deviceplugin.allocator import AllocateError
from webhook.deviceplugin.state import DeviceState
from webhook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from webhook.deviceplugin.wholecards import CardAllocator

log = logging.getLogger(__name__)


def card_list(state: DeviceState) -> tuple[int, api_pb2.ListAndWatchResponse]:
    version, unhealthy, advertised = state.status()
    gpus = state.gpus if advertised else ()
    return version, api_pb2.ListAndWatchResponse(
        devices=[
            api_pb2.Device(ID=g.uuid, health=server.UNHEALTHY if g.index in unhealthy else server.HEALTHY)
            for g in gpus
        ]
    )


class CardService(api_pb2_grpc.DevicePluginServicer):
    def __init__(
        self,
        state: DeviceState,
        allocator: CardAllocator,
        observer: server.Observer | None = None,
        after_allocate: Callable[[], None] = lambda: None,
    ) -> None:
        self.state = state
        self.allocator = allocator
        self.observer = observer or server.Observer()
        self.after_allocate = after_allocate  # reconcile with the kubelet's PodResources soon
        self.stopping = threading.Event()

    def GetDevicePluginOptions(  # noqa: N802 (the kubelet's method name)
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return server.OPTIONS

    def ListAndWatch(  # noqa: N802 (the kubelet's method name)
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        context.add_callback(self.state.wake)
        sent = -1
        while context.is_active() and not self.stopping.is_set():
            version, message = card_list(self.state)
            if version != sent:
                sent = version
                yield message
            self.state.wait_newer(sent, 0.5)

    def GetPreferredAllocation(  # noqa: N802 (the kubelet's method name)
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        responses = [
            api_pb2.ContainerPreferredAllocationResponse(
                deviceIDs=self.allocator.prefer(
                    list(r.available_deviceIDs), list(r.must_include_deviceIDs), r.allocation_size
                )
            )
            for r in request.container_requests
        ]
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    def Allocate(  # noqa: N802 (the kubelet's method name)
        self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocateResponse:
        started = time.perf_counter()
        if not request.container_requests:
            self.observer.allocated(self.allocator.resource_name, time.perf_counter() - started, False)
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "gpushare: Allocate request has no container requests"
            )
        responses = []
        for container in request.container_requests:
            try:
                answer = self.allocator.allocate(list(container.devices_ids))
            except AllocateError as err:
                log.warning("whole-card Allocate refused: %s", err)
                self.observer.allocated(self.allocator.resource_name, time.perf_counter() - started, False)
                code = (
                    grpc.StatusCode.INVALID_ARGUMENT if err.invalid else grpc.StatusCode.FAILED_PRECONDITION
                )
                context.abort(code, str(err))
            responses.append(api_pb2.ContainerAllocateResponse(envs=answer.envs))
        self.observer.allocated(self.allocator.resource_name, time.perf_counter() - started, True)
        self.after_allocate()
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(  # noqa: N802 (the kubelet's method name)
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()
