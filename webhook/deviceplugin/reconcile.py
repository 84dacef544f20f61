"""The kubelet's PodResources List (which pod and container got which device IDs) and the loop that
reconciles with it, for gpu-mem and whole cards alike: annotations corrected where a container got
another GPU than its pod's placement, the allocation books rebuilt after a plugin restart, pods
finished before a restart marked assigned.

Optional: without the socket (not mounted, old kubelet) the plugin matches by its own book only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc
import kubernetes.client

from webhook.core.node import matching
from webhook.deviceplugin import server
from webhook.deviceplugin.podresources.v1 import api_pb2, api_pb2_grpc
from webhook.kube import errors, pods, rounds

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")


class PodResourcesClient:
    """`view()` lists the kubelet's pods with our resource's device IDs per container; None when the
    socket is missing or the call fails (logged once per outage)."""

    def __init__(self, socket: Path, resource_name: str, timeout_s: float = 1.0) -> None:
        self.socket = socket
        self.resource_name = resource_name
        self.timeout_s = timeout_s
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._lock = threading.Lock()
        self._failing = False

    def view(self) -> matching.KubeletView | None:
        if not self.socket.exists():
            self._failed(f"{self.socket} does not exist")
            return None
        with self._lock:
            if self._stub is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket}")
                self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]
            stub = self._stub
        try:
            reply = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout_s)
        except grpc.RpcError as err:
            self._failed(str(err.code()) if isinstance(err, grpc.Call) else str(err))
            return None
        if self._failing:
            log.info("the kubelet PodResources API answers again on %s", self.socket)
            self._failing = False
        listed: dict[str, dict[str, tuple[str, ...]]] = {}
        for pod in reply.pod_resources:
            listed[f"{pod.namespace}/{pod.name}"] = {
                c.name: tuple(
                    i for d in c.devices if d.resource_name == self.resource_name for i in d.device_ids
                )
                for c in pod.containers
            }
        return matching.KubeletView(listed)

    def _failed(self, why: str) -> None:
        if not self._failing:
            log.warning(
                "cannot list pod resources from the kubelet (%s): matching Allocate by arrival order only",
                why,
            )
            self._failing = True

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = None


class BookKeeper(Protocol):
    """An allocator whose book `Reconciler` syncs: the gpu-mem one or the whole-card one."""

    resource_name: str

    def sync(self, kubelet: matching.KubeletView) -> list[matching.Correction]: ...


@dataclass(frozen=True, slots=True)
class Source:
    """One resource to reconcile: its allocator and the kubelet's list of that resource's devices."""

    allocator: BookKeeper
    client: PodResourcesClient


class Reconciler:
    """Runs each source's `sync` on the kubelet's list shortly after Allocates (`poke`) and every
    `period_s`, and writes the corrected annotations (retried next round when the API fails)."""

    def __init__(
        self,
        sources: Sequence[Source],
        api: kubernetes.client.ApiClient,
        observer: server.Observer | None = None,
        *,
        period_s: float = 30.0,
        delay_s: float = 0.5,
    ) -> None:
        self.sources = tuple(sources)
        self.api = api
        self.observer = observer or server.Observer()
        self.period_s = period_s
        self.delay_s = delay_s
        self.corrections = 0  # containers whose annotations were corrected, all resources
        self.rounds = 0
        self.round_done = threading.Condition()
        self._round = threading.Lock()  # the loop and a caller (start, tests) never run at once
        self._written: dict[str, Mapping[str, str]] = {}  # pod uid -> the correction last written
        # After a poke, a round waits for `delay_s` without Allocates (at most 5 s): the List and the sync
        # would take the GIL from an admission burst, which needs no reconciling while it goes well.
        self._rounds = rounds.Rounds("pod-resources", self.run_once, period_s=period_s, quiet_s=delay_s)

    def start(self) -> Reconciler:
        self._rounds.start()
        return self

    def stop(self) -> None:
        self._rounds.stop()
        for source in self.sources:
            source.client.close()

    def poke(self) -> None:
        self._rounds.poke()

    def run_once(self) -> bool:
        """One round; False when the kubelet could not be asked (for any resource)."""
        with self._round:
            asked = [self._sync(source) for source in self.sources]
        with self.round_done:
            self.rounds += 1
            self.round_done.notify_all()
        return all(asked)

    def _sync(self, source: Source) -> bool:
        view = source.client.view()
        if view is None:
            return False
        resource = source.allocator.resource_name
        for fix in source.allocator.sync(view):
            if self._written.get(fix.pod.uid) == fix.annotations:
                continue  # written already; our watch has not shown it yet
            log.warning(
                "pod %s: container(s) %s got other GPUs (%s) than its annotations named; correcting to %s",
                fix.pod.key,
                ", ".join(fix.containers),
                resource,
                fix.annotations.get("ALIYUN_COM_GPU_MEM_IDX"),
            )
            try:
                pods.patch_pod_annotations(
                    self.api, fix.pod.namespace, fix.pod.name, dict(fix.annotations), uid=fix.pod.uid
                )
            except errors.ApiError as err:
                log.warning("correcting the annotations of %s failed: %s; retrying", fix.pod.key, err)
                continue
            self._written[fix.pod.uid] = fix.annotations
            self.corrections += len(fix.containers)
            self.observer.corrected(resource, len(fix.containers))
        return True
