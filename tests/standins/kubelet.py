"""A kubelet STAND-IN (emulator) for device-plugin tests: the real v1beta1 gRPC over unix sockets.

Not a kubelet: only its device-manager side. It serves `Registration` on `<dir>/kubelet.sock`; inside
Register it checks version and resource name, dials the plugin back and calls GetDevicePluginOptions
before answering (as current kubelets do), then reads ListAndWatch in the background with the
kubelet's 4 MB receive limit. `admit(pod)` adds the pod to its pod list, then per GPU container (init
containers first) picks free healthy device IDs, asking GetPreferredAllocation first when the plugin
advertises it (taking the advice when it is valid, as the device manager's devicesToAllocate does), and
calls Allocate. With `pod_resources` it serves PodResources v1 List on that socket: admitted pods and
the one being admitted, with the device IDs of each container allocated so far. `restart()` deletes the
socket files and recreates kubelet.sock. Devices in use survive restarts, like the kubelet's checkpoint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from webhook.core.specs import demand
from webhook.core.wire import resources
from webhook.deviceplugin.podresources.v1 import api_pb2 as pr_pb2
from webhook.deviceplugin.podresources.v1 import api_pb2_grpc as pr_grpc
from webhook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

KUBELET_MAX_MESSAGE = 4 * 1024 * 1024  # grpc-go's default receive limit, which the kubelet keeps


class _Registration(api_pb2_grpc.RegistrationServicer):
    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet

    def Register(  # noqa: N802
        self, request: api_pb2.RegisterRequest, context: grpc.ServicerContext
    ) -> api_pb2.Empty:
        k = self.kubelet
        if request.version != "v1beta1":
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f'requested API version "{request.version}" is not supported by kubelet. '
                'Supported version is ["v1beta1"]',
            )
        target = k.kubelets().get(request.resource_name)
        if target is None:
            context.abort(grpc.StatusCode.UNKNOWN, f'the ResourceName "{request.resource_name}" is invalid')
        channel = grpc.insecure_channel(
            f"unix://{k.plugin_dir / request.endpoint}",
            options=[("grpc.max_receive_message_length", KUBELET_MAX_MESSAGE)],
        )
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
            options = api_pb2_grpc.DevicePluginStub(channel).GetDevicePluginOptions(
                api_pb2.Empty(), timeout=10
            )
        except (grpc.FutureTimeoutError, grpc.RpcError) as err:
            channel.close()
            context.abort(grpc.StatusCode.UNKNOWN, f"failed to dial device plugin: {err}")
        target._connected(request, options, channel)
        return api_pb2.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet

    def List(  # noqa: N802
        self, request: pr_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr_pb2.ListPodResourcesResponse:
        k = self.kubelet
        with k._lock:
            k.lists += 1
            kubelets = list(k.kubelets().values())
            active = {uid: pod for each in kubelets for uid, pod in each.active.items()}
            listed = [
                pr_pb2.PodResources(
                    name=pod["metadata"]["name"],
                    namespace=pod["metadata"].get("namespace", "default"),
                    containers=[
                        pr_pb2.ContainerResources(
                            name=c["name"],
                            devices=[
                                pr_pb2.ContainerDevices(resource_name=each.resource_name, device_ids=ids)
                                for each in kubelets
                                for ids in [each.assigned.get(uid, {}).get(c["name"], [])]
                                if ids
                            ],
                        )
                        # The kubelet lists app containers and restartable (sidecar) init containers.
                        for c in [
                            *(i for i in pod["spec"].get("initContainers") or [] if i.get("restartPolicy")),
                            *pod["spec"]["containers"],
                        ]
                    ],
                )
                for uid, pod in active.items()
            ]
        return pr_pb2.ListPodResourcesResponse(pod_resources=listed)


class Kubelet:
    def __init__(
        self,
        plugin_dir: Path,
        resource_name: str = resources.GPU_MEMORY,
        pod_resources: Path | None = None,
        also: tuple[str, ...] = (),
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resource_name = resource_name
        self.pod_resources = pod_resources
        self.active: dict[str, Mapping[str, Any]] = {}  # the pod manager: uid -> pod, admission order
        self.assigned: dict[str, dict[str, list[str]]] = {}  # uid -> container -> device IDs
        self.preferred_calls = 0
        self.lists = 0
        self._pr_server: grpc.Server | None = None
        self.registrations: list[api_pb2.RegisterRequest] = []
        self.options: api_pb2.DevicePluginOptions | None = None
        self.devices: dict[str, str] = {}  # ID -> health, from the last ListAndWatch message
        self.messages = 0
        self.stream_errors: list[str] = []
        self.in_use: dict[str, set[str]] = {}  # pod uid -> device IDs (the "checkpoint")
        self.responses: list[api_pb2.ContainerAllocateResponse] = []  # every admitted container's answer
        self._lock = threading.Condition()
        self._server: grpc.Server | None = None
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.DevicePluginStub | None = None
        # More resources (`also`), one endpoint each as in the device manager: the same kubelet.sock,
        # pod list and lock; `resource(name)` reads or admits for one of them.
        self._others = {name: Kubelet(plugin_dir, name) for name in also}
        for other in self._others.values():
            other._lock = self._lock

    def kubelets(self) -> dict[str, Kubelet]:
        return {self.resource_name: self, **self._others}

    def resource(self, name: str) -> Kubelet:
        """The device-manager side of resource `name` (registrations, devices, admit)."""
        return self.kubelets()[name]

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> Kubelet:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), srv)
        srv.add_insecure_port(f"unix://{self.plugin_dir / 'kubelet.sock'}")
        srv.start()
        self._server = srv
        if self.pod_resources is not None:
            self.serve_pod_resources(self.pod_resources)
        return self

    def serve_pod_resources(self, path: Path) -> None:
        """Serve PodResources List on `path` (also later, for a plugin that started without it)."""
        if self._pr_server is not None:
            return
        self.pod_resources = path
        path.parent.mkdir(parents=True, exist_ok=True)
        pr = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), pr)
        pr.add_insecure_port(f"unix://{path}")
        pr.start()
        self._pr_server = pr

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        if self._pr_server is not None:
            self._pr_server.stop(0).wait(5)
            self._pr_server = None
        for each in self.kubelets().values():
            each._disconnect()

    def restart(self) -> None:
        """What a kubelet restart looks like to a plugin: every socket file deleted, kubelet.sock anew."""
        self.stop()
        for path in self.plugin_dir.glob("*.sock"):
            path.unlink(missing_ok=True)
        with self._lock:
            for each in self.kubelets().values():
                each.devices = {}
        self.start()

    def _disconnect(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            channel.close()

    def _connected(
        self, request: api_pb2.RegisterRequest, options: api_pb2.DevicePluginOptions, channel: grpc.Channel
    ) -> None:
        self._disconnect()  # a second registration replaces the earlier endpoint
        with self._lock:
            self.registrations.append(request)
            self.options = options
            self._channel, self._stub = channel, api_pb2_grpc.DevicePluginStub(channel)
            self._lock.notify_all()
        threading.Thread(target=self._watch, args=(self._stub,), daemon=True).start()

    def _watch(self, stub: api_pb2_grpc.DevicePluginStub) -> None:
        try:
            for message in stub.ListAndWatch(api_pb2.Empty()):
                with self._lock:
                    self.devices = {d.ID: d.health for d in message.devices}
                    self.messages += 1
                    self._lock.notify_all()
        except ValueError:  # the channel was closed under us: a restart or stop
            return
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                with self._lock:
                    self.stream_errors.append(f"{err.code().name}: {err.details()}")
                    self._lock.notify_all()

    # observation -------------------------------------------------------------------------------
    def wait(self, predicate: Callable[[Kubelet], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"kubelet stand-in: condition not met in {timeout}s (registrations="
                        f"{len(self.registrations)}, devices={len(self.devices)}, "
                        f"errors={self.stream_errors})"
                    )
                self._lock.wait(min(left, 0.1))

    def healthy(self) -> list[str]:
        with self._lock:
            return sorted(i for i, h in self.devices.items() if h == "Healthy")

    # allocation --------------------------------------------------------------------------------
    def allocate_ids(self, ids: list[str], timeout: float = 10.0) -> api_pb2.AllocateResponse:
        assert self._stub is not None, "no plugin registered"
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)]
        )
        response: api_pb2.AllocateResponse = self._stub.Allocate(request, timeout=timeout)
        return response

    def free(self) -> list[str]:
        with self._lock:
            used = set().union(*self.in_use.values()) if self.in_use else set()
            return [i for i, h in sorted(self.devices.items()) if h == "Healthy" and i not in used]

    def choose(self, count: int) -> list[str]:
        """Free healthy devices; the plugin's preference first when it offers one (devicesToAllocate)."""
        free = self.free()
        if len(free) < count:
            raise LookupError(
                f"requested number of devices unavailable. Requested: {count}, Available: {len(free)}"
            )
        if self.options is not None and self.options.get_preferred_allocation_available:
            preferred = self.prefer(free, count)
            if len(set(preferred) & set(free)) == count == len(preferred):
                return preferred
        return free[:count]

    def prefer(self, available: list[str], count: int) -> list[str]:
        assert self._stub is not None, "no plugin registered"
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=[], allocation_size=count
                )
            ]
        )
        response = self._stub.GetPreferredAllocation(request, timeout=10)
        with self._lock:
            self.preferred_calls += 1
        return list(response.container_responses[0].deviceIDs)

    def admit(self, pod: Mapping[str, Any]) -> list[dict[str, str]]:
        """Allocate for each GPU container of the pod, in the kubelet's order; the envs, one per call.

        On an error the pod is rejected (its devices freed) and the grpc.RpcError propagates.
        """
        uid = str(pod["metadata"]["uid"])
        spec = pod.get("spec") or {}
        envs = []
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        with self._lock:
            self.active[uid] = pod  # kubelet.go: podManager.AddPod before canAdmitPod
        try:
            for container in containers:
                count = demand.container_units(container, self.resource_name)
                if count <= 0:
                    continue
                ids = self.choose(count)
                response = self.allocate_ids(ids)
                with self._lock:
                    self.in_use.setdefault(uid, set()).update(ids)
                    self.assigned.setdefault(uid, {})[container["name"]] = list(ids)
                    self.responses.append(response.container_responses[0])
                envs.append(dict(response.container_responses[0].envs))
        except Exception:
            self.release(uid)
            raise
        return envs

    def release(self, uid: str) -> None:
        with self._lock:
            self.in_use.pop(uid, None)
            self.assigned.pop(uid, None)
            self.active.pop(uid, None)
