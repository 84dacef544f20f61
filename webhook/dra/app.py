"""The DRA driver process: wires the GPU inventory and health, the node's mode, the ResourceSlice publisher,
the prepared-claims checkpoint and CDI specs, both gRPC sockets and the probe port.

`Driver(settings).start()` / `.stop()` is the whole lifecycle (tests run it in-process); `run(settings)`
adds logging and waits for SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
import threading
from http.server import ThreadingHTTPServer
from typing import Any

import grpc
import kubernetes.client
import prometheus_client

from webhook import __version__
from webhook.core.node import cdi
from webhook.dra import checkpoint, healthstream, nodemode, preparer, publisher, registration, server
from webhook.dra.cdispecs import SpecFiles
from webhook.dra.settings import DraSettings, SettingsError
from webhook.gpus import health, inventory, toolkitspecs
from webhook.kube import client, draobjects, errors, watch
from webhook.serving import buildinfo, logs, probeserver, stopsignals
from webhook.serving import server as http_server

log = logging.getLogger(__name__)


class StartError(Exception):
    """The driver cannot start: no GPUs, an unreadable checkpoint, no API, a socket or port in use."""


class Metrics(server.Observer):
    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        buildinfo.register(self.registry)
        self.claims = prometheus_client.Counter(
            "gpushare_dra_claims",
            "Claims asked by the kubelet, by call and result",
            ["call", "result"],
            registry=self.registry,
        )
        self.latency = prometheus_client.Histogram(
            "gpushare_dra_call_seconds",
            "NodePrepareResources and NodeUnprepareResources latency",
            ["call"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.25, 1, 5),
            registry=self.registry,
        )
        for call in ("prepare", "unprepare"):
            for result in ("ok", "failed"):
                self.claims.labels(call, result)

    def called(self, call: str, seconds: float, claims: int, failed: int) -> None:
        self.claims.labels(call, "ok").inc(claims - failed)
        self.claims.labels(call, "failed").inc(failed)
        self.latency.labels(call).observe(seconds)


class ApiClaims:
    """ResourceClaims read from the API server, one GET per prepare (the kubelet sends only names)."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.api = api

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return draobjects.get_claim(self.api, namespace, name)


class Driver:
    def __init__(self, settings: DraSettings) -> None:
        settings.validate()
        self.settings = settings
        try:
            self.inventory = inventory.discover(settings.fake_gpus, settings.inventory_file)
            gpus = inventory.present(self.inventory)
        except inventory.InventoryError as err:
            raise StartError(str(err)) from None
        granularity = settings.granularity()
        try:
            self.store = checkpoint.Checkpoint(settings.checkpoint)
        except checkpoint.CheckpointError as err:
            raise StartError(str(err)) from None
        try:
            self.api = client.connect(
                client.ClientSettings(host=settings.api_host, kubeconfig=settings.kubeconfig)
            )
        except errors.ApiError as err:
            raise StartError(err.message) from None
        self.stop_event = threading.Event()
        self.metrics = Metrics()
        # How GPUs reach containers (env, CDI devices): logged and on /metrics when it changes.
        self.toolkit = settings.delivery.specs(
            gpus, on_change=toolkitspecs.delivery_gauge(self.metrics.registry)
        )
        self.mode = nodemode.NodeMode(gpus, settings.force_mps, settings.mps_dirs())
        self.specs = SpecFiles(settings.cdi_dir, cdi.kind(settings.driver_name))
        self.preparer = preparer.Preparer(
            driver=settings.driver_name,
            node=settings.node_name,
            gpus=gpus,
            granularity=granularity,
            claims=ApiClaims(self.api),
            store=self.store,
            specs=self.specs,
            mps_dirs=self.mode.mps_dirs,
            delivery=self.toolkit.delivery,
        )
        self.health_stream = healthstream.HealthStream(settings.node_name, gpus)
        self.server = registration.DriverServer(
            registration.Sockets(settings.driver_name, settings.dra_socket, settings.registration_socket),
            self._add_services,
        )
        self.publisher = publisher.SlicePublisher(
            self.api,
            driver=settings.driver_name,
            node=settings.node_name,
            gpus=gpus,
            granularity=granularity,
            mode=self.mode,
            resync_s=settings.resync_s,
        )
        self.mode.on_change(self.publisher.poke)
        self.node_watch = watch.one_node(self.api, settings.node_name, self._on_node_event)
        self.slice_watch = watch.Watcher(
            self.api,
            draobjects.slices_path(),
            self.publisher.on_slice_event,
            field_selector=self.publisher.field_selector,
            name=f"ResourceSlices of {settings.driver_name} on {settings.node_name}",
        )
        self.health = health.watcher(settings.health_file, self.inventory, settings.health_recovery_s)
        self.health_thread: threading.Thread | None = None  # joined at stop, before NVML shuts down
        self.http: ThreadingHTTPServer | None = None

    def _add_services(self, srv: grpc.Server) -> None:
        server.add_services(srv, self.preparer, self.metrics)
        healthstream.add(srv, self.health_stream)

    def _health_changed(self, unhealthy: frozenset[int]) -> None:
        """A GPU's health changed: it leaves (or rejoins) the slice, and the kubelet hears of it."""
        self.publisher.set_unhealthy(unhealthy)
        self.health_stream.set_unhealthy(unhealthy)

    def _on_node_event(self, event: watch.WatchEvent) -> None:
        found = event.objects[:1] if event.type == watch.RESYNC else (event.object,)
        for node in found:
            if node is None or event.type == watch.DELETED:
                continue
            meta = node.get("metadata") or {}
            self.publisher.node_uid = str(meta.get("uid") or "")
            self.mode.labels_changed(dict(meta.get("labels") or {}))

    def ready(self) -> bool:
        """Registered with the kubelet and the slice published (or found current) once."""
        return self.server.registered.is_set() and self.publisher.synced.is_set()

    def start(self) -> Driver:
        try:
            # First: a busy port or a second instance fails before anything is served or published.
            if self.settings.health_port:
                self.http = probeserver.serve(self.settings.health_port, self.ready, self.metrics.registry)
            self.server.take_lock()
        except (registration.AlreadyRunning, http_server.ServeError) as err:
            self._close_http()
            self.api.close()  # type: ignore[no-untyped-call]
            raise StartError(str(err)) from None
        try:
            # Read once the lock is ours: an instance that held it may have prepared claims since
            # __init__ read the file, and their CDI specs must not be taken for leftovers.
            self.store.reload()
        except checkpoint.CheckpointError as err:
            self.stop()
            raise StartError(str(err)) from None
        try:
            self.specs.remove_others(p.spec_file for p in self.store.all())
        except OSError as err:
            log.warning("cleaning the CDI folder %s failed: %s", self.settings.cdi_dir, err)
        self.node_watch.start()
        # The node's labels decide what is published (its mode), and its UID owns the slice.
        if not self.node_watch.wait_synced(self.settings.api_timeout_s):
            self.stop()
            raise StartError(
                f"cannot read node {self.settings.node_name} from the API server within "
                f"{self.settings.api_timeout_s:g} s: {self.node_watch.last_error or 'no answer'}"
            )
        self.toolkit.delivery()  # decided (and logged) before the first prepare
        self.publisher.start()
        self.slice_watch.start()
        self.health_thread = health.start(self.health, self.stop_event, self._health_changed)
        self.server.start()
        return self

    def _close_http(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
            self.http = None

    def stop(self) -> None:
        self.stop_event.set()
        self._close_http()
        self.health_stream.stop()  # ends the kubelet's open stream before the server's grace runs out
        self.server.stop()
        self.publisher.stop()
        self.slice_watch.stop()
        self.node_watch.stop()
        health.join(self.health_thread)
        close = getattr(self.inventory, "close", None)
        if close is not None:
            close()
        self.api.close()  # type: ignore[no-untyped-call]


def run(settings: DraSettings) -> int:
    logs.configure(settings.log_level, settings.log_format)
    try:
        driver = Driver(settings).start()
    except SettingsError as err:
        raise StartError(str(err)) from None
    except OSError as err:
        raise StartError(f"cannot serve: {err}") from None
    stop = stopsignals.event()
    log.info(
        "gpushare %s: DRA driver %s running on node %s", __version__, settings.driver_name, settings.node_name
    )
    stop.wait()
    driver.stop()
    return 0
