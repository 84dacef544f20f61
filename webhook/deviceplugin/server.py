"""The DevicePlugin gRPC service of both our endpoints (gpu-mem shares, whole cards): translates kubelet
calls into `DeviceState` and allocator calls. An `Endpoint` says what differs: the device list streamed.

ListAndWatch streams the full device list on every change and stays open until the client goes or
the server stops; GetPreferredAllocation advises device IDs on the placed GPU; Allocate answers one env
per container or fails with a status whose message the kubelet shows as `UnexpectedAdmissionError`
(fault 7: never a fake env that crashes later).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from webhook.deviceplugin.allocator import AllocateError, Answer
from webhook.deviceplugin.state import DeviceState
from webhook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# Kept equal to what Register sends: the kubelet stores the options from GetDevicePluginOptions.
OPTIONS = api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

Listing = Callable[[DeviceState], tuple[int, api_pb2.ListAndWatchResponse]]


def list_response(state: DeviceState) -> tuple[int, api_pb2.ListAndWatchResponse]:
    """The gpu-mem list: one fake device per unit of each GPU's memory."""
    version, fakes = state.snapshot()
    message = api_pb2.ListAndWatchResponse(
        devices=[api_pb2.Device(ID=d.id, health=HEALTHY if d.healthy else UNHEALTHY) for d in fakes]
    )
    return version, message


def card_list(state: DeviceState) -> tuple[int, api_pb2.ListAndWatchResponse]:
    """The whole-card list (our second endpoint; NVIDIA's plugin registers one per resource too): one
    device per GPU, its ID the GPU's UUID, Unhealthy with its GPU; nothing while the node's mode shares
    no GPUs (the same `DeviceState.advertised` switch as the gpu-mem list)."""
    version, unhealthy, advertised = state.status()
    gpus = state.gpus if advertised else ()
    return version, api_pb2.ListAndWatchResponse(
        devices=[
            api_pb2.Device(ID=g.uuid, health=UNHEALTHY if g.index in unhealthy else HEALTHY) for g in gpus
        ]
    )


@dataclass(frozen=True, slots=True)
class Endpoint:
    """What one endpoint's service streams and how it reports."""

    listing: Listing
    observes_size: bool  # Observer.streamed: the gpu-mem list, thousands of devices, nears the 4 MB limit
    call: str  # names Allocate in the refusal warning


GPU_MEMORY = Endpoint(list_response, observes_size=True, call="Allocate")
WHOLE_CARDS = Endpoint(card_list, observes_size=False, call="whole-card Allocate")


class Observer:
    """Counters and timings the shell exposes on /metrics, by resource (gpu-mem or whole cards: both
    endpoints share one observer); no-ops by default."""

    def allocated(self, resource: str, seconds: float, ok: bool) -> None: ...

    def streamed(self, size: int) -> None: ...

    def corrected(self, resource: str, containers: int) -> None: ...


class DeviceAllocator(Protocol):
    """Allocate policy of one resource (allocator.Allocator, wholecards.CardAllocator)."""

    resource_name: str

    def prefer(self, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]: ...

    def check(self, device_ids: Sequence[str]) -> object:
        """Raise AllocateError(invalid) for a malformed container request; records nothing."""
        ...

    def allocate(self, device_ids: Sequence[str]) -> Answer: ...


class DevicePluginService(api_pb2_grpc.DevicePluginServicer):
    def __init__(
        self,
        state: DeviceState,
        allocator: DeviceAllocator,
        observer: Observer | None = None,
        after_allocate: Callable[[], None] = lambda: None,
        endpoint: Endpoint = GPU_MEMORY,
    ) -> None:
        self.state = state
        self.allocator = allocator
        self.observer = observer or Observer()
        self.after_allocate = after_allocate  # e.g. reconcile with the kubelet's PodResources soon
        self.endpoint = endpoint
        self.stopping = threading.Event()
        self._cache: tuple[int, api_pb2.ListAndWatchResponse] | None = None
        self._cache_lock = threading.Lock()

    def GetDevicePluginOptions(  # noqa: N802 (the kubelet's method name)
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return OPTIONS

    def _response(self) -> tuple[int, api_pb2.ListAndWatchResponse]:
        # One message per version, shared by all streams (it can hold thousands of devices).
        with self._cache_lock:
            version, _, _ = self.state.status()
            if self._cache is None or self._cache[0] != version:
                self._cache = self.endpoint.listing(self.state)
            return self._cache

    def ListAndWatch(  # noqa: N802 (the kubelet's method name)
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        context.add_callback(self.state.wake)
        sent = -1
        while context.is_active() and not self.stopping.is_set():
            version, message = self._response()
            if version != sent:
                sent = version
                if self.endpoint.observes_size:
                    self.observer.streamed(message.ByteSize())
                yield message
            self.state.wait_newer(sent, 0.5)

    def GetPreferredAllocation(  # noqa: N802 (the kubelet's method name)
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        # Advice only, and an error would fail the pod: always answer.
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
        try:
            # Every container request first: a malformed later one must not leave an earlier one
            # recorded in the book (and its pod marked assigned) for an RPC the kubelet sees refused.
            given: list[str] = []
            for container in request.container_requests:
                self.allocator.check(list(container.devices_ids))
                given += container.devices_ids
            if len(set(given)) != len(given):
                raise AllocateError("the Allocate request gives a device ID to two containers", invalid=True)
            answers = [self.allocator.allocate(list(c.devices_ids)) for c in request.container_requests]
        except AllocateError as err:
            log.warning("%s refused: %s", self.endpoint.call, err)
            self.observer.allocated(self.allocator.resource_name, time.perf_counter() - started, False)
            code = grpc.StatusCode.INVALID_ARGUMENT if err.invalid else grpc.StatusCode.FAILED_PRECONDITION
            context.abort(code, str(err))
        for answer in answers:
            # Whole cards get no mounts: an empty repeated field, the same message as none.
            mounts = [
                api_pb2.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
                for m in answer.mounts
            ]
            responses.append(
                api_pb2.ContainerAllocateResponse(
                    envs=answer.envs,
                    mounts=mounts,
                    cdi_devices=[api_pb2.CDIDevice(name=name) for name in answer.cdi_devices],
                )
            )
        self.observer.allocated(self.allocator.resource_name, time.perf_counter() - started, True)
        self.after_allocate()
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(  # noqa: N802 (the kubelet's method name)
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()
