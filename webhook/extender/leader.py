"""Leader election on a coordination.k8s.io/v1 Lease: only the holder binds; every replica filters.

Private to the extender until `webhook.kube.leader` exists. The lease is taken when absent, expired
(renewTime + leaseDurationSeconds in the past) or already ours; updates carry the resourceVersion, so of
two replicas racing for it the API server lets one win (the other gets 409 and stays a follower).
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from webhook.extender.settings import LeaderSettings

log = logging.getLogger(__name__)
_FMT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaseElector:
    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        settings: LeaderSettings,
        clock: Callable[[], datetime.datetime] = _now,
    ) -> None:
        self.settings = settings
        self.coordination: Any = kubernetes.client.CoordinationV1Api(api)
        self._clock = clock
        self._leader = threading.Event()
        self._holder = ""
        self._renewed = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def is_leader(self) -> bool:
        # A leader that could not renew within the deadline stops binding before others may take over.
        if self._leader.is_set() and time.monotonic() - self._renewed > self.settings.renew_deadline_s:
            self._leader.clear()
        return self._leader.is_set()

    def holder(self) -> str:
        return self._holder

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._leader.is_set():
            self._release()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.try_acquire_or_renew()
            except (ApiException, OSError, ValueError) as err:
                log.warning("lease update failed", extra={"fields": {"error": str(err)}})
            self._stop.wait(self.settings.retry_period_s)

    def try_acquire_or_renew(self) -> bool:
        s = self.settings
        now = self._clock()
        spec: dict[str, Any] = {
            "holderIdentity": s.identity,
            "leaseDurationSeconds": max(1, round(s.lease_duration_s)),
            "renewTime": now.strftime(_FMT),
        }
        try:
            lease = self.coordination.read_namespaced_lease(s.lease_name, s.lease_namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            spec["acquireTime"] = spec["renewTime"]
            body = {"metadata": {"name": s.lease_name, "namespace": s.lease_namespace}, "spec": spec}
            return self._took(lambda: self.coordination.create_namespaced_lease(s.lease_namespace, body))
        current = lease.spec
        self._holder = current.holder_identity or ""
        renew = current.renew_time or current.acquire_time
        duration = current.lease_duration_seconds or s.lease_duration_s
        expired = renew is None or renew + datetime.timedelta(seconds=duration) < now
        if self._holder != s.identity and not expired:
            self._leader.clear()
            return False
        spec["acquireTime"] = (
            current.acquire_time.strftime(_FMT)
            if self._holder == s.identity and current.acquire_time
            else spec["renewTime"]
        )
        spec["leaseTransitions"] = (current.lease_transitions or 0) + (0 if self._holder == s.identity else 1)
        body = {
            "metadata": {"name": s.lease_name, "resourceVersion": lease.metadata.resource_version},
            "spec": spec,
        }
        return self._took(
            lambda: self.coordination.replace_namespaced_lease(s.lease_name, s.lease_namespace, body)
        )

    def _took(self, write: Callable[[], Any]) -> bool:
        try:
            write()
        except ApiException as err:
            if err.status in (409, 422):  # another replica won the race
                self._leader.clear()
                return False
            raise
        if not self._leader.is_set():
            log.info("became leader", extra={"fields": {"identity": self.settings.identity}})
        self._holder = self.settings.identity
        self._renewed = time.monotonic()
        self._leader.set()
        return True

    def _release(self) -> None:
        """Hand the lease back on shutdown so a follower takes over at once, not after expiry."""
        s = self.settings
        try:
            lease = self.coordination.read_namespaced_lease(s.lease_name, s.lease_namespace)
            if lease.spec.holder_identity == s.identity:
                body = {
                    "metadata": {"name": s.lease_name, "resourceVersion": lease.metadata.resource_version},
                    "spec": {"holderIdentity": None, "leaseDurationSeconds": 1},
                }
                self.coordination.replace_namespaced_lease(s.lease_name, s.lease_namespace, body)
        except (ApiException, OSError, ValueError) as err:
            log.warning("lease release failed", extra={"fields": {"error": str(err)}})
        self._leader.clear()
