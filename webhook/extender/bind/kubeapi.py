"""The binder's two API calls against the real API server: `KubeBindingApi` on a thread,
`AsyncKubeBindingApi` on the event loop (calls.BindingApi, calls.AsyncBindingApi).

`api` is the ApiClient from `webhook.kube.client.connect` (Any: this shell never names the client
library's types). Bindings, one per pod, go over the keep-alive connections of `webhook.kube.direct` (or
`asyncdirect`) when the configuration allows; the rare GET after a failure goes the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.kube import asyncdirect, direct, errors, pods, rest


class KubeBindingApi:
    def __init__(self, api: Any) -> None:
        self.api = api
        self.direct = direct.DirectClient.of(api)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        if self.direct is None:
            pods.bind_pod(self.api, namespace, name, uid, node, annotations)
            return
        path, body = pods.binding(namespace, name, uid, node, annotations)
        pods.check_binding(self.direct.request("POST", path, body))

    def close(self) -> None:
        if self.direct is not None:
            self.direct.close()

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return pods.get_pod(self.api, namespace, name)
        except errors.NotFoundError:
            return None


class AsyncKubeBindingApi:
    """Over an `asyncdirect.AsyncDirectClient` (there is none where the configuration needs urllib3, a
    proxy: binds then go on threads)."""

    def __init__(self, client: asyncdirect.AsyncDirectClient) -> None:
        self.client = client

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        path, body = pods.binding(namespace, name, uid, node, annotations)
        pods.check_binding(await self.client.request("POST", path, body))

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            pod: Mapping[str, Any] = await self.client.request("GET", rest.path("pods", name, namespace))
        except errors.NotFoundError:
            return None
        return pod

    def close(self) -> None:
        self.client.close()
