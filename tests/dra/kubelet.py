"""A stand-in for the kubelet's side of DRA, over the real gRPC on unix sockets: its plugin watcher
(GetInfo, NotifyRegistrationStatus on the registration socket) and its DRA manager (NodePrepareResources,
NodeUnprepareResources, v1 or v1beta1, on the endpoint GetInfo named)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from webhook.dra.pluginregistration.v1 import api_pb2 as reg_pb2
from webhook.dra.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from webhook.dra.v1 import api_pb2 as v1_pb2
from webhook.dra.v1 import api_pb2_grpc as v1_grpc
from webhook.dra.v1beta1 import api_pb2 as v1beta1_pb2
from webhook.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc

Claim = tuple[str, str, str]  # uid, namespace, name
VERSIONS: dict[str, tuple[Any, Any]] = {"v1": (v1_pb2, v1_grpc), "v1beta1": (v1beta1_pb2, v1beta1_grpc)}


def register(socket: Path, accept: bool = True, error: str = "") -> reg_pb2.PluginInfo:
    """What the plugin watcher does with a new socket in plugins_registry."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        info: reg_pb2.PluginInfo = stub.GetInfo(reg_pb2.InfoRequest(), timeout=5)
        stub.NotifyRegistrationStatus(
            reg_pb2.RegistrationStatus(plugin_registered=accept, error=error), timeout=5
        )
        return info


def prepare(endpoint: Path | str, claims: list[Claim], version: str = "v1") -> Any:
    pb, stubs = VERSIONS[version]
    with grpc.insecure_channel(f"unix://{endpoint}") as channel:
        request = pb.NodePrepareResourcesRequest(claims=[_claim(pb, c) for c in claims])
        return stubs.DRAPluginStub(channel).NodePrepareResources(request, timeout=10)


def unprepare(endpoint: Path | str, claims: list[Claim], version: str = "v1") -> Any:
    pb, stubs = VERSIONS[version]
    with grpc.insecure_channel(f"unix://{endpoint}") as channel:
        request = pb.NodeUnprepareResourcesRequest(claims=[_claim(pb, c) for c in claims])
        return stubs.DRAPluginStub(channel).NodeUnprepareResources(request, timeout=10)


def _claim(pb: Any, claim: Claim) -> Any:
    uid, namespace, name = claim
    return pb.Claim(uid=uid, namespace=namespace, name=name)
