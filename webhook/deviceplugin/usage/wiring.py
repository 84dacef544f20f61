"""The usage parts of the plugin, built from its settings: the GPU usage source, the cgroup reader, the
pod shares fed by the pod watch, the over-share tracker and actions, the poller; and the `/usage` route."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import kubernetes.client

from webhook.core.usage import overshare, podshares, usagereport
from webhook.core.wire import resources
from webhook.deviceplugin.metrics import Metrics
from webhook.deviceplugin.settings import DevicePluginSettings
from webhook.deviceplugin.state import DeviceState
from webhook.deviceplugin.usage.overshareactions import OverShareActions
from webhook.deviceplugin.usage.pods import PodSharesStore
from webhook.deviceplugin.usage.poller import UsagePoller
from webhook.gpus import inventory
from webhook.gpus.cgroupreader import CgroupReader
from webhook.gpus.usage import source as usagesource
from webhook.serving import probeserver

JSON = "application/json"


@dataclass
class Usage:
    pods: PodSharesStore
    poller: UsagePoller
    actions: OverShareActions

    def start(self) -> None:
        self.actions.start()
        self.poller.start()

    def stop(self) -> None:
        self.poller.stop()
        self.actions.stop()

    def route(self) -> probeserver.Reply:
        """`GET /usage`: the latest report, 503 before the first poll."""
        report = self.poller.latest
        if report is None:
            return _failure(503, "GPU usage has not been sampled yet; try again in a few seconds")
        return 200, JSON, usagereport.dumps(report)


def off_route() -> probeserver.Reply:
    """`GET /usage` on a plugin whose usage polling is off."""
    return _failure(404, "GPU usage is off on this node's device plugin (--usage-interval 0)")


def _failure(code: int, message: str) -> probeserver.Reply:
    # Shaped as a v1 Status: through the API server's pod proxy, clients read its message as the API's own.
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": message}
    return code, JSON, json.dumps(body).encode()


def build(
    settings: DevicePluginSettings,
    *,
    inv: inventory.GpuInventory,
    state: DeviceState,
    api: kubernetes.client.ApiClient,
    labels: Callable[[], Mapping[str, object]],
    metrics: Metrics,
) -> Usage:
    unit_bytes = state.granularity.mib_per_device * podshares.MIB
    pods = PodSharesStore(
        unit_bytes,
        {g.index: g.memory_mib * podshares.MIB for g in state.gpus},
        resources.GpuResourceNames(whole_card=settings.whole_card_resource),
    )
    actions = OverShareActions(api, settings.node_name, labels, metrics, evict=settings.overshare_evict)
    poller = UsagePoller(
        source=usagesource.source(inv, settings.fake_processes),
        reader=CgroupReader(settings.proc_root),
        pods=pods,
        state=state,
        node_name=settings.node_name,
        tracker=overshare.OverShareTracker(settings.overshare_grace_s, settings.overshare_event_interval_s),
        actions=actions,
        observer=metrics,
        interval_s=settings.usage_interval_s,
    )
    return Usage(pods, poller, actions)
