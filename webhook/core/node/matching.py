"""Which pod and container a kubelet device request is for, which device IDs to prefer for it, and what
to correct when the kubelet's PodResources say a container got another pod's GPU.

The kubelet names no pod in GetPreferredAllocation or Allocate, only device IDs (a count). Three things
tell pods apart: the kubelet's own pod list (PodResources List: the pod it is admitting is the one whose
GPU containers still lack devices), the GPU the device IDs lie on (GetPreferredAllocation steered them
to the placement), and arrival order on the node. Whole cards (one ID per GPU, its UUID) are matched
with the same book; only the preference (`prefer_cards`) and the choice among candidates (`pick_card`)
are theirs: a card's ID names its GPU, so the IDs the kubelet passes pick the candidate whose placement
they are. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from webhook.core.node import devices, gpuenv
from webhook.core.node.podviews import PodView, Slot
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources


class NoMatch(LookupError):
    """No waiting pod on the node owns the container the kubelet asks devices for."""


class Unplaceable(LookupError):
    """The pod the kubelet is admitting cannot get GPU memory; it is named in `uid`."""

    def __init__(self, uid: str, message: str) -> None:
        super().__init__(message)
        self.uid = uid


@dataclass(frozen=True, slots=True)
class KubeletView:
    """PodResources List: pod key ("ns/name") -> container name -> our device IDs (empty: none yet)."""

    pods: Mapping[str, Mapping[str, tuple[str, ...]]]

    def done(self, pod: PodView, answered: int = 0) -> int:
        """How many of the pod's GPU containers, in Allocate order, the kubelet holds devices for.

        The kubelet lists app containers only (and restartable init containers): for a container it
        does not list, the first `answered` (by this plugin's book) count as done."""
        containers = self.pods.get(pod.key, {})
        n = 0
        for i, slot in enumerate(pod.slots):
            if not containers.get(slot.container) and (slot.container in containers or i >= answered):
                break
            n = i + 1
        return n


@dataclass(frozen=True, slots=True)
class Match:
    pod: PodView
    slot_number: int

    @property
    def slot(self) -> Slot:
        return self.pod.slots[self.slot_number]

    @property
    def last(self) -> bool:
        return self.slot_number == len(self.pod.slots) - 1


@dataclass(frozen=True, slots=True)
class Given:
    """What one Allocate answered: the pod it was matched to and the GPUs its env names."""

    uid: str
    container: str
    gpus: Mapping[int, int]


@dataclass(slots=True)
class AllocationBook:
    """Which containers of which pods this plugin has answered Allocate for (not thread-safe).

    Candidates for a request of `count` devices, best first: with the kubelet's pod list, the pods it
    lists whose next GPU container (per that list) asks `count`, those it started first, then the latest
    arrived; else the pod in progress if still waiting (the kubelet allocates a pod's GPU containers in a
    row), then waiting pods not yet touched, in arrival order, whose first GPU container asks `count`.
    Device IDs already chosen pick, among the candidates, the one whose placement they lie on. A pod that
    cannot get memory is refused when it is the match.
    """

    progress: dict[str, int] = field(default_factory=dict)  # uid -> containers answered
    current: str | None = None
    refused: set[str] = field(default_factory=set)
    given: dict[frozenset[str], Given] = field(default_factory=dict)  # device IDs -> what they got

    def candidates(
        self, count: int, pods: Iterable[PodView], kubelet: KubeletView | None = None
    ) -> list[Match]:
        ordered = sorted(pods, key=lambda p: p.order)
        if kubelet is not None:
            # kubelet.go HandlePodAdditions adds a pod to its pod manager just before admitting it and
            # records each container's devices right after its Allocate, so a listed pod whose GPU
            # containers still lack devices is the one being admitted: no guessing by order.
            listed = []
            for pod in reversed(ordered):
                if pod.key not in kubelet.pods or not pod.waiting or pod.uid in self.refused:
                    continue
                if pod.problem is not None:
                    if pod.first_units == count and not any(kubelet.pods[pod.key].values()):
                        listed.append(Match(pod, 0))
                    continue
                done = kubelet.done(pod, self.progress.get(pod.uid, 0))
                if done < len(pod.slots) and pod.slots[done].units == count:
                    listed.append(Match(pod, done))
            if listed:
                # It admits one pod at a time, listing each just before: of several listed pods lacking
                # devices, the others were rejected before Allocate (their Failed phase not yet in our
                # watch). So the one it started first, then the one that came last.
                return sorted(listed, key=lambda m: m.slot_number == 0)
        found: list[Match] = []
        by_uid = {p.uid: p for p in ordered}
        current = by_uid.get(self.current) if self.current else None
        # A pod no longer waiting (rejected part-way, deleted) is never continued: its next slot's GPU
        # would go to whichever pod the kubelet admits next.
        if current is not None and current.problem is None and current.waiting:
            done = self.progress.get(current.uid, 0)
            if done < len(current.slots) and current.slots[done].units == count:
                found.append(Match(current, done))
        found += [Match(p, 0) for p in ordered if self.fresh(p) and p.first_units == count]
        return found

    def match(
        self,
        count: int,
        pods: Iterable[PodView],
        split: Mapping[int, int] | None = None,
        kubelet: KubeletView | None = None,
    ) -> Match:
        """The container these `count` devices (on GPUs `split`, when known) are for."""
        if count <= 0:
            raise NoMatch("the request asks for no devices")
        pods = list(pods)
        found = self.candidates(count, pods, kubelet)
        if not found:
            raise NoMatch(_waiting_summary(self.waiting(pods)))
        chosen = found[0]
        if split and chosen.pod.problem is None:
            chosen = next((m for m in found if m.pod.problem is None and dict(m.slot.gpus) == split), chosen)
        return _placeable(chosen)

    def waiting(self, pods: Iterable[PodView]) -> list[PodView]:
        """The `fresh` pods in arrival order: what a refusal lists."""
        return sorted((p for p in pods if self.fresh(p)), key=lambda p: p.order)

    def fresh(self, pod: PodView) -> bool:
        """Waiting for the kubelet and not yet touched by this plugin."""
        assigned = pod.placement is not None and pod.placement.assigned
        return pod.waiting and not assigned and pod.uid not in self.progress and pod.uid not in self.refused

    def commit(self, match: Match, ids: Iterable[str] = ()) -> None:
        self.progress[match.pod.uid] = match.slot_number + 1
        self.current = None if match.last else match.pod.uid
        key = frozenset(ids)
        if key:
            self.given[key] = Given(match.pod.uid, match.slot.container, dict(match.slot.gpus))

    def refuse(self, uid: str) -> None:
        self.refused.add(uid)
        self.current = None

    def sync(
        self,
        pods: Iterable[PodView],
        kubelet: KubeletView,
        moves: Mapping[frozenset[str], Given] | None = None,
    ) -> None:
        """Take the kubelet's word for how far each listed pod got (after a restart, or a mismatch).
        `moves`: device IDs the kubelet shows under another pod than the one this book credited."""
        for key, actual in (moves or {}).items():
            credited = self.given.get(key)
            if credited is not None and credited.uid != actual.uid:
                self.progress.pop(credited.uid, None)
            self.given[key] = actual
        for pod in pods:
            done = kubelet.done(pod, self.progress.get(pod.uid, 0)) if pod.problem is None else 0
            if done:
                self.progress[pod.uid] = done
                if done < len(pod.slots) and pod.waiting:
                    self.current = pod.uid  # in flight: its next container comes next

    def forget_except(self, uids: Iterable[str]) -> None:
        """Drop what is known of pods that left the node, so the book does not grow forever."""
        keep = set(uids)
        self.progress = {u: n for u, n in self.progress.items() if u in keep}
        self.refused &= keep
        self.given = {k: g for k, g in self.given.items() if g.uid in keep}
        if self.current not in keep:
            self.current = None


def _placeable(match: Match) -> Match:
    """The match; Unplaceable when its pod cannot get GPUs."""
    if match.pod.problem is not None:
        raise Unplaceable(match.pod.uid, f"pod {match.pod.key} {match.pod.problem}")
    return match


def _waiting_summary(fresh: Sequence[PodView]) -> str:
    if not fresh:
        return "no pod on this node is waiting for GPU memory"
    return "pods waiting on this node: " + waiting_list(fresh, "its first GPU container")


def waiting_list(fresh: Sequence[PodView], first: str) -> str:
    """The first five waiting pods, each with why it is no match (its problem, or what `first` asks)."""
    parts = [f"{p.key} ({p.problem or f'{first} asks {p.first_units}'})" for p in fresh[:5]]
    more = f" and {len(fresh) - 5} more" if len(fresh) > 5 else ""
    return "; ".join(parts) + more


def prefer(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    found: Sequence[Match],
    *,
    gpus: Sequence[devices.Gpu],
    granularity: devices.Granularity,
) -> tuple[list[str], Match | None]:
    """GetPreferredAllocation: `size` IDs on the GPUs of the first candidate that has room for its split
    there, and that candidate; else IDs packed on as few GPUs as possible. Never raises: the kubelet
    fails the pod on an error, and the answer is only advice."""
    # The kubelet offers every free ID (thousands): group them by UUID in one pass, and decode and
    # sort only the groups an answer uses.
    must = set(must_include)
    groups: dict[str, list[str]] = {}
    for ident in dict.fromkeys([*must_include, *available]):
        groups.setdefault(ident.rpartition(devices.DEVICE_ID_SEPARATOR)[0], []).append(ident)
    index = devices.device_indexer(gpus, granularity)
    uuids = {g.index: g.uuid for g in gpus}
    sorted_groups: dict[str, list[str]] = {}

    def free(uuid: str) -> list[str]:
        if uuid not in sorted_groups:
            ids = []
            for ident in groups.get(uuid, []):
                try:
                    index(ident)
                except devices.DeviceError:
                    continue
                ids.append(ident)
            ids.sort(key=lambda i: (i not in must, devices.device_number(i)))
            sorted_groups[uuid] = ids
        return sorted_groups[uuid]

    for match in found:
        if match.pod.problem is not None:
            break  # the likeliest pod will be refused: advise no other pod's GPU
        want = match.slot.gpus
        if sum(want.values()) != size:
            continue
        chosen = [i for g, n in sorted(want.items()) for i in free(uuids.get(g, ""))[:n]]
        if len(chosen) == size and must <= set(chosen):
            return chosen, match
    # No placed pod fits: keep the container on one GPU if any has room (must-include IDs first).
    packed = sorted(groups, key=lambda u: (-sum(i in must for i in groups[u]), -len(groups[u])))
    answer: list[str] = []
    for uuid in packed:
        answer += free(uuid)[: size - len(answer)]
        if len(answer) == size:
            break
    return answer, None


def prefer_cards(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    found: Sequence[Match],
    gpus: Sequence[devices.Gpu],
) -> tuple[list[str], Match | None]:
    """GetPreferredAllocation for whole cards: the cards of the first candidate whose placed GPUs the
    kubelet can give (must-include IDs among them), and that candidate; else the must-include IDs and
    the lowest-index free cards. Never raises, as `prefer`."""
    uuids = {g.index: g.uuid for g in gpus}
    free = set(available) | set(must_include)
    for match in found:
        if match.pod.problem is not None:
            break  # the likeliest pod will be refused: advise no other pod's GPUs
        want = [uuids.get(g, "") for g in sorted(match.slot.gpus)]
        if len(want) == size and free.issuperset(want) and set(must_include) <= set(want):
            return want, match
    order = {g.uuid: g.index for g in gpus}
    rest = sorted(
        (i for i in available if i not in must_include), key=lambda i: (order.get(i, len(order)), i)
    )
    return list(dict.fromkeys([*must_include, *rest]))[:size], None


def pick_card(found: Sequence[Match], chosen: Sequence[int]) -> Match:
    """The candidate placed on exactly the GPUs `chosen`, else the first (the kubelet did not take our
    advice: the container still gets its placement, which the extender's ledger counts). Unplaceable when
    that pod cannot get cards; NoMatch when there is no candidate."""
    if not found:
        raise NoMatch("no waiting pod asks this many whole GPUs")
    wanted = set(chosen)
    return _placeable(
        next((m for m in found if m.pod.problem is None and set(m.slot.gpus) == wanted), found[0])
    )


@dataclass(frozen=True, slots=True)
class Correction:
    """A pod whose containers got other GPUs than its annotations name, and the annotations to write."""

    pod: PodView
    containers: tuple[str, ...]
    annotations: Mapping[str, str]


def reconcile(
    pods: Iterable[PodView], kubelet: KubeletView, book: AllocationBook, memory: Mapping[int, int]
) -> tuple[list[Correction], dict[frozenset[str], Given]]:
    """Compare what each container was answered (found by its device IDs in the kubelet's list) with
    its pod's placement: the corrections to write, and the Allocates the book credited to another pod
    (for `AllocationBook.sync`). `memory`: each GPU's size in units, for ALIYUN_COM_GPU_MEM_DEV."""
    corrections: list[Correction] = []
    moves: dict[frozenset[str], Given] = {}
    for pod in pods:
        containers = kubelet.pods.get(pod.key)
        if not containers or pod.placement is None or pod.problem is not None:
            continue
        # From the slots, not the annotation: a placement of the original extender (the whole pod on
        # container 0) is first spread over its containers, so a correction never counts memory twice.
        fixed: dict[int, Mapping[int, int]] = {s.index: dict(s.gpus) for s in pod.slots if not s.init}
        names = []
        for slot in pod.slots:
            key = frozenset(containers.get(slot.container, ()))
            got = book.given.get(key)
            if got is None:
                continue
            if got.uid != pod.uid:
                moves[key] = Given(pod.uid, slot.container, got.gpus)
            if not slot.init and dict(got.gpus) != dict(slot.gpus):
                fixed[slot.index] = dict(got.gpus)
                names.append(slot.container)
        if names:
            allocation = ann.Allocation(fixed)
            placement = ann.Placement(
                allocation,
                memory.get(allocation.gpus()[0], pod.placement.device_memory),
                pod.placement.assume_time_ns,
                pod.placement.assigned,
            )
            values = dict(ann.encode(placement))
            for owned in (resources.ANN_MEM_ASSIGNED, resources.ANN_MEM_ASSUME_TIME):
                values.pop(owned)  # the marker owns them
            corrections.append(Correction(pod, tuple(names), values))
    return corrections, moves


def container_env(
    match: Match, gpus: Sequence[devices.Gpu], granularity: devices.Granularity, isolation_disabled: bool
) -> dict[str, str]:
    """The env protocol for the matched container; DeviceError when a placed GPU is not on this node."""
    by_index = {g.index: g for g in gpus}
    slot = match.slot
    chosen = sorted(slot.gpus)
    missing = [g for g in chosen if g not in by_index]
    if missing:
        raise devices.DeviceError(
            f"pod {match.pod.key} is placed on GPU {missing} which this node does not have"
        )
    placement = match.pod.placement
    assert placement is not None
    return gpuenv.container_env(gpus, slot.gpus, placement.pod_total, granularity, isolation_disabled)
