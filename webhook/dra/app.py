"""The DRA driver process: wires the GPU inventory and health, the node's mode, the ResourceSlice publisher,
the prepared-claims checkpoint and CDI specs, both gRPC sockets and the probe port.

`Driver(settings).start()` / `.stop()` is the whole lifecycle (tests run it in-process); `run(settings)`
adds logging and waits for SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import grpc
import kubernetes.client

from webhook.core.node import cdi
from webhook.dra import checkpoint, healthstream, metrics, nodemode, preparer, publisher, registration, server
from webhook.dra.cdispecs import SpecFiles
from webhook.dra.settings import DraSettings
from webhook.gpus import health, toolkitspecs
from webhook.kube import draobjects, watch
from webhook.nodeagent import lifecycle, nodelabels
from webhook.nodeagent.lifecycle import StartError

log = logging.getLogger(__name__)


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
        self.inventory, gpus = lifecycle.discover(settings)
        granularity = settings.granularity()
        try:
            self.store = checkpoint.Checkpoint(settings.checkpoint)
        except checkpoint.CheckpointError as err:
            raise StartError(str(err)) from None
        self.api = lifecycle.connect(settings)
        self.stop_event = threading.Event()
        self.metrics = metrics.Metrics()
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
        self.labels = nodelabels.NodeLabels(self.api, settings.node_name)
        self.labels.on_change(self._labels_read)
        self.slice_watch = watch.Watcher(
            self.api,
            draobjects.slices_path(),
            self.publisher.on_slice_event,
            field_selector=self.publisher.field_selector,
            name=f"ResourceSlices of {settings.driver_name} on {settings.node_name}",
        )
        self.health = lifecycle.health_watcher(settings, self.inventory)
        self.health_thread: threading.Thread | None = None  # joined at stop, before NVML shuts down
        self.probes = lifecycle.Probes(settings.health_port, self.ready, self.metrics.registry)

    def _add_services(self, srv: grpc.Server) -> None:
        server.add_services(srv, self.preparer, self.metrics)
        healthstream.add(srv, self.health_stream)

    def _health_changed(self, unhealthy: frozenset[int]) -> None:
        """A GPU's health changed: it leaves (or rejoins) the slice, and the kubelet hears of it."""
        self.publisher.set_unhealthy(unhealthy)
        self.health_stream.set_unhealthy(unhealthy)

    def _labels_read(self, labels: Mapping[str, str]) -> None:
        """The Node's UID owns the slice; its labels decide what is published (its mode)."""
        self.publisher.node_uid = self.labels.uid
        self.mode.labels_changed(labels)

    def ready(self) -> bool:
        """Registered with the kubelet and the slice published (or found current) once."""
        return self.server.registered.is_set() and self.publisher.synced.is_set()

    def start(self) -> Driver:
        lifecycle.claim(self.probes, (self.server.take_lock,), undo=self.api.close)
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
        self.labels.watch.start()
        if not self.labels.watch.wait_synced(self.settings.api_timeout_s):
            self.stop()
            raise StartError(
                f"cannot read node {self.settings.node_name} from the API server within "
                f"{self.settings.api_timeout_s:g} s: {self.labels.watch.last_error or 'no answer'}"
            )
        self.toolkit.delivery()  # decided (and logged) before the first prepare
        self.publisher.start()
        self.slice_watch.start()
        self.health_thread = health.start(self.health, self.stop_event, self._health_changed)
        self.server.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.probes.close()
        self.health_stream.stop()  # ends the kubelet's open stream before the server's grace runs out
        self.server.stop()
        self.publisher.stop()
        self.slice_watch.stop()
        self.labels.watch.stop()
        lifecycle.close(self.health_thread, self.inventory, self.api)


def run(settings: DraSettings) -> int:
    what = f"DRA driver {settings.driver_name}"
    return lifecycle.run(lambda: Driver(settings).start(), settings, log, what)
