"""Serve the plugin socket, register with the kubelet, and do both again when the kubelet restarts.

Order as the kubelet requires: serve first, then Register from this lifecycle thread, because current
kubelets dial back and call GetDevicePluginOptions before Register returns. The socket directory is
polled: our socket deleted, or kubelet.sock replaced, means the kubelet restarted. The servicer (and
with it the allocation book) outlives every server instance, so no allocation is lost.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from webhook.deviceplugin import server
from webhook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

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
    workers: int = 8  # one per open ListAndWatch stream, plus Allocate and the dial-back
    stop_grace_s: float = 1.0


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


class PluginServer:
    """Owns the gRPC server instance and the register/restart loop (`start`, `stop`)."""

    def __init__(self, service: server.DevicePluginService, settings: RegistrationSettings) -> None:
        self.service = service
        self.settings = settings
        self.socket = settings.plugin_dir / settings.endpoint
        self.kubelet_socket = settings.plugin_dir / KUBELET_SOCKET
        self.registered = threading.Event()
        self.registrations = 0
        self._stop = threading.Event()
        self._server: grpc.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> PluginServer:
        self._serve()
        self._thread = threading.Thread(
            target=self._lifecycle, name="device-plugin-registration", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._shutdown()

    def _serve(self) -> None:
        self._shutdown()
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)  # a stale socket from a previous run
        self.service.stopping.clear()
        srv = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.settings.workers, thread_name_prefix="dp")
        )
        api_pb2_grpc.add_DevicePluginServicer_to_server(self.service, srv)  # type: ignore[no-untyped-call]
        srv.add_insecure_port(f"unix://{self.socket}")
        srv.start()
        self._server = srv
        self._served = _identity(self.socket)
        log.info("serving the device plugin on %s", self.socket)

    def _shutdown(self) -> None:
        srv, self._server = self._server, None
        if srv is None:
            return
        self.service.stopping.set()
        self.service.state.wake()
        srv.stop(self.settings.stop_grace_s).wait(self.settings.stop_grace_s + 5)

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

    def _lifecycle(self) -> None:
        kubelet: tuple[int, int] | None = None
        backoff = self.settings.poll_s
        while not self._stop.is_set():
            if not self.registered.is_set():
                current = _identity(self.kubelet_socket)
                if current is not None:
                    # A starting kubelet deletes every socket before it creates kubelet.sock: once that
                    # exists, serve again if ours is gone, or the kubelet could never dial back.
                    if _identity(self.socket) != self._served:
                        self._serve()
                    try:
                        self._register()
                    except grpc.RpcError as err:
                        log.warning("Register with the kubelet failed: %s", _describe(err))
                        self._stop.wait(backoff)
                        backoff = min(backoff * 2, 10.0)
                        continue
                    kubelet, backoff = current, self.settings.poll_s
                    self.registrations += 1
                    self.registered.set()
                    log.info("registered %s with the kubelet", self.settings.resource_name)
            elif self._kubelet_restarted(kubelet):
                log.info("the kubelet restarted: re-registering once kubelet.sock is back")
                self.registered.clear()
                continue
            self._stop.wait(self.settings.poll_s)

    def _kubelet_restarted(self, kubelet: tuple[int, int] | None) -> bool:
        now = _identity(self.kubelet_socket)
        return _identity(self.socket) != self._served or (now is not None and now != kubelet)


def _describe(err: grpc.RpcError) -> str:
    if isinstance(err, grpc.Call):
        return f"{err.code().name}: {err.details()}"
    return str(err)
