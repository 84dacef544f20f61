"""Allocate policy: steer the kubelet's device IDs to the extender's GPU (GetPreferredAllocation) and
turn them into the env of the container the extender placed (Allocate).

Pods come from a `PodSource` (a watch of this node's pods, never an API list per call: fault 6), the
kubelet's own pod list from `KubeletPods` (PodResources, optional); the matching is `core.node.matching`.
The lock covers only the book, never a wait or an RPC, so one waiting Allocate blocks no other call.
Marking a pod assigned goes to an `AssignMarker` queue. Failures raise `AllocateError`, never a fake env.
`BookAllocator` is what this gpu-mem `Allocator` shares with the whole-card one (wholecards.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol

from webhook.core.node import devicelist, devices, matching, mps, podviews
from webhook.core.wire import resources
from webhook.deviceplugin.state import DeviceState

log = logging.getLogger(__name__)


class AllocateError(Exception):
    """Allocate cannot answer; `invalid` tells a malformed request from a pod that cannot be served."""

    def __init__(self, message: str, invalid: bool = False) -> None:
        super().__init__(message)
        self.invalid = invalid


@dataclass(frozen=True, slots=True)
class Answer:
    """What one container gets: its env, on MPS nodes the MPS directories mounted, and on CDI nodes the CDI
    device of each of its GPUs (the runtime injects them; core/node/devicelist.py)."""

    envs: dict[str, str]
    mounts: tuple[mps.Mount, ...] = ()
    cdi_devices: tuple[str, ...] = ()


class PodSource(Protocol):
    def snapshot(self) -> tuple[int, list[podviews.PodView]]:
        """(version, the GPU-memory pods on this node); the version grows on every change."""
        ...

    def wait_newer(self, version: int, timeout: float) -> bool: ...


class KubeletPods(Protocol):
    def view(self) -> matching.KubeletView | None:
        """The kubelet's PodResources List; None when it cannot be asked."""
        ...


class AssignMarker(Protocol):
    def mark(self, pod: podviews.PodView) -> None: ...


@dataclass(eq=False, repr=False)
class BookAllocator:
    """What the gpu-mem and whole-card allocators share: an `AllocationBook` of this node's pods, kept as
    long as the process (across kubelet and server restarts), the IDs GetPreferredAllocation advised,
    when to ask the kubelet's list, and reconciliation with it. `_amount` is per resource."""

    state: DeviceState
    pods: PodSource
    marker: AssignMarker
    _: KW_ONLY
    isolation_disabled: Callable[[], bool]
    node_name: str
    resource_name: str
    wait_s: float = 3.0
    kubelet: KubeletPods | None = None
    # Read per Allocate: the toolkit may write or change the node's CDI spec at any time.
    delivery: Callable[[], devicelist.Delivery] = devicelist.env_only
    book: matching.AllocationBook = field(default_factory=matching.AllocationBook, init=False)
    lock: threading.Lock = field(default_factory=threading.Lock, init=False)  # the book only, no waits
    _preferred: dict[frozenset[str], tuple[str, int]] = field(default_factory=dict, init=False)

    def _apart(self, found: Sequence[matching.Match]) -> bool:
        """Whether the book's candidates leave in doubt which container the kubelet is admitting: none, or
        several pods. Only the kubelet's list tells then, even when they are placed on the same GPUs: their
        env differs (pod total, compute share), and so may their next containers' GPUs; and none is also
        what a kubelet restarted mid-admission asks about again."""
        return len({m.pod.uid for m in found}) != 1

    def _amount(self, count: int) -> str:
        """`count` devices in words, for refusals."""
        raise NotImplementedError

    def _view_for(self, count: int, pods: list[podviews.PodView]) -> matching.KubeletView | None:
        """The kubelet's list when the book's candidates for `count` devices are `_apart`, else None."""
        if self.kubelet is None:
            return None
        with self.lock:
            found = self.book.candidates(count, pods)
        return self.kubelet.view() if self._apart(found) else None  # outside the lock: an RPC

    def _remember(self, ids: Sequence[str], match: matching.Match) -> None:
        """Note the container these advised IDs are for; call with the lock held."""
        if len(self._preferred) > 1024:  # advice the kubelet never followed
            self._preferred.clear()
        self._preferred[frozenset(ids)] = (match.pod.uid, match.slot_number)

    def _advised(
        self, ids: frozenset[str], count: int, pods: list[podviews.PodView]
    ) -> matching.Match | None:
        """The container we chose these exact IDs for in GetPreferredAllocation, if still waiting."""
        advised = self._preferred.pop(ids, None)
        if advised is None:
            return None
        uid, slot = advised
        pod = next((p for p in pods if p.uid == uid), None)
        if pod is None or not pod.waiting or pod.problem is not None:
            return None  # rejected or started since the advice: its GPU is not this container's
        if slot >= len(pod.slots) or pod.slots[slot].units != count:
            return None
        return matching.Match(pod, slot)

    def sync(self, kubelet: matching.KubeletView) -> list[matching.Correction]:
        """Reconcile the book with the kubelet's list of its resource: fix the book (restart,
        mismatches), mark pods whose allocation finished before a restart, and return the annotations
        that must be corrected."""
        _, views = self.pods.snapshot()
        memory = {g.index: self.state.granularity.units(g.memory_mib) for g in self.state.gpus}
        with self.lock:
            before = dict(self.book.progress)
            corrections, moves = matching.reconcile(views, kubelet, self.book, memory)
            self.book.sync(views, kubelet, moves)
            finished = [
                p
                for p in views
                if p.placement is not None
                and not p.placement.assigned
                and p.slots
                and before.get(p.uid, 0) < len(p.slots) == self.book.progress.get(p.uid, 0)
            ]
        for pod in finished:
            self.marker.mark(pod)
        return corrections

    def _explain(self, count: int, why: str) -> str:
        what = self._amount(count)
        return f"gpushare: cannot allocate {what} of {self.resource_name} on node {self.node_name}: {why}"

    def _handed_out(
        self, match: matching.Match, delivery: devicelist.Delivery
    ) -> tuple[dict[str, str], tuple[str, ...]]:
        """The matched container's env and CDI devices as this node hands GPUs out (core/node/devicelist.py);
        devices.DeviceError for a GPU the node lacks, devicelist.UnnamedGpu for one no CDI spec names."""
        env = matching.container_env(
            match, self.state.gpus, self.state.granularity, self.isolation_disabled()
        )
        return delivery.hand_out(env, match.slot.gpus)


def _no_mps() -> mps.MpsDirs | None:
    return None


@dataclass(eq=False, repr=False)
class Allocator(BookAllocator):
    """GPU memory shares: fake device IDs, several per GPU."""

    resource_name: str = field(default=resources.GPU_MEMORY, kw_only=True)
    # Read per Allocate: the node's mode label may change at any time.
    mps_dirs: Callable[[], mps.MpsDirs | None] = field(default=_no_mps, kw_only=True)

    def _amount(self, count: int) -> str:
        return self.state.granularity.describe(count)

    def _view(self) -> matching.KubeletView | None:
        return self.kubelet.view() if self.kubelet is not None else None

    def prefer(self, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
        """GetPreferredAllocation: IDs on the GPU(s) the extender placed the container on."""
        gpus, granularity = self.state.gpus, self.state.granularity
        kubelet = self._view_for(size, self.pods.snapshot()[1])
        deadline = time.monotonic() + self.wait_s
        while True:
            version, pods = self.pods.snapshot()
            with self.lock:
                found = self.book.candidates(size, pods, kubelet)
                ids, match = matching.prefer(
                    available, must_include, size, found, gpus=gpus, granularity=granularity
                )
                if match is not None:
                    self._remember(ids, match)
                    return ids
            # Wait for our watch only when it shows no pod that could be the one yet.
            remaining = deadline - time.monotonic()
            if found or remaining <= 0 or not self.pods.wait_newer(version, remaining):
                return ids

    def check(self, device_ids: Sequence[str]) -> dict[int, int]:
        """The devices per GPU of one container request; AllocateError(invalid) for a malformed one."""
        try:
            devices.check_distinct(device_ids)
        except devices.DeviceError as err:
            raise AllocateError(str(err), invalid=True) from None
        try:
            return devices.device_split(device_ids, self.state.gpus, self.state.granularity)
        except devices.DeviceError as err:
            raise AllocateError(f"unknown device: {err}", invalid=True) from None

    def allocate(self, device_ids: Sequence[str]) -> Answer:
        """The env (and MPS mounts) for one container that the kubelet gives these devices."""
        split = self.check(device_ids)
        count = len(device_ids)
        deadline = time.monotonic() + self.wait_s
        kubelet: matching.KubeletView | None = None
        asked = False
        delivery = self.delivery()  # outside the lock: it may read the node's CDI folders
        while True:
            version, pods = self.pods.snapshot()
            with self.lock:
                try:
                    return self._answer(device_ids, split, pods, kubelet, delivery)
                except matching.NoMatch as err:
                    why = str(err)
            # Not found: ask the kubelet once, then wait for our watch (the kubelet's may be ahead),
            # both outside the lock.
            if not asked and self.kubelet is not None:
                kubelet, asked = self._view(), True
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AllocateError(self._explain(count, f"no placed pod matches; {why}"))
            self.pods.wait_newer(version, remaining)

    def _answer(
        self,
        device_ids: Sequence[str],
        split: dict[int, int],
        pods: list[podviews.PodView],
        kubelet: matching.KubeletView | None,
        delivery: devicelist.Delivery,
    ) -> Answer:
        count = len(device_ids)
        self.book.forget_except(p.uid for p in pods)
        match = self._advised(frozenset(device_ids), count, pods)
        if match is None:
            try:
                match = self.book.match(count, pods, split, kubelet)
            except matching.Unplaceable as err:
                self.book.refuse(err.uid)
                raise AllocateError(self._explain(count, str(err))) from None
        try:
            env, cdi = self._handed_out(match, delivery)
        except (devices.DeviceError, devicelist.UnnamedGpu) as err:
            self.book.refuse(match.pod.uid)
            raise AllocateError(self._explain(count, str(err))) from None
        dirs = self.mps_dirs()
        mounts: tuple[mps.Mount, ...] = ()
        if dirs is not None:
            try:
                percent = mps.compute_percent(match.pod.compute_percent)
            except mps.MpsError as err:
                self.book.refuse(match.pod.uid)
                raise AllocateError(self._explain(count, f"pod {match.pod.key}: {err}")) from None
            env.update(mps.container_env(match.slot.gpus, self.state.granularity, percent, dirs))
            mounts = mps.mounts(dirs)
        self.book.commit(match, device_ids)
        log.info(
            "allocated %s to %s container %s: GPU %s",
            self._amount(count),
            match.pod.key,
            match.slot.container,
            env[resources.ENV_MEM_IDX],
        )
        if match.last:
            self.marker.mark(match.pod)
        return Answer(env, mounts, cdi)
