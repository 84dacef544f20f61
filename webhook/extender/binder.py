"""Bind: choose the pod's GPU(s) under the node's lock, count them at once, then create the Binding.

The placement annotations travel in the Binding itself (`metadata.annotations`, which the API server
merges into the pod together with spec.nodeName), so a pod is never left half-placed: a failed Binding
writes nothing, and the memory it had reserved is forgotten. The Binding carries the pod UID as a
precondition, so a pod deleted and re-created under the same name is never bound by mistake.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from webhook.core import allocator, demand, resources
from webhook.core import annotations as ann
from webhook.extender import cache as cache_mod
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs
from webhook.kube import errors, pods

log = logging.getLogger(__name__)


class BindingApi(Protocol):
    """The two API calls the binder makes, raising `webhook.kube.errors.ApiError`; `KubeBindingApi` is
    the real one."""

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None: ...

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


class KubeBindingApi:
    """BindingApi over `webhook.kube.pods`; `api` is the ApiClient from `webhook.kube.client.connect`
    (Any: this shell never names the client library's types)."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        pods.bind_pod(self.api, namespace, name, uid, node, annotations)

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return pods.get_pod(self.api, namespace, name)
        except errors.NotFoundError:
            return None


class Binder:
    def __init__(
        self,
        cache: cache_mod.Cache,
        api: BindingApi,
        settings: ExtenderSettings,
        clock_ns: Callable[[], int] = time.time_ns,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cache = cache
        self.api = api
        self.settings = settings
        self._clock_ns = clock_ns
        self._sleep = sleep
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _node_lock(self, node: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(node)
            if lock is None:
                lock = self._locks[node] = threading.Lock()
            return lock

    def bind(self, args: BindingArgs) -> str:
        """Bind the pod; "" on success, else the reason (kube-scheduler puts it in the pod's events)."""
        try:
            return self._bind(args)
        except errors.ApiError as err:
            return f"binding pod {args.key} to {args.node}: {err.message}"

    def _bind(self, args: BindingArgs) -> str:
        record = self.cache.pod(args.key)
        if record is None or (args.pod_uid and record.uid != args.pod_uid):
            # Not yet seen by the watch (or an older pod of the same name): one GET, never a list.
            pod = self.api.get_pod(args.pod_namespace, args.pod_name)
            if pod is None:
                return f"pod {args.key} not found"
            record = cache_mod.record_of(pod, self.cache.names)
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            if args.pod_uid and uid != args.pod_uid:
                return f"pod {args.key} has UID {uid}, not {args.pod_uid}: it was re-created"
            if record is None:  # asks for no GPU memory: a plain Binding
                return self._send(args, uid, {})
        uid = args.pod_uid or record.uid
        if record.demand is None:
            return f"pod {args.key}: {record.demand_error}"
        if record.node:
            return "" if record.node == args.node else f"pod {args.key} is already on node {record.node}"
        if not record.demand.asks():
            return self._send(args, uid, {})
        chosen = self._reserve(args, uid, record.demand, record.policy)
        if isinstance(chosen, str):
            return chosen
        error = self._send(args, uid, ann.encode(chosen))
        if error:
            self.cache.forget(args.key, uid)
        return error

    def _reserve(
        self, args: BindingArgs, uid: str, asked: demand.GpuMemoryDemand, policy_value: str
    ) -> ann.Placement | str:
        policy = allocator.policy_of(
            {resources.PLACEMENT_POLICY_ANNOTATION: policy_value}, self.settings.default_policy
        )
        with self._node_lock(args.node), self.cache.locked():
            ledger = self.cache.ledger(args.node)
            if ledger is None:
                return f"node {args.node} is not known to the gpushare extender"
            result = allocator.fit(asked, ledger.gpus(), policy, ledger.unit)
            if isinstance(result, allocator.NoFit):
                return f"node {args.node}: {result.reason}"
            now = self._clock_ns()
            self.cache.expire_assumptions(now)
            self.cache.assume(args.key, uid, args.node, result.allocation, now)
        return ann.Placement(result.allocation, device_memory=result.device_memory, assume_time_ns=now)

    def _send(self, args: BindingArgs, uid: str, wanted: Mapping[str, str]) -> str:
        """Create the Binding; retry on 409 and 5xx unless the pod shows the retry is pointless or done."""
        last = ""
        for attempt in range(max(1, self.settings.bind_attempts)):
            if attempt:
                self._sleep(self.settings.bind_backoff_s * 2 ** (attempt - 1))
            try:
                self.api.bind(args.pod_namespace, args.pod_name, uid, args.node, wanted)
                return ""
            except errors.ApiError as err:
                last = f"binding pod {args.key} to {args.node}: {err.message}"
                if not (err.retryable or isinstance(err, errors.ConflictError)):
                    return last
            verdict = self._check_after_failure(args, uid, wanted)
            if verdict is not None:
                return verdict
            log.info(
                "retrying binding", extra={"fields": {"pod": args.key, "node": args.node, "error": last}}
            )
        return last

    def _check_after_failure(self, args: BindingArgs, uid: str, wanted: Mapping[str, str]) -> str | None:
        """None: retry. "": the Binding did succeed (its reply was lost). Else why it never will."""
        try:
            pod = self.api.get_pod(args.pod_namespace, args.pod_name)
        except errors.ApiError:
            return None
        if pod is None:
            return f"pod {args.key} was deleted"
        meta = pod.get("metadata") or {}
        if uid and meta.get("uid") != uid:
            return f"pod {args.key} was re-created (UID {meta.get('uid')}, not {uid})"
        if meta.get("deletionTimestamp"):
            return f"pod {args.key} is being deleted"
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            current = meta.get("annotations") or {}
            if node == args.node and all(current.get(k) == v for k, v in wanted.items()):
                return ""
            return f"pod {args.key} is already assigned to node {node}"
        return None
