"""The kubelet's DRA gRPC service, v1 and v1beta1 (the same calls; v1 adds the share ID), translated into
calls on the `Preparer`. Every claim asked is in the answer, with its devices or its error: one claim
that cannot be prepared never fails the others of the batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import grpc

from webhook.dra import checkpoint
from webhook.dra.preparer import PrepareError, Preparer
from webhook.dra.v1 import api_pb2 as v1_pb2
from webhook.dra.v1 import api_pb2_grpc as v1_grpc
from webhook.dra.v1beta1 import api_pb2 as v1beta1_pb2
from webhook.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc

log = logging.getLogger(__name__)

# The names the kubelet knows the services by (k8s.io/kubelet/pkg/apis/dra/*/types.go DRAPluginService).
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


class Observer(Protocol):
    def called(self, call: str, seconds: float, claims: int, failed: int) -> None: ...


class NoObserver:
    def called(self, call: str, seconds: float, claims: int, failed: int) -> None:
        pass


def _answer(
    call: str,
    method: str,
    answer: Any,
    claims: Sequence[Any],
    *,
    observer: Observer,
    act: Callable[[Any, Any], None],
) -> Any:
    """Every claim the kubelet's `method` asked gets its entry in `answer`: `act(claim, entry)` fills it,
    or it carries the PrepareError that `act` raised; the `call`'s count and latency go to `observer`."""
    started = time.monotonic()
    failed = 0
    for claim in claims:
        entry = answer.claims[claim.uid]
        try:
            act(claim, entry)
        except PrepareError as err:
            log.warning("%s %s/%s: %s", method, claim.namespace, claim.name, err)
            entry.error = str(err)
            failed += 1
    observer.called(call, time.monotonic() - started, len(claims), failed)
    return answer


def _prepare(preparer: Preparer, pb: Any, claims: Sequence[Any], observer: Observer, share_ids: bool) -> Any:
    def act(claim: Any, entry: Any) -> None:
        prepared = preparer.prepare(claim.uid, claim.namespace, claim.name)
        entry.devices.extend(_device(pb, d, share_ids) for d in prepared)

    answer = pb.NodePrepareResourcesResponse()
    return _answer("prepare", "NodePrepareResources", answer, claims, observer=observer, act=act)


def _device(pb: Any, device: checkpoint.Device, share_ids: bool) -> Any:
    out = pb.Device(
        request_names=list(device.requests),
        pool_name=device.pool,
        device_name=device.device,
        cdi_device_ids=list(device.cdi_ids),
    )
    if share_ids and device.share_id:
        out.share_id = device.share_id
    return out


def _unprepare(preparer: Preparer, pb: Any, claims: Sequence[Any], observer: Observer) -> Any:
    def act(claim: Any, entry: Any) -> None:
        preparer.unprepare(claim.uid, claim.namespace, claim.name)

    answer = pb.NodeUnprepareResourcesResponse()
    return _answer("unprepare", "NodeUnprepareResources", answer, claims, observer=observer, act=act)


class DraService:
    """The DRAPlugin service of one API version: `pb` its messages (v1 or v1beta1); `share_ids` whether
    its answers carry the share ID (v1 only)."""

    def __init__(
        self, preparer: Preparer, pb: Any, observer: Observer | None = None, *, share_ids: bool
    ) -> None:
        self.preparer = preparer
        self.pb = pb
        self.share_ids = share_ids
        self.observer = observer or NoObserver()

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 (the kubelet's method name)
        return _prepare(self.preparer, self.pb, request.claims, self.observer, share_ids=self.share_ids)

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 (the kubelet's method name)
        return _unprepare(self.preparer, self.pb, request.claims, self.observer)


def add_services(server: grpc.Server, preparer: Preparer, observer: Observer | None = None) -> None:
    v1 = DraService(preparer, v1_pb2, observer, share_ids=True)
    v1beta1 = DraService(preparer, v1beta1_pb2, observer, share_ids=False)
    v1_grpc.add_DRAPluginServicer_to_server(v1, server)  # type: ignore[no-untyped-call]
    v1beta1_grpc.add_DRAPluginServicer_to_server(v1beta1, server)  # type: ignore[no-untyped-call]
