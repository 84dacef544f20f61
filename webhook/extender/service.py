"""The extender's lifecycle: API client, cache watches, leader election and the HTTP(S) server.

`run(settings)` serves until SIGINT/SIGTERM; `Extender(settings, api).start()` does the same in
background threads (tests, bench). Readiness waits for the first list of nodes and pods. With leader
election the leader publishes `advertise_url` on the Lease, where followers forward binds.
"""

from __future__ import annotations

import gc
import logging
import socket
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from webhook.core.pki import certificates
from webhook.extender import app as app_mod
from webhook.extender.bind import forward
from webhook.extender.bind.binder import Binder
from webhook.extender.bind.kubeapi import AsyncKubeBindingApi, KubeBindingApi
from webhook.extender.cache import Cache
from webhook.extender.settings import ExtenderSettings
from webhook.kube import asyncdirect, leader, rest, watch
from webhook.kube import client as kube_client
from webhook.serving import probes, probeserver, tls
from webhook.serving.h2server import H2Server
from webhook.serving.server import AppServer, ServeOptions

log = logging.getLogger(__name__)

# Young-generation threshold: the default (700) runs a collection every few requests at 5,000 names
# each; the cache's objects are long-lived, so collecting them young is wasted work.
GC_GEN0_THRESHOLD = 50_000


class Extender:
    """`api`: the ApiClient from `webhook.kube.client.connect` (opaque here; the shell never names the
    client library)."""

    def __init__(self, settings: ExtenderSettings, api: Any) -> None:
        self.settings = settings
        self.cache = Cache(settings.memory_unit, settings.names)
        self.binding_api = KubeBindingApi(api)
        self.binder = Binder(self.cache, self.binding_api, settings)
        # Bindings and the watches' streams on the server's event loop, where filter and bind run: no
        # thread takes the GIL from it for each call or event (None: a proxy; then on threads).
        client = asyncdirect.AsyncDirectClient.of(api)
        self.loop_api = AsyncKubeBindingApi(client) if client is not None else None
        self.streamer = asyncdirect.LoopStreamer(client) if client is not None else None
        self.watchers = [
            watch.Watcher(api, rest.path("nodes"), self._on_node, name="nodes", streamer=self.streamer),
            watch.Watcher(api, rest.path("pods"), self._on_pod, name="pods", streamer=self.streamer),
        ]
        self.elector: leader.LeaderElector | None = None
        leadership = app_mod.Leadership()
        if settings.leader.enabled:
            if not settings.advertise_url:
                log.warning(
                    "no --advertise-url (nor POD_IP): while leading, followers cannot forward binds here"
                )
            elector = self.elector = leader.LeaderElector(api, _leader_settings(settings))
            leadership = app_mod.Leadership(
                elector.is_leader,
                lambda: elector.holder,
                lambda: elector.holder_annotations().get(forward.LEADER_URL_ANNOTATION, ""),
            )
        self.app = app_mod.ExtenderApp(
            self.cache, self.binder, settings, leadership, loop_api=self.loop_api, streamer=self.streamer
        )
        serving_tls = None
        if settings.tls_cert is not None and settings.tls_key is not None:
            serving_tls = tls.TlsFiles(
                cert=Path(settings.tls_cert), key=Path(settings.tls_key), client_ca=settings.client_ca
            )
        elif settings.client_ca is not None:
            raise ValueError("a client CA needs a serving certificate: client certificates need HTTPS")
        if settings.client_ca is None:
            log.warning("no client CA: anyone who reaches this port can bind pods (serve with --client-ca)")
        _check_own_client_name(settings)
        options = ServeOptions(host=settings.host, port=settings.port, tls=serving_tls)
        self.server: AppServer | H2Server
        if settings.http2:
            self.server = H2Server(app_mod.build_app(self.app), options, self.app.readiness)
        else:
            self.server = AppServer(
                app_mod.build_app(self.app),
                options,
                self.app.readiness,
                metrics=(self.app.registry, app_mod.METRICS_NAMESPACE),
            )
        self.health: ThreadingHTTPServer | None = None

    def _on_node(self, event: watch.WatchEvent) -> None:
        if event.type == watch.RESYNC:
            self.cache.nodes_resync(event.objects)
        elif event.object is not None:
            self.cache.node_event(event.type, event.object)

    def _on_pod(self, event: watch.WatchEvent) -> None:
        if event.type == watch.RESYNC:
            self.cache.pods_resync(event.objects, event.listed_ns)
        elif event.object is not None:
            self.cache.pod_event(event.type, event.object)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def health_port(self) -> int:
        """The plain probe port's number (the one bound when settings.health_port was 0), else 0."""
        return self.health.server_address[1] if self.health is not None else 0

    def start_health(self, port: int | None = None) -> None:
        """Serve /healthz, /readyz and /metrics over plain HTTP on `port` (0: a free one; None:
        settings.health_port, where 0 means none)."""
        if port is None:
            if not self.settings.health_port:
                return
            port = self.settings.health_port
        routes = probes.plain_routes(self.app.readiness)
        self.health = probeserver.serve(port, lambda: True, self.app.registry, routes)

    def stop_health(self) -> None:
        if self.health is not None:
            self.health.shutdown()
            self.health.server_close()
            self.health = None

    def start_feeds(self) -> None:
        for watcher in self.watchers:
            watcher.start()
        if self.elector is not None:
            self.elector.start()

    def stop_feeds(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
        if self.elector is not None:
            self.elector.stop()  # hands the Lease back so a follower takes over at once
        self.binding_api.close()

    def start(self, health_port: int | None = None) -> Extender:
        """Feeds, probe port (see start_health) and server in background threads."""
        self.start_feeds()
        self.start_health(health_port)
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.stop_health()
        self.stop_feeds()

    def wait_synced(self, timeout_s: float = 10.0) -> bool:
        return self.cache.nodes_synced.wait(timeout_s) and self.cache.pods_synced.wait(timeout_s)


def _leader_settings(settings: ExtenderSettings) -> leader.LeaderSettings:
    s = settings.leader
    return leader.LeaderSettings(
        namespace=s.lease_namespace,
        name=s.lease_name,
        identity=s.identity or socket.gethostname(),
        lease_duration=s.lease_duration_s,
        renew_deadline=s.renew_deadline_s,
        retry_period=s.retry_period_s,
        annotations={forward.LEADER_URL_ANNOTATION: settings.advertise_url} if settings.advertise_url else {},
    )


def tune_gc() -> None:
    """Fewer young collections: a filter of 5,000 names allocates tens of thousands of short-lived objects."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def freeze_when_synced(extender: Extender, stop: threading.Event) -> None:
    """Once the first lists are in, move everything alive to the permanent generation: the full
    collections that would otherwise walk 40,000 pods' records stall a request for tens of ms."""
    while not stop.is_set():
        if extender.wait_synced(0.5):
            gc.collect()
            gc.freeze()
            return


def run(settings: ExtenderSettings) -> None:
    api = kube_client.connect(
        kube_client.ClientSettings(
            host=settings.api_server or "",
            kubeconfig=settings.kubeconfig or "",
            # Every bind worker, the two watches and the Lease at once, each on a kept connection.
            pool_size=settings.bind_workers + 4,
        )
    )
    stop = threading.Event()
    try:
        tune_gc()
        extender = Extender(settings, api)
        extender.start_feeds()
        freezer = threading.Thread(
            target=freeze_when_synced, args=(extender, stop), name="gc-freeze", daemon=True
        )
        freezer.start()
        try:
            extender.start_health()
            extender.server.run()
        finally:
            stop.set()
            extender.stop_health()
            extender.stop_feeds()
    finally:
        api.close()  # type: ignore[no-untyped-call]


def _check_own_client_name(settings: ExtenderSettings) -> None:
    """Refuse to start when the client certificate this replica forwards with (the pair kube-scheduler
    presents too, from the same Secret) carries a name `--client-name` does not accept: every filter and
    bind would get 403, with nothing saying why at start (a provided certificate of another CN)."""
    if not settings.client_names or settings.forward_cert is None:
        return
    try:
        cert = certificates.load_certificate(Path(settings.forward_cert).read_bytes())
    except OSError as err:
        raise tls.TlsError(f"cannot read {settings.forward_cert}: {err.strerror or err}") from None
    except certificates.CertificateError:
        raise tls.TlsError(f"{settings.forward_cert} is not a PEM certificate") from None
    names = certificates.common_names(cert)  # every CN, as the server checks callers
    if not set(names) & set(settings.client_names):
        accepted = ", ".join(settings.client_names)
        shown = ", ".join(f"CN={n!r}" for n in names) or "no CN"
        raise tls.TlsError(
            f"the client certificate {settings.forward_cert} is issued to {shown}, but --client-name "
            f"accepts only {accepted}: kube-scheduler presents the same certificate (set the chart's "
            "extender.tls.clientName to its CN, or issue it for that name)"
        )
