"""The original gpushare as the migration test meets it: what AliyunContainerService's
gpushare-scheduler-extender writes when it binds a pod, how it counts a GPU, and its device plugin's
Allocate, each following the formats and order of their code (facts of the protocol, written here anew).

- The extender's bind: a strategic-merge patch of five annotations (decimal strings, assume time in Unix
  nanoseconds, `ASSIGNED` "false"), then a Binding of name and UID. `DEV` is the node's gpu-mem capacity
  over its gpu-count. The GPU is the best fit: least free memory that still fits, lowest index on ties.
- Its ledger: per GPU the sum of `ALIYUN_COM_GPU_MEM_POD` of the bound pods whose `ALIYUN_COM_GPU_MEM_IDX`
  reads as one integer, except Succeeded, Failed and deleted ones. A pod whose index does not read so is
  counted nowhere: what it would count after a rollback.
- The device plugin: socket `aliyungpushare.sock`, no GetPreferredAllocation (so the kubelet picks the
  device IDs), on each GPU one device `<UUID>-_-<j>` per GiB of the first GPU; it patches the Node's
  `aliyun.com/gpu-count`. Allocate lists the node's Pending pods, keeps those with an assume time and
  `ASSIGNED` "false", takes the oldest whose gpu-mem total equals the devices asked, answers its index in
  the env and patches `ASSIGNED` "true" with a fresh assume time. Nothing found: an env naming no GPU (its
  fault 7), never an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import kubernetes.client

from webhook.core.wire import resources
from webhook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from webhook.kube import pods, rest

Obj = dict[str, Any]
ENDPOINT = "aliyungpushare.sock"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_ENDED = ("Succeeded", "Failed")


def gpu_mem(pod: Mapping[str, Any]) -> int:
    """The pod's gpu-mem: the sum of its containers' limits (the original reads limits only)."""
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get(resources.GPU_MEMORY, 0))
        for c in pod["spec"].get("containers") or []
    )


def ledger(stored: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], int]:
    """(node, GPU index) -> memory, counted by the original extender's rule from stored pods."""
    used: dict[tuple[str, int], int] = {}
    for pod in stored:
        meta, node = pod["metadata"], pod["spec"].get("nodeName")
        if not node or meta.get("deletionTimestamp") or pod.get("status", {}).get("phase") in _ENDED:
            continue
        notes = meta.get("annotations") or {}
        index, total = notes.get(resources.ANN_MEM_IDX, ""), notes.get(resources.ANN_MEM_POD, "0")
        if index.isdigit() and total.isdigit():
            used[(node, int(index))] = used.get((node, int(index)), 0) + int(total)
    return used


def best_fit(used: Mapping[tuple[str, int], int], node: str, sizes: Sequence[int], want: int) -> int:
    """The GPU the original extender picks on `node` (GPU i holds `sizes[i]`): least free that fits."""
    fits = [(size - used.get((node, i), 0), i) for i, size in enumerate(sizes)]
    return min((f, i) for f, i in fits if f >= want)[1]


def bind(api: kubernetes.client.ApiClient, pod: Obj, node: str, gpu: int, device_memory: int) -> None:
    """Place `pod` on GPU `gpu` of `node` as the original extender's bind does: annotations, then Binding."""
    meta = pod["metadata"]
    notes = {
        resources.ANN_MEM_IDX: str(gpu),
        resources.ANN_MEM_DEV: str(device_memory),
        resources.ANN_MEM_POD: str(gpu_mem(pod)),
        resources.ANN_MEM_ASSIGNED: "false",
        resources.ANN_MEM_ASSUME_TIME: str(time.time_ns()),
    }
    _annotate(api, meta, notes)
    pods.bind_pod(api, meta["namespace"], meta["name"], meta["uid"], node)


def _annotate(api: kubernetes.client.ApiClient, meta: Mapping[str, Any], notes: Mapping[str, str]) -> None:
    """Both of the original's writes to a pod: a strategic-merge patch of annotations."""
    path = rest.path("pods", meta["name"], meta["namespace"])
    body = {"metadata": {"annotations": dict(notes)}}
    rest.request(api, "PATCH", path, body=body, content_type=STRATEGIC_MERGE_PATCH)


class DevicePlugin(api_pb2_grpc.DevicePluginServicer):
    """The original device plugin of `node`, GPUs of `sizes` GiB with UUIDs `uuids`, in the kubelet's
    device-plugin folder `plugin_dir`; it reads and writes the API with `api`."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        node: str,
        plugin_dir: Path,
        uuids: Sequence[str],
        sizes: Sequence[int],
    ) -> None:
        self.api, self.node, self.plugin_dir = api, node, plugin_dir
        self.uuids, self.sizes = tuple(uuids), tuple(sizes)
        self.answered: list[tuple[str, int]] = []  # (pod key, GPU index) per Allocate that found its pod
        self._stop = threading.Event()
        self._server: grpc.Server | None = None

    def start(self) -> DevicePlugin:
        self._stop.clear()
        count = len(self.uuids)
        pods.patch_node_status(
            self.api,
            self.node,
            {"capacity": {resources.GPU_COUNT: str(count)}, "allocatable": {resources.GPU_COUNT: str(count)}},
        )
        socket = self.plugin_dir / ENDPOINT
        socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{socket}")
        server.start()
        self._server = server
        request = api_pb2.RegisterRequest(
            version="v1beta1", endpoint=ENDPOINT, resource_name=resources.GPU_MEMORY
        )
        with grpc.insecure_channel(f"unix://{self.plugin_dir / 'kubelet.sock'}") as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=15)
        return self

    def stop(self) -> None:
        """The DaemonSet's pod deleted: the socket goes, and the kubelet sees the plugin gone."""
        self._stop.set()
        if self._server is not None:
            self._server.stop(1).wait(6)
        (self.plugin_dir / ENDPOINT).unlink(missing_ok=True)

    def GetDevicePluginOptions(  # noqa: N802 (the kubelet's method name)
        self, request: Any, context: Any
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions()

    def ListAndWatch(  # noqa: N802 (the kubelet's method name)
        self, request: Any, context: Any
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        yield api_pb2.ListAndWatchResponse(
            devices=[
                api_pb2.Device(ID=f"{uuid}-_-{j}", health="Healthy")
                for uuid in self.uuids
                for j in range(self.sizes[0])  # every GPU as large as the first (its fault 2)
            ]
        )
        while not self._stop.wait(0.2) and context.is_active():
            pass

    def PreStartContainer(  # noqa: N802 (the kubelet's method name)
        self, request: Any, context: Any
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()

    def Allocate(  # noqa: N802 (the kubelet's method name)
        self, request: Any, context: Any
    ) -> api_pb2.AllocateResponse:
        asked = [len(c.devices_ids) for c in request.container_requests]
        pod = self._assumed(sum(asked))
        index = int(pod["metadata"]["annotations"][resources.ANN_MEM_IDX]) if pod else -1
        envs = [
            {
                resources.ENV_VISIBLE_DEVICES: str(index) if pod else f"no-gpu-has-{sum(asked)}GiB-to-run",
                resources.ENV_MEM_IDX: str(index),
                resources.ENV_MEM_POD: str(sum(asked)),
                resources.ENV_MEM_CONTAINER: str(n),
                resources.ENV_MEM_DEV: str(self.sizes[0]),  # the first GPU's memory, for every GPU
            }
            for n in asked
        ]
        if pod is not None:
            meta = pod["metadata"]
            notes = {resources.ANN_MEM_ASSIGNED: "true", resources.ANN_MEM_ASSUME_TIME: str(time.time_ns())}
            _annotate(self.api, meta, notes)
            self.answered.append((f"{meta['namespace']}/{meta['name']}", index))
        return api_pb2.AllocateResponse(
            container_responses=[api_pb2.ContainerAllocateResponse(envs=env) for env in envs]
        )

    def _assumed(self, total: int) -> Obj | None:
        """The oldest assumed, unassigned Pending pod of this node asking `total`."""
        query = {"fieldSelector": f"spec.nodeName={self.node},status.phase=Pending"}
        waiting = [
            p
            for p in rest.list_all(self.api, rest.path("pods"), query=query)
            if gpu_mem(p) > 0
            and resources.ANN_MEM_ASSUME_TIME in (notes := p["metadata"].get("annotations") or {})
            and notes.get(resources.ANN_MEM_ASSIGNED) == "false"
        ]
        waiting.sort(key=lambda p: int(p["metadata"]["annotations"][resources.ANN_MEM_ASSUME_TIME]))
        return next((p for p in waiting if gpu_mem(p) == total), None)
