"""Serve the DRA socket and the registration socket the kubelet's plugin watcher finds, and serve them
again when either file disappears.

Order as the kubelet expects: the DRA service listens first (on `plugins/<driver>/dra.sock`); then the
registration socket appears in `plugins_registry/`, the kubelet's watcher dials it, calls GetInfo
(type DRAPlugin, our name, the DRA socket, the gRPC services we speak) and NotifyRegistrationStatus.
A restarted kubelet walks the folder again and re-registers the same socket. Stopping removes both
sockets, so the kubelet deregisters us at once (it wipes our ResourceSlices 30 s later unless we return:
pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go). A lock file keeps a second instance away.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from webhook.dra import healthstream, server
from webhook.dra.pluginregistration.v1 import api_pb2 as reg_pb2
from webhook.dra.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from webhook.kube import rounds
from webhook.nodeagent import unixsockets
from webhook.serving import socketfiles

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"  # k8s.io/kubelet/pkg/apis/pluginregistration/v1 constants.go


@dataclass(frozen=True, slots=True)
class Sockets:
    driver: str
    dra_socket: Path
    registration_socket: Path
    poll_s: float = 0.5
    workers: int = 32
    stop_grace_s: float = 1.0


class RegistrationService(reg_grpc.RegistrationServicer):
    """GetInfo and NotifyRegistrationStatus; `registered` is set once the kubelet accepted us."""

    def __init__(self, sockets: Sockets) -> None:
        self.sockets = sockets
        self.registered = threading.Event()
        self.notifications = 0

    def GetInfo(  # noqa: N802 (the kubelet's method name)
        self, request: reg_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> reg_pb2.PluginInfo:
        return reg_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.sockets.driver,
            endpoint=str(self.sockets.dra_socket),
            supported_versions=[*server.SERVICES, healthstream.SERVICE],
        )

    def NotifyRegistrationStatus(  # noqa: N802 (the kubelet's method name)
        self, request: reg_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg_pb2.RegistrationStatusResponse:
        self.notifications += 1
        if request.plugin_registered:
            log.info("registered with the kubelet as DRA driver %s", self.sockets.driver)
            self.registered.set()
        else:
            log.error("the kubelet refused the registration of %s: %s", self.sockets.driver, request.error)
            self.registered.clear()
        return reg_pb2.RegistrationStatusResponse()


class DriverServer:
    """Both gRPC servers and the loop that serves them again (`take_lock`, `start`, `stop`)."""

    def __init__(self, sockets: Sockets, add_services: Callable[[grpc.Server], None]) -> None:
        self.sockets = sockets
        self.add_services = add_services
        self.registration = RegistrationService(sockets)
        self.lock = unixsockets.SocketLock(
            sockets.dra_socket.with_name(".driver.lock"),
            0o600,
            agent="DRA driver",
            serves=sockets.dra_socket,
            sockets="sockets",
        )
        self._dra: grpc.Server | None = None
        self._reg: grpc.Server | None = None
        self._served: dict[Path, tuple[int, int] | None] = {}
        self._rounds = rounds.Rounds("dra-sockets", self._check, period_s=sockets.poll_s)

    @property
    def registered(self) -> threading.Event:
        return self.registration.registered

    def take_lock(self) -> None:
        """Raise AlreadyRunning when another instance holds our folder (done by `start` too)."""
        self.lock.take()

    def start(self) -> DriverServer:
        self.take_lock()
        self._serve_all()
        self._rounds.start()
        return self

    def stop(self) -> None:
        self._rounds.stop(timeout=10)
        self._shutdown()
        for path in (self.sockets.registration_socket, self.sockets.dra_socket):
            path.unlink(missing_ok=True)
        self.lock.release()

    def _serve_all(self) -> None:
        """The DRA socket first, the registration socket last: the kubelet dials the first once it sees
        the last."""
        self._shutdown()
        self._dra = self._serve(self.sockets.dra_socket, self.add_services)
        self._reg = self._serve(
            self.sockets.registration_socket,
            lambda srv: reg_grpc.add_RegistrationServicer_to_server(self.registration, srv),  # type: ignore[no-untyped-call]
        )
        log.info(
            "serving DRA driver %s on %s, registration on %s",
            self.sockets.driver,
            self.sockets.dra_socket,
            self.sockets.registration_socket,
        )

    def _serve(self, path: Path, add: Callable[[grpc.Server], None]) -> grpc.Server:
        srv = unixsockets.serve(path, add, workers=self.sockets.workers, prefix="dra")
        self._served[path] = socketfiles.identity(path)
        return srv

    def _shutdown(self) -> None:
        for srv in (self._reg, self._dra):
            if srv is not None:
                unixsockets.stop(srv, self.sockets.stop_grace_s)
        self._reg = self._dra = None
        self.registration.registered.clear()

    def _check(self) -> None:
        gone = [p for p, served in self._served.items() if socketfiles.identity(p) != served]
        if gone:
            log.warning("socket %s was removed or replaced: serving both sockets again", gone[0])
            try:
                self._serve_all()
            except OSError as err:
                log.error("serving again failed: %s; retrying", err)
