"""The extender's lifecycle: API client, cache watches, leader election and the HTTP(S) server.

`run(settings)` serves until SIGINT/SIGTERM; `Extender(settings, api).start()` does the same in
background threads (tests, bench). Readiness waits for the first list of nodes and pods.
"""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import kubernetes.client

from webhook.extender import app as app_mod
from webhook.extender import kubeapi, leader
from webhook.extender.binder import Binder
from webhook.extender.cache import Cache
from webhook.extender.settings import ExtenderSettings
from webhook.kube import client as kube_client
from webhook.serving import tls
from webhook.serving.server import AppServer, ServeOptions


class Extender:
    def __init__(self, settings: ExtenderSettings, api: kubernetes.client.ApiClient) -> None:
        self.settings = settings
        self.cache = Cache(settings.memory_unit, settings.names)
        self.binder = Binder(self.cache, kubeapi.KubeBindingApi(api), settings)
        self.watchers = kubeapi.watchers(self.cache, api)
        self.elector: leader.LeaseElector | None = None
        leadership = app_mod.Leadership()
        if settings.leader.enabled:
            self.elector = leader.LeaseElector(api, settings.leader)
            leadership = app_mod.Leadership(self.elector.is_leader, self.elector.holder)
        self.app = app_mod.ExtenderApp(self.cache, self.binder, settings, leadership)
        serving_tls = None
        if settings.tls_cert is not None and settings.tls_key is not None:
            serving_tls = tls.TlsFiles(cert=Path(settings.tls_cert), key=Path(settings.tls_key))
        self.server = AppServer(
            app_mod.build_app(self.app),
            ServeOptions(host=settings.host, port=settings.port, tls=serving_tls),
            self.app.readiness,
        )
        tcp_nodelay(self.server)

    @property
    def url(self) -> str:
        return self.server.url

    def start_feeds(self) -> None:
        for watcher in self.watchers:
            watcher.start()
        if self.elector is not None:
            self.elector.start()

    def stop_feeds(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
        if self.elector is not None:
            self.elector.stop()

    def start(self) -> Extender:
        self.start_feeds()
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.stop_feeds()

    def wait_synced(self, timeout_s: float = 10.0) -> bool:
        return self.cache.nodes_synced.wait(timeout_s) and self.cache.pods_synced.wait(timeout_s)


def tcp_nodelay(server: AppServer) -> None:
    """Send small replies at once. The listening socket comes from socket.create_server (proto 0), so
    asyncio does not set TCP_NODELAY on accepted connections; h11 writes headers and body apart, and
    Nagle + delayed ACK then adds ~40 ms to every reply. Accepted sockets inherit the option on Linux.
    Belongs in webhook.serving.server._bind; kept here until it moves there.
    """
    sock = getattr(server, "_socket", None)
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def run(settings: ExtenderSettings) -> None:
    if settings.leader.enabled and not settings.leader.identity:
        settings = _with_identity(settings, socket.gethostname())
    api = kube_client.connect(
        kube_client.ClientSettings(host=settings.api_server or "", kubeconfig=settings.kubeconfig or "")
    )
    try:
        extender = Extender(settings, api)
        extender.start_feeds()
        try:
            extender.server.run()
        finally:
            extender.stop_feeds()
    finally:
        api.close()  # type: ignore[no-untyped-call]


def _with_identity(settings: ExtenderSettings, identity: str) -> ExtenderSettings:
    return dataclasses.replace(settings, leader=dataclasses.replace(settings.leader, identity=identity))
