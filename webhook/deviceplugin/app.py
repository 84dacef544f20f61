"""The device plugin process: wires inventory, health, pod and node watches, the gRPC server and probes.

`Plugin(settings).start()` / `.stop()` is the whole lifecycle (tests run it in-process); `run(settings)`
adds logging and waits for SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
import threading

from webhook.core.node import devicelist, podviews
from webhook.core.wire import resources
from webhook.deviceplugin import (
    allocator,
    metrics,
    node,
    nodemode,
    podsource,
    reconcile,
    registration,
    server,
    state,
    wholecards,
)
from webhook.deviceplugin.settings import DevicePluginSettings
from webhook.deviceplugin.usage import pods as usagepods
from webhook.deviceplugin.usage import wiring as usage
from webhook.gpus import health, toolkitspecs
from webhook.kube import rest, watch
from webhook.nodeagent import lifecycle, nodelabels
from webhook.nodeagent.lifecycle import StartError

log = logging.getLogger(__name__)


class Plugin:
    def __init__(self, settings: DevicePluginSettings) -> None:
        settings.validate()
        self.settings = settings
        try:
            self.inventory, gpus = lifecycle.discover(settings)
        except StartError:
            _forget_gpus(settings)
            raise
        self.state = state.DeviceState(gpus, settings.granularity())
        size = server.list_response(self.state)[1].ByteSize()
        if size > settings.max_list_bytes:
            raise StartError(
                f"the device list would be {size} bytes, above {settings.max_list_bytes} (the kubelet "
                "refuses messages over 4 MB): use --memory-unit GiB or a larger --mib-per-device"
            )
        self.usage: usage.Usage | None = None  # built below, once the API client exists
        self.metrics = metrics.Metrics((settings.resource_name, settings.whole_card_resource))
        self.stop_event = threading.Event()
        self.api = lifecycle.connect(settings)
        # How GPUs reach containers (env, CDI devices): logged, on /metrics and on the Node when it changes.
        self.observe_delivery = toolkitspecs.delivery_gauge(self.metrics.registry)
        self.specs = settings.delivery.specs(gpus, on_change=self._delivered)
        self.pods = podsource.PodStore()
        self.labels = nodelabels.NodeLabels(self.api, settings.node_name)
        self.mode = nodemode.NodeMode(self.state, settings.force_mps, settings.mps_dirs())
        self.labels.on_change(self.mode.labels_changed)
        self.marker = podsource.AssignMarker(self.api)
        self.kubelet_pods = self._pod_resources(settings.resource_name)
        self.allocator = allocator.Allocator(
            self.state,
            self.pods,
            self.marker,
            isolation_disabled=self.labels.isolation_disabled,
            node_name=settings.node_name,
            resource_name=settings.resource_name,
            wait_s=settings.allocate_wait_s,
            kubelet=self.kubelet_pods,
            mps_dirs=self.mode.mps_dirs,
            delivery=self.specs.delivery,
        )
        # Whole cards: a second endpoint over the same GPUs, health, mode switch and reconciliation
        # (server.WHOLE_CARDS).
        self.card_pods = podsource.PodStore(
            resources.GpuResourceNames(whole_card=settings.whole_card_resource), view=podviews.card_view
        )
        self.card_kubelet = self._pod_resources(settings.whole_card_resource)
        self.card_allocator = wholecards.CardAllocator(
            self.state,
            self.card_pods,
            self.marker,
            isolation_disabled=self.labels.isolation_disabled,
            node_name=settings.node_name,
            resource_name=settings.whole_card_resource,
            wait_s=settings.allocate_wait_s,
            kubelet=self.card_kubelet,
            delivery=self.specs.delivery,
        )
        self.reconciler = (
            reconcile.Reconciler(
                [
                    reconcile.Source(self.allocator, self.kubelet_pods),
                    reconcile.Source(self.card_allocator, self.card_kubelet),
                ],
                self.api,
                self.metrics,
                period_s=settings.reconcile_s,
            )
            if self.kubelet_pods and self.card_kubelet
            else None
        )
        poke = self.reconciler.poke if self.reconciler else lambda: None
        self.service = server.DevicePluginService(
            self.state,
            self.allocator,
            self.metrics,
            after_allocate=poke,
        )
        self.pod_watch = watch.Watcher(
            self.api,
            rest.path("pods"),
            self._on_pod_event,
            field_selector=f"spec.nodeName={settings.node_name}",
            name=f"pods on {settings.node_name}",
        )
        self.publisher = node.NodePublisher(
            self.api, settings.node_name, self.state, device_list=lambda: self.specs.delivery().mode
        )
        if settings.usage_interval_s:
            self.usage = usage.build(
                settings,
                inv=self.inventory,
                state=self.state,
                api=self.api,
                labels=lambda: self.labels.labels,
                metrics=self.metrics,
            )
        self.health = lifecycle.health_watcher(settings, self.inventory)
        self.health_thread: threading.Thread | None = None  # joined at stop, before NVML shuts down
        self.server = registration.PluginServer(
            self.service,
            registration.RegistrationSettings(
                settings.device_plugin_dir, settings.endpoint, settings.resource_name
            ),
        )
        self.card_server = registration.PluginServer(
            server.DevicePluginService(
                self.state,
                self.card_allocator,
                self.metrics,
                after_allocate=poke,
                endpoint=server.WHOLE_CARDS,
            ),
            registration.RegistrationSettings(
                settings.device_plugin_dir, settings.card_endpoint(), settings.whole_card_resource
            ),
        )
        self.probes = lifecycle.Probes(
            settings.health_port,
            self.ready,
            self.metrics.registry,
            {"/usage": self.usage.route if self.usage else usage.off_route, "/metrics": self.metrics.scrape},
        )

    def _pod_resources(self, resource: str) -> reconcile.PodResourcesClient | None:
        """The kubelet's list of `resource`'s devices per container; None when that socket is off."""
        socket = self.settings.pod_resources_socket
        return reconcile.PodResourcesClient(socket, resource) if socket else None

    def _delivered(self, delivery: devicelist.Delivery) -> None:
        self.observe_delivery(delivery)
        self.publisher.poke()  # the first decision comes in start(), the publisher made by then

    def _on_pod_event(self, event: watch.WatchEvent) -> None:
        stores: list[podsource.PodStore | usagepods.PodSharesStore] = [self.pods, self.card_pods]
        if self.usage is not None:
            stores.append(self.usage.pods)
        for store in stores:
            if event.type == watch.RESYNC:
                store.resync(event.objects)
            elif event.object is not None:
                store.apply(event.type, event.object)

    def ready(self) -> bool:
        registered = self.server.registered.is_set() and self.card_server.registered.is_set()
        return registered and self.pods.synced.is_set()

    def start(self) -> Plugin:
        # /healthz answers 503 until the plugin is registered with its pods listed.
        lifecycle.claim(
            self.probes, (self.server.take_lock, self.card_server.take_lock), undo=self._close_early
        )
        self.specs.delivery()  # decided (and logged) before the first Allocate or Node publish
        self.pod_watch.start()
        self.labels.watch.start()
        self.publisher.start()
        self.health_thread = health.start(self.health, self.stop_event, self.state.set_unhealthy)
        # Serve only once the pods of this node are known, so the first Allocate finds them; the docs
        # promise exit 1 when the API cannot be reached, not a plugin that never matches a pod. The
        # node's labels first decide whether anything is advertised at all (its mode).
        if not (
            self.labels.watch.wait_synced(self.settings.api_timeout_s)
            and self.pod_watch.wait_synced(self.settings.api_timeout_s)
        ):
            self.stop()
            raise StartError(
                f"cannot list the pods of node {self.settings.node_name} from the API server within "
                f"{self.settings.api_timeout_s:g} s: {self.pod_watch.last_error or 'no answer'}"
            )
        if self.usage is not None:
            self.usage.start()
        if self.reconciler is not None:
            # After a plugin restart: the kubelet's list says which allocations were in flight.
            self.reconciler.run_once()
            self.reconciler.start()
        self.server.start()
        self.card_server.start()
        return self

    def _close_early(self) -> None:
        self.marker.stop()  # nothing else was started
        self.api.close()  # type: ignore[no-untyped-call]

    def stop(self) -> None:
        self.stop_event.set()
        self.probes.close()
        self.server.stop()
        self.card_server.stop()
        if self.reconciler is not None:
            self.reconciler.stop()
        if self.usage is not None:
            self.usage.stop()  # before the inventory closes NVML
        self.publisher.stop()
        self.pod_watch.stop()
        self.labels.watch.stop()
        self.marker.join(5)
        self.marker.stop()
        lifecycle.close(self.health_thread, self.inventory, self.api)


def _forget_gpus(settings: DevicePluginSettings) -> None:
    """No GPUs (any more): remove this node's GPU type labels before exiting, when the API is reachable."""
    try:
        api = lifecycle.connect(settings)
    except StartError:
        return
    try:
        node.forget_gpus(api, settings.node_name)
    finally:
        api.close()  # type: ignore[no-untyped-call]


def run(settings: DevicePluginSettings) -> int:
    what = f"device plugin for {settings.resource_name}"
    return lifecycle.run(lambda: Plugin(settings).start(), settings, log, what)
