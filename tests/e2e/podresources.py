"""What the kubelet's PodResources API says each container got: the judge of which devices a real kubelet
gave a pod, read from its socket."""

from __future__ import annotations

from pathlib import Path

import grpc

from webhook.deviceplugin.podresources.v1 import api_pb2, api_pb2_grpc


def devices(socket: Path, resource: str) -> dict[tuple[str, str], list[str]]:
    """(pod, container) -> device IDs of `resource`, as the kubelet's PodResources List says, sorted:
    the kubelet keeps them as a set, and its order changes when it reloads its checkpoint on restart."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        reply = stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
    found: dict[tuple[str, str], list[str]] = {}
    for pod in reply.pod_resources:
        for container in pod.containers:
            for given in container.devices:  # one entry per device (or NUMA group) given
                if given.resource_name == resource:
                    found.setdefault((pod.name, container.name), []).extend(given.device_ids)
    return {key: sorted(ids) for key, ids in found.items()}
