"""Serve the plugin socket, register with the kubelet, and do both again when the kubelet restarts.

Order as the kubelet requires: serve first, then Register from this lifecycle thread, because current
kubelets dial back and call GetDevicePluginOptions before Register returns. The socket directory is
polled: our socket deleted, or kubelet.sock replaced, means the kubelet restarted. The servicer (and
with it the allocation book) outlives every server instance, so no allocation is lost. A lock file
beside the socket keeps a second plugin instance from deleting the first one's socket.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from webhook.deviceplugin import server
from webhook.deviceplugin.state import DeviceState
from webhook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from webhook.kube import rounds
from webhook.nodeagent import unixsockets
from webhook.serving import socketfiles

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


@dataclass(frozen=True, slots=True)
class RegistrationSettings:
    plugin_dir: Path
    endpoint: str  # our socket's file name inside plugin_dir
    resource_name: str
    poll_s: float = 0.5
    register_timeout_s: float = 15.0
    # A sync gRPC server holds a thread per call in progress: Allocates waiting for the pod watch must
    # not starve GetDevicePluginOptions, ListAndWatch or other Allocates (threads start on demand).
    workers: int = 256
    stop_grace_s: float = 1.0
    missing_log_s: float = 30.0  # how often to repeat that kubelet.sock is missing


class Service(Protocol):
    """A DevicePlugin servicer the server can serve (the gpu-mem one, or the whole-card one): `stopping`
    ends its ListAndWatch streams, and waking its state lets them notice."""

    stopping: threading.Event

    @property
    def state(self) -> DeviceState: ...


class PluginServer:
    """Owns the gRPC server instance and the register/restart loop (`start`, `stop`)."""

    def __init__(self, service: Service, settings: RegistrationSettings) -> None:
        self.service = service
        self.settings = settings
        self.socket = settings.plugin_dir / settings.endpoint
        self.kubelet_socket = settings.plugin_dir / KUBELET_SOCKET
        self.registered = threading.Event()
        self.registrations = 0
        self.lock = unixsockets.SocketLock(
            settings.plugin_dir / f".{settings.endpoint}.lock",
            0o644,
            agent="device plugin",
            serves=self.socket,
        )
        self._server: grpc.Server | None = None
        self._rounds = rounds.Rounds("device-plugin-registration", self._round, period_s=settings.poll_s)
        self._kubelet: tuple[int, int] | None = None  # kubelet.sock as we registered with it
        self._backoff = settings.poll_s
        self._missing_since = time.monotonic()

    def take_lock(self) -> None:
        """Raise AlreadyRunning when another instance serves our socket (done by `start` too)."""
        self.lock.take()

    def start(self) -> PluginServer:
        self.take_lock()
        if socketfiles.identity(self.kubelet_socket) is None:
            log.warning(
                "the kubelet socket %s does not exist: is the kubelet running, and is %s its device-plugin "
                "directory (--device-plugin-dir, a hostPath mount of the directory)? Waiting for it",
                self.kubelet_socket,
                self.settings.plugin_dir,
            )
        self._serve()
        self._missing_since = time.monotonic()
        self._rounds.poke()
        self._rounds.start()
        return self

    def stop(self) -> None:
        self._rounds.stop(timeout=10)
        self._shutdown()
        self.lock.release()

    def _serve(self) -> None:
        self._shutdown()
        self.service.stopping.clear()
        self._server = unixsockets.serve(
            self.socket,
            lambda srv: api_pb2_grpc.add_DevicePluginServicer_to_server(self.service, srv),  # type: ignore[no-untyped-call]
            workers=self.settings.workers,
            prefix="dp",
            shorter="--device-plugin-dir",
        )
        self._served = socketfiles.identity(self.socket)
        log.info("serving the device plugin on %s", self.socket)

    def _shutdown(self) -> None:
        srv, self._server = self._server, None
        if srv is None:
            return
        self.service.stopping.set()
        self.service.state.wake()
        unixsockets.stop(srv, self.settings.stop_grace_s)

    def _register(self) -> None:
        options = server.OPTIONS
        request = api_pb2.RegisterRequest(
            version=API_VERSION,
            endpoint=self.settings.endpoint,
            resource_name=self.settings.resource_name,
            options=options,
        )
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            stub = api_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            stub.Register(request, timeout=self.settings.register_timeout_s)

    def _round(self) -> None:
        if not self.registered.is_set():
            current = socketfiles.identity(self.kubelet_socket)
            if current is None and time.monotonic() - self._missing_since >= self.settings.missing_log_s:
                log.warning("still waiting for the kubelet socket %s to appear", self.kubelet_socket)
                self._missing_since = time.monotonic()
            if current is not None:
                # A starting kubelet deletes every socket before it creates kubelet.sock: once that
                # exists, serve again if ours is gone, or the kubelet could never dial back.
                if socketfiles.identity(self.socket) != self._served:
                    self._serve()
                try:
                    self._register()
                except grpc.RpcError as err:
                    log.warning("Register with the kubelet failed: %s", _describe(err))
                    backoff, self._backoff = self._backoff, min(self._backoff * 2, 10.0)
                    self._rounds.again(backoff)
                    return
                self._kubelet, self._backoff = current, self.settings.poll_s
                self.registrations += 1
                self.registered.set()
                log.info("registered %s with the kubelet", self.settings.resource_name)
        elif why := self._lost(self._kubelet):
            log.warning("%s: serving again and re-registering once kubelet.sock is there", why)
            self.registered.clear()
            self._missing_since = time.monotonic()
            self._rounds.again()

    def _lost(self, kubelet: tuple[int, int] | None) -> str:
        """Why the registration no longer holds ("" while it does)."""
        now = socketfiles.identity(self.kubelet_socket)
        if now is not None and now != kubelet:
            return "the kubelet restarted (kubelet.sock was recreated)"
        if socketfiles.identity(self.socket) != self._served:
            if now is None:
                return f"the kubelet stopped: {self.kubelet_socket} and our socket were removed"
            # The kubelet deletes every socket only when it starts, and then recreates kubelet.sock.
            return f"our socket {self.socket} was deleted by another process while the kubelet kept running"
        return ""


def _describe(err: grpc.RpcError) -> str:
    if isinstance(err, grpc.Call):
        return f"{err.code().name}: {err.details()}"
    return str(err)
