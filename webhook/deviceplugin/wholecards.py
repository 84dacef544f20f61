"""Whole cards on a shared node: steer the kubelet's card IDs (one per GPU, the GPU's UUID) to the GPUs the
extender placed a card pod on (GetPreferredAllocation) and answer Allocate with exactly those GPUs.

Pods come from a card `PodSource` (core/cardviews.py views, fed by the node's pod watch), the kubelet's
own pod list from `KubeletPods` (PodResources for the card resource): with two waiting pods asking the
same number of cards it names the one being admitted, so GPUs are never swapped. The book is
`core.matching.AllocationBook`; the env is the share path's (`matching.container_env`). A pod without a
placement (it bypassed the extender) is refused: its card could be a GPU that holds shares.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from webhook.core import cardmatching, devices, matching, podviews, resources
from webhook.deviceplugin.allocator import (
    AllocateError,
    Answer,
    AssignMarker,
    KubeletPods,
    PodSource,
    sync_book,
)
from webhook.deviceplugin.state import DeviceState

log = logging.getLogger(__name__)


class CardAllocator:
    """The card book; lives as long as the process, across kubelet and server restarts."""

    def __init__(
        self,
        state: DeviceState,
        pods: PodSource,
        marker: AssignMarker,
        *,
        isolation_disabled: Callable[[], bool],
        node_name: str,
        resource_name: str = resources.NVIDIA_GPU,
        wait_s: float = 3.0,
        kubelet: KubeletPods | None = None,
    ) -> None:
        self.state = state
        self.pods = pods
        self.marker = marker
        self.isolation_disabled = isolation_disabled
        self.node_name = node_name
        self.resource_name = resource_name
        self.wait_s = wait_s
        self.kubelet = kubelet
        self.book = matching.AllocationBook()
        self.lock = threading.Lock()  # the book only: never held over a wait or an RPC
        self._preferred: dict[frozenset[str], tuple[str, int]] = {}  # IDs we advised -> (pod uid, slot)

    def _candidates(self, count: int, pods: list[podviews.PodView]) -> list[matching.Match]:
        """The book's candidates; when they are placed on different GPUs, the kubelet's list decides."""
        with self.lock:
            found = self.book.candidates(count, pods)
        gpus = {frozenset(m.slot.gpus) if m.pod.problem is None else frozenset() for m in found}
        if self.kubelet is None or len(gpus) <= 1:
            return found
        view = self.kubelet.view()  # outside the lock: an RPC
        with self.lock:
            return self.book.candidates(count, pods, view)

    def prefer(self, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
        """GetPreferredAllocation: the cards of the GPUs the extender placed the container on."""
        deadline = time.monotonic() + self.wait_s
        while True:
            version, pods = self.pods.snapshot()
            found = self._candidates(size, pods)
            ids, match = cardmatching.prefer(available, must_include, size, found, self.state.gpus)
            if match is not None:
                with self.lock:
                    if len(self._preferred) > 1024:  # advice the kubelet never followed
                        self._preferred.clear()
                    self._preferred[frozenset(ids)] = (match.pod.uid, match.slot_number)
                return ids
            # Wait for our watch only while it shows no pod that could be the one.
            remaining = deadline - time.monotonic()
            if found or remaining <= 0 or not self.pods.wait_newer(version, remaining):
                return ids

    def allocate(self, device_ids: Sequence[str]) -> Answer:
        """The env of the container the kubelet gives these cards to: its placement's GPUs."""
        try:
            chosen = cardmatching.card_gpus(device_ids, self.state.gpus)
        except devices.DeviceError as err:
            raise AllocateError(f"{self._what(len(device_ids))}: {err}", invalid=True) from None
        deadline = time.monotonic() + self.wait_s
        while True:
            version, pods = self.pods.snapshot()
            try:
                return self._answer(device_ids, chosen, pods)
            except matching.NoMatch as err:
                why = str(err)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AllocateError(f"{self._what(len(device_ids))}: {why}")
            self.pods.wait_newer(version, remaining)

    def _answer(
        self, device_ids: Sequence[str], chosen: tuple[int, ...], pods: list[podviews.PodView]
    ) -> Answer:
        count = len(device_ids)
        with self.lock:
            self.book.forget_except(p.uid for p in pods)
            match = self._advised(frozenset(device_ids), count, pods)
        if match is None:
            found = self._candidates(count, pods)
            if not found:
                with self.lock:
                    raise matching.NoMatch(_waiting(count, pods, self.book))
            try:
                match = cardmatching.pick(found, chosen)
            except matching.Unplaceable as err:
                with self.lock:
                    self.book.refuse(err.uid)
                raise AllocateError(f"{self._what(count)}: {err}") from None
        try:
            env = matching.container_env(
                match, self.state.gpus, self.state.granularity, self.isolation_disabled()
            )
        except devices.DeviceError as err:
            with self.lock:
                self.book.refuse(match.pod.uid)
            raise AllocateError(f"{self._what(count)}: {err}") from None
        if set(match.slot.gpus) != set(chosen):
            # The kubelet did not take our advice (or reused an init container's cards in another
            # order): the container gets its placement, which is what the extender's ledger counts.
            log.info(
                "pod %s container %s: the kubelet chose GPU(s) %s, its placement names %s",
                match.pod.key,
                match.slot.container,
                list(chosen),
                sorted(match.slot.gpus),
            )
        with self.lock:
            self.book.commit(match, device_ids)
        log.info(
            "allocated %d whole GPU(s) to %s container %s: GPU %s",
            count,
            match.pod.key,
            match.slot.container,
            env[resources.ENV_MEM_IDX],
        )
        if match.last:
            self.marker.mark(match.pod)
        return Answer(env)

    def _advised(
        self, ids: frozenset[str], count: int, pods: list[podviews.PodView]
    ) -> matching.Match | None:
        """The container we advised exactly these cards for, if it still waits for them."""
        advised = self._preferred.pop(ids, None)
        if advised is None:
            return None
        uid, slot = advised
        pod = next((p for p in pods if p.uid == uid), None)
        if pod is None or pod.problem is not None or slot >= len(pod.slots) or pod.slots[slot].units != count:
            return None
        if self.book.progress.get(uid, 0) != slot:
            return None  # answered already (a repeated Allocate) or out of turn
        return matching.Match(pod, slot)

    def sync(self, kubelet: matching.KubeletView) -> list[matching.Correction]:
        """Reconcile with the kubelet's list of cards, as the gpu-mem book does (`sync_book`): after a
        restart, pods the old process answered are marked assigned and a pod part-way through goes on;
        a container answered with another pod's GPUs gets its pod's annotations corrected."""
        return sync_book(
            kubelet, book=self.book, lock=self.lock, pods=self.pods, state=self.state, marker=self.marker
        )

    def _what(self, count: int) -> str:
        cards = "1 whole GPU" if count == 1 else f"{count} whole GPUs"
        return f"gpushare: cannot allocate {cards} of {self.resource_name} on node {self.node_name}"


def _waiting(count: int, pods: list[podviews.PodView], book: matching.AllocationBook) -> str:
    fresh = sorted((p for p in pods if book.fresh(p)), key=lambda p: p.order)
    if not fresh:
        return "no pod on this node is waiting for whole GPUs"
    parts = [f"{p.key} ({p.problem or f'its first container asks {p.first_units}'})" for p in fresh[:5]]
    more = f" and {len(fresh) - 5} more" if len(fresh) > 5 else ""
    return f"no waiting pod asks {count} for its next container; waiting: " + "; ".join(parts) + more
