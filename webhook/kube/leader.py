"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it.

A candidate takes the Lease when it is free, released, or not renewed for `lease_duration` as observed on
its own clock (never the holder's clock); the leader renews every `retry_period` and steps down when it
could not renew within `renew_deadline`. Optimistic concurrency (resourceVersion) settles races: a 409
means someone else won this round. The holder also keeps its `annotations` on the Lease (e.g. its URL), so
followers can find it.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import kubernetes.client

from webhook.kube import errors, rest, rounds

log = logging.getLogger(__name__)

Obj = dict[str, Any]
GROUP, VERSION = "coordination.k8s.io", "v1"


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderSettings:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0  # seconds a follower waits, after the last renewal it saw, to take over
    renew_deadline: float = 10.0  # the leader steps down when it has not renewed for this long
    retry_period: float = 2.0  # between attempts to acquire or renew
    # Written into the Lease's metadata.annotations on every create, takeover and renewal (merged: other
    # annotations stay); removed again on release.
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs a non-empty identity")
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration")


def _micro_time(moment: float) -> str:
    stamp = datetime.datetime.fromtimestamp(moment, datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for one Lease. Use `start()`/`stop()` (a thread) or call `try_acquire_or_renew()`."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        settings: LeaderSettings,
        *,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.settings = settings
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._monotonic = monotonic
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._rounds = rounds.Rounds(
            f"leader {settings.name}", self.try_acquire_or_renew, period_s=settings.retry_period
        )
        self._leading = False
        self._last_renew = float("-inf")  # monotonic time of our last successful acquire/renew
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # monotonic time when `_observed` last changed
        self._holder_annotations: dict[str, str] = {}  # of the last Lease seen, when it had a holder
        self.holder = ""  # the holder identity last seen on the Lease
        self.last_error: errors.ApiError | None = None

    # --- state ---

    def is_leader(self) -> bool:
        """True while we hold the Lease and renewed it within `renew_deadline`."""
        with self._lock:
            fresh = self._monotonic() - self._last_renew < self.settings.renew_deadline
            return self._leading and fresh

    def holder_annotations(self) -> dict[str, str]:
        """The annotations of the Lease as last seen (read or written by us); empty while nobody holds it."""
        with self._lock:
            return dict(self._holder_annotations)

    def _saw(self, lease: Obj) -> None:
        holder = (lease.get("spec") or {}).get("holderIdentity")
        notes = (lease.get("metadata") or {}).get("annotations") or {}
        with self._lock:
            self._holder_annotations = {str(k): str(v) for k, v in notes.items()} if holder else {}

    @property
    def _path(self) -> str:
        s = self.settings
        return rest.path("leases", s.name, s.namespace, group=GROUP, version=VERSION)

    # --- one round ---

    def try_acquire_or_renew(self) -> bool:
        """One attempt to take or keep the Lease; True when we hold it now. API errors count as False."""
        # A renewal counts from before it was sent: the API may commit it (and followers date it) long
        # before its reply comes back, and dating it from the reply would let us lead past their expiry.
        started = self._monotonic()
        try:
            won = self._attempt()
        except errors.ApiError as exc:
            self.last_error = exc
            won = False
        now = self._monotonic()
        changed_to: bool | None = None
        with self._lock:
            if won:
                self._last_renew = started
            taken = bool(self.holder) and self.holder != self.settings.identity
            expired = now - self._last_renew >= self.settings.renew_deadline
            lost = self._leading and not won and (taken or expired)
            if won and not self._leading:
                self._leading, changed_to = True, True
            elif lost:
                self._leading, changed_to = False, False
        if changed_to is not None:
            self._notify(changed_to)
        return won

    def _attempt(self) -> bool:
        s = self.settings
        now_wall = self._wall()
        try:
            lease: Obj = rest.request(self.api, "GET", self._path)
        except errors.NotFoundError:
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Lease",
                "metadata": self._metadata({"name": s.name, "namespace": s.namespace}),
                "spec": self._spec(now_wall, acquire=now_wall, transitions=0),
            }
            collection = rest.path("leases", namespace=s.namespace, group=GROUP, version=VERSION)
            try:
                rest.request(self.api, "POST", collection, body=body)
            except errors.ConflictError:
                return False  # another candidate created it first
            self.holder = s.identity
            self._saw(body)
            return True
        # Another holder's renewal is dated from when its record reached us, not from when we asked: it
        # may have been made while our GET waited, and dating it earlier would take over too soon.
        now = self._monotonic()
        self._saw(lease)
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self.holder = holder
        duration = float(spec.get("leaseDurationSeconds") or s.lease_duration)
        if holder and holder != s.identity and now - self._observed_at < duration:
            return False  # held by someone who renewed recently (by our clock)
        ours = holder == s.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if ours else 1)
        acquire = spec.get("acquireTime") if ours else None
        new = {
            **lease,
            "metadata": self._metadata(lease.get("metadata") or {}),
            "spec": self._spec(now_wall, acquire=acquire or now_wall, transitions=transitions),
        }
        try:
            rest.request(self.api, "PUT", self._path, body=new)  # carries resourceVersion: 409 if raced
        except errors.ConflictError:
            return False
        self.holder = s.identity
        self._saw(new)
        self._observed, self._observed_at = (s.identity, new["spec"]["renewTime"]), now
        return True

    def _metadata(self, metadata: Obj) -> Obj:
        """`metadata` with our annotations merged in (the others kept)."""
        if not self.settings.annotations:
            return metadata
        notes = {**(metadata.get("annotations") or {}), **self.settings.annotations}
        return {**metadata, "annotations": notes}

    def _spec(self, now_wall: float, *, acquire: float | str, transitions: int) -> Obj:
        return {
            "holderIdentity": self.settings.identity,
            # The API field is whole seconds; round up so a short test duration never becomes 0.
            "leaseDurationSeconds": max(1, int(-(-self.settings.lease_duration // 1))),
            "acquireTime": acquire if isinstance(acquire, str) else _micro_time(acquire),
            "renewTime": _micro_time(now_wall),
            "leaseTransitions": transitions,
        }

    def release(self) -> bool:
        """Give the Lease up now if we hold it (others may take it at once); True when released."""
        with self._lock:
            was_leading, self._leading = self._leading, False
            self._last_renew = float("-inf")
        released = False
        try:
            lease: Obj = rest.request(self.api, "GET", self._path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") == self.settings.identity:
                now_wall = self._wall()
                new_spec = {
                    **spec,
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "renewTime": _micro_time(now_wall),
                }
                metadata = dict(lease.get("metadata") or {})
                if self.settings.annotations and metadata.get("annotations"):
                    # Our annotations describe a holder; once released they would point at a non-leader.
                    kept = {
                        k: v for k, v in metadata["annotations"].items() if k not in self.settings.annotations
                    }
                    metadata["annotations"] = kept
                released_lease = {**lease, "metadata": metadata, "spec": new_spec}
                rest.request(self.api, "PUT", self._path, body=released_lease)
                self._saw(released_lease)
                released = True
        except errors.ApiError as exc:
            self.last_error = exc
        if was_leading:
            self._notify(False)
        return released

    def _notify(self, leading: bool) -> None:
        callback = self._on_started if leading else self._on_stopped
        s = self.settings
        state = "is leading" if leading else "stopped leading"
        log.info("leader election %s/%s: %s %s", s.namespace, s.name, s.identity, state)
        if callback is not None:
            try:
                callback()
            except Exception:
                log.exception("leader election callback failed")

    # --- loop ---

    def start(self) -> LeaderElector:
        """Campaign on a thread until `stop()`: acquire, renew every `retry_period`, and campaign again
        after losing the Lease."""
        self._rounds.poke()
        self._rounds.start()
        return self

    def stop(self, release: bool = True, timeout: float = 5.0) -> None:
        """Stop campaigning; with `release`, hand the Lease back so a follower takes over at once."""
        self._rounds.stop(timeout)
        if release:
            self.release()
        elif self.is_leader():
            with self._lock:
                self._leading = False
            self._notify(False)
