"""Whole cards on a shared node: steer the kubelet's card IDs (one per GPU, the GPU's UUID) to the GPUs the
extender placed a card pod on (GetPreferredAllocation) and answer Allocate with exactly those GPUs.

Pods come from a card `PodSource` (`core/node/podviews.card_view`, fed by the node's pod watch), the kubelet's
own pod list from `KubeletPods` (PodResources for the card resource): with two waiting pods asking the
same number of cards it names the one being admitted, so GPUs are never swapped. The book and what goes
with it are the share path's (`allocator.BookAllocator`), and so is the env (`matching.container_env`).
A pod without a placement (it bypassed the extender) is refused: its card could be a GPU that holds
shares.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from webhook.core.node import devicelist, devices, matching, podviews
from webhook.core.wire import resources
from webhook.deviceplugin import allocator

log = logging.getLogger(__name__)


@dataclass(eq=False, repr=False)
class CardAllocator(allocator.BookAllocator):
    """Whole cards: one device ID per GPU, its UUID."""

    resource_name: str = field(default=resources.NVIDIA_GPU, kw_only=True)

    def _amount(self, count: int) -> str:
        return "1 whole GPU" if count == 1 else f"{count} whole GPUs"

    def _candidates(self, count: int, pods: list[podviews.PodView]) -> list[matching.Match]:
        """The book's candidates; when they leave the container in doubt, the kubelet's list decides."""
        view = self._view_for(count, pods)
        with self.lock:
            return self.book.candidates(count, pods, view)

    def prefer(self, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
        """GetPreferredAllocation: the cards of the GPUs the extender placed the container on."""
        deadline = time.monotonic() + self.wait_s
        while True:
            version, pods = self.pods.snapshot()
            found = self._candidates(size, pods)
            ids, match = matching.prefer_cards(available, must_include, size, found, self.state.gpus)
            if match is not None:
                with self.lock:
                    self._remember(ids, match)
                return ids
            # Wait for our watch only while it shows no pod that could be the one.
            remaining = deadline - time.monotonic()
            if found or remaining <= 0 or not self.pods.wait_newer(version, remaining):
                return ids

    def check(self, device_ids: Sequence[str]) -> tuple[int, ...]:
        """The GPUs of one container request's cards; AllocateError(invalid) for a malformed one."""
        try:
            return devices.card_gpus(device_ids, self.state.gpus)
        except devices.DeviceError as err:
            raise allocator.AllocateError(self._explain(len(device_ids), str(err)), invalid=True) from None

    def allocate(self, device_ids: Sequence[str]) -> allocator.Answer:
        """The env of the container the kubelet gives these cards to: its placement's GPUs."""
        chosen = self.check(device_ids)
        deadline = time.monotonic() + self.wait_s
        while True:
            version, pods = self.pods.snapshot()
            try:
                return self._answer(device_ids, chosen, pods)
            except matching.NoMatch as err:
                why = str(err)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise allocator.AllocateError(self._explain(len(device_ids), why))
            self.pods.wait_newer(version, remaining)

    def _answer(
        self, device_ids: Sequence[str], chosen: tuple[int, ...], pods: list[podviews.PodView]
    ) -> allocator.Answer:
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
                match = matching.pick_card(found, chosen)
            except matching.Unplaceable as err:
                with self.lock:
                    self.book.refuse(err.uid)
                raise allocator.AllocateError(self._explain(count, str(err))) from None
        try:
            env, cdi = self._handed_out(match, self.delivery())  # outside the lock: it may read files
        except (devices.DeviceError, devicelist.UnnamedGpu) as err:
            with self.lock:
                self.book.refuse(match.pod.uid)
            raise allocator.AllocateError(self._explain(count, str(err))) from None
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
        return allocator.Answer(env, cdi_devices=cdi)

    def _advised(
        self, ids: frozenset[str], count: int, pods: list[podviews.PodView]
    ) -> matching.Match | None:
        """The container we advised exactly these cards for, if it still waits for them."""
        match = super()._advised(ids, count, pods)
        if match is not None and self.book.progress.get(match.pod.uid, 0) != match.slot_number:
            return None  # answered already (a repeated Allocate) or out of turn
        return match


def _waiting(count: int, pods: list[podviews.PodView], book: matching.AllocationBook) -> str:
    fresh = book.waiting(pods)
    if not fresh:
        return "no pod on this node is waiting for whole GPUs"
    listed = matching.waiting_list(fresh, "its first container")
    return f"no waiting pod asks {count} for its next container; waiting: {listed}"
