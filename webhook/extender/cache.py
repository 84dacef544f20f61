"""Node and pod state of the extender: one accounting.Ledger per node, fed by list+watch events.

Annotations are the only persistent state, so a fresh cache fed the same objects holds the same
numbers. A pod the binder is binding is counted at once ("assumed") until the watch shows it with a
node, is deleted, or the assumption expires. Each assumption has a token: a failed bind forgets only
the one it made, never a later one of the same pod.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from webhook.core.placement import accounting, allocator, filtering, modes
from webhook.core.placement import annotations as ann
from webhook.core.placement.summaries import Summaries
from webhook.core.wire import resources
from webhook.extender.assumptions import ASSUME_TTL_NS, Assumption, holds, newer, replaces
from webhook.extender.blocks import NodeBlocks
from webhook.extender.nominations import Nomination, Nominations
from webhook.extender.records import PodRecord, record_of

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
NOT_SYNCED = "the gpushare extender has not yet listed the cluster's nodes and pods (it is starting); retry"


@dataclass(frozen=True, slots=True)
class NodeView:
    """A consistent copy of one node's ledger for inspect."""

    name: str
    unit: str
    gpus: tuple[accounting.Gpu, ...]
    shares: tuple[accounting.PodShare, ...]
    problems: tuple[str, ...]
    mode: str = ""  # the node's ack.node.gpu.schedule mode, "invalid" when its value is unknown


class Cache:
    """Thread-safe. Readers that need several ledgers consistent take `locked()` once."""

    def __init__(
        self,
        unit: str = "GiB",
        names: resources.GpuResourceNames | None = None,
    ) -> None:
        self.unit = unit
        self.names = names or resources.GpuResourceNames()
        self._lock = threading.RLock()
        self._ledgers: dict[str, accounting.Ledger] = {}
        self._nodes: set[str] = set()
        # Each known node's ack.node.gpu.schedule mode, or why its label cannot be read (keys: `_nodes`):
        # whole cards on shared nodes are ours to place, on the others NVIDIA's plugin serves them.
        self._modes: dict[str, modes.Mode | str] = {}
        # Nodes that take nothing of ours, with the reason filter gives (blocks.py; most clusters: none),
        # and each node's ack.node.gpu.placement policy; both follow label changes at the next event.
        self._blocks = NodeBlocks()
        self._placements: dict[str, allocator.Policy] = {}
        self._pods: dict[str, PodRecord] = {}
        self._assumed: dict[str, Assumption] = {}
        # A ledger entry of a pod key belongs to one of: a nomination, an assumption, a bound record.
        self._nominations = Nominations()
        self._tokens = itertools.count(1)
        # What filter judges every node by (free memory per GPU, best-fit keys), refreshed on read; with
        # the dicts above, the one state core.placement.filtering reads (by reference: no copy, no callback).
        self._summaries = Summaries(self._ledgers, self._nodes)
        held = (self._summaries, self._placements, self._blocks.reasons, self._pods, self._modes)
        self.state = filtering.NodeState(unit, *held)
        self.pods_synced = threading.Event()
        self.nodes_synced = threading.Event()

    @contextmanager
    def locked(self) -> Iterator[Cache]:
        with self._lock:
            yield self

    def _ledger(self, node: str) -> accounting.Ledger:
        """The node's ledger, for a change: marks the node's free-memory summary stale."""
        self._summaries.changed(node)
        ledger = self._ledgers.get(node)
        if ledger is None:
            ledger = self._ledgers[node] = accounting.Ledger(node, ann.NodeDevices(self.unit, ()))
        return ledger

    # --- nodes -------------------------------------------------------------------------------------

    def node_event(self, kind: str, node: Mapping[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        with self._lock:
            if kind == DELETED:
                self._nodes.discard(name)
                self._modes.pop(name, None)
                self._blocks.set_mode(name, None)
                self._placements.pop(name, None)
                self._summaries.changed(name)
                ledger = self._ledgers.get(name)
                if ledger is not None:
                    ledger.set_devices(ann.NodeDevices(self.unit, ()), "node was deleted")
                return
            self._nodes.add(name)
            try:
                self._modes[name] = modes.node_mode((node.get("metadata") or {}).get("labels"))
            except modes.ModeError as err:
                self._modes[name] = str(err)
            labels = (node.get("metadata") or {}).get("labels")
            problem = modes.sharing_problem(labels, self.names.memory)
            placement = modes.node_placement(labels)
            self._blocks.set_mode(name, problem)
            self._placements.pop(name, None)
            if placement is not None:
                self._placements[name] = placement
            try:
                self._ledger(name).set_devices(accounting.node_devices(node, self.unit, self.names))
            except accounting.DevicesError as err:
                self._ledger(name).set_devices(ann.NodeDevices(self.unit, ()), str(err))

    def nodes_resync(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        with self._lock:
            seen = set()
            for node in nodes:
                seen.add(str((node.get("metadata") or {}).get("name") or ""))
                self.node_event(ADDED, node)
            for gone in self._nodes - seen:
                self.node_event(DELETED, {"metadata": {"name": gone}})
            # settle the summaries now, not in the first filter after a (re)list
            self._summaries.largest_free()
        self.nodes_synced.set()

    def synced(self) -> bool:
        """Whether the first lists of nodes and pods are in (before, filter and bind answer NOT_SYNCED)."""
        return self.nodes_synced.is_set() and self.pods_synced.is_set()

    def knows_node(self, name: str) -> bool:
        return name in self._nodes

    def unshared(self) -> Mapping[str, str]:
        """Known nodes that take no gpu-mem share nor whole card of ours, with the reason (blocks.py).
        Hold `locked()`."""
        return self._blocks.reasons

    def placement(self, name: str) -> allocator.Policy | None:
        """The node's `ack.node.gpu.placement` policy; None when unset or unknown."""
        return self._placements.get(name)

    # --- pods --------------------------------------------------------------------------------------

    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        key = accounting.pod_key(pod)
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        with self._lock:
            nominated = self._nominations.get(key)
            if nominated is not None and (
                nominated.uid != uid
                or kind == DELETED
                or accounting.node_name_of(pod)
                or not accounting.holds_memory(pod)
                or accounting.being_deleted(pod)
            ):
                self._drop_nomination(key)
            assumption = self._assumed.get(key)
            if assumption is not None and (
                replaces(
                    assumption, uid, str(meta.get("creationTimestamp") or ""), kind != DELETED and holds(pod)
                )
                if assumption.uid != uid
                else (
                    kind == DELETED
                    or accounting.node_name_of(pod)
                    or not accounting.holds_memory(pod)
                    # Unbound and being deleted: kube-apiserver refuses its Binding, so none will land.
                    or accounting.being_deleted(pod)
                )
            ):
                # The watch now shows where the pod really is (or that it is gone): it replaces the guess.
                self._drop_assumption(key)
            if kind == DELETED:
                self._nominations.bury(uid)
                self._set_record(key, None)
                return
            self._set_record(key, record_of(pod, self.names, self._pods.get(key), self.unit))

    def pods_resync(self, pods: Iterable[Mapping[str, Any]], listed_ns: int = 0) -> None:
        """The full list. `listed_ns` (monotonic, when it was asked for): assumptions made before it of
        pods the list lacks are dropped too, as those pods were gone by then (deleted while the watch was
        down, no DELETED event to come); later ones may be of pods created since."""
        with self._lock:
            seen = set()
            for pod in pods:
                seen.add(accounting.pod_key(pod))
                self.pod_event(MODIFIED, pod)
            for gone in set(self._pods) - seen:
                self._nominations.bury(self._pods[gone].uid)
                self._set_record(gone, None)
            for key, assumption in list(self._assumed.items()):
                if key not in seen and assumption.since_ns < listed_ns:
                    self._drop_assumption(key)
            self._summaries.largest_free()
        self.pods_synced.set()

    def _set_record(self, key: str, record: PodRecord | None) -> None:
        if record is None or record.node:
            self._drop_nomination(key)
        old = self._pods.pop(key, None)
        if old is not None and old.node:
            self._blocks.drop_card_pod(old.node, key)
            if key not in self._assumed:
                self._ledger(old.node).release(key)
        if record is None:
            return
        self._pods[key] = record
        if record.node and record.share is not None and key not in self._assumed:
            self._ledger(record.node).place(record.share)
        elif record.node and record.share is None and record.cards.asks() and not record.ended:
            self._blocks.add_card_pod(record.node, key)  # bound by NVIDIA's plugin's rules, not ours

    def pod(self, key: str) -> PodRecord | None:
        return self._pods.get(key)

    # --- assumptions (binder) ----------------------------------------------------------------------

    def assume(
        self, key: str, uid: str, node: str, allocation: ann.Allocation, now_ns: int, *, created: str = ""
    ) -> int:
        """Count a pod on `node` from the moment its Binding is sent, before the watch shows it; the token
        that `confirm` and `forget` take. Replaces an earlier assumption of the pod: the binder only
        assumes for a pod whose earlier binds are over (or for a newer pod of the same name)."""
        with self._lock:
            self._drop_nomination(key)  # bind decides now, on whichever node kube-scheduler chose
            previous = self._assumed.get(key)
            older = {previous.uid, *previous.older} if previous is not None else set()
            self._drop_assumption(key)
            old = self._pods.get(key)
            if old is not None and old.node:
                self._ledger(old.node).release(key)
            if old is not None:
                older.add(old.uid)
            older.discard(uid)
            token = next(self._tokens)
            self._assumed[key] = Assumption(token, uid, node, now_ns, created=created, older=frozenset(older))
            share = accounting.PodShare(key, uid, allocation, assumed=True)
            self._ledger(node).place(share)
            return token

    def assumption(self, key: str) -> Assumption | None:
        return self._assumed.get(key)

    def confirm(self, key: str, token: int) -> None:
        """The API accepted the Binding of assumption `token`: the pod is bound there."""
        with self._lock:
            assumption = self._assumed.get(key)
            if assumption is not None and assumption.token == token:
                self._assumed[key] = replace(assumption, bound=True)

    def forget(self, key: str, token: int) -> None:
        """A Binding failed: stop counting what assumption `token` reserved. Another bind's assumption,
        or what the watch already shows, stays counted."""
        with self._lock:
            assumption = self._assumed.get(key)
            if assumption is not None and assumption.token == token:
                self._drop_assumption(key)

    def adopt(self, pod: Mapping[str, Any], now_ns: int) -> None:
        """Count a pod that a GET showed bound while the watch has not shown it bound yet: the watch's next
        event for it replaces this, as for any assumption."""
        key = accounting.pod_key(pod)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        node = accounting.node_name_of(pod)
        created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
        with self._lock:
            record = self._pods.get(key)
            # Behind: the watch shows this pod unbound, or shows (or was assumed for) another pod of the
            # name not known to be newer: the GET is the API's current pod of that name, the other gone.
            behind = record is None or (
                not record.node if record.uid == uid else not newer(record.created, created)
            )
            assumed = self._assumed.get(key)
            if assumed is not None and (assumed.uid == uid or newer(assumed.created, created)):
                return  # counted already, or the assumption is of a newer pod
            if not node or not behind:
                return
            try:
                share = accounting.share_of(pod)
            except ann.AnnotationError:
                return
            if share is not None:
                token = self.assume(key, uid, node, share.allocation, now_ns, created=created)
                self.confirm(key, token)

    def _drop_assumption(self, key: str) -> None:
        assumption = self._assumed.pop(key, None)
        if assumption is None:
            return
        self._ledger(assumption.node).release(key)
        record = self._pods.get(key)
        if record is not None and record.node and record.share is not None:
            self._ledger(record.node).place(record.share)

    def expire_assumptions(self, now_ns: int) -> int:
        """Drop assumptions older than ASSUME_TTL_NS (and nominations older than NOMINATION_TTL_NS).
        `_assumed` is in the order they were made (assume re-inserts), so only the expired head is walked:
        the binder calls this on every bind."""
        with self._lock:
            self.expire_nominations(now_ns)
            old = []
            for key, assumption in self._assumed.items():
                if now_ns - assumption.since_ns <= ASSUME_TTL_NS:
                    break
                old.append(key)
            for key in old:
                self._drop_assumption(key)
            return len(old)

    # --- nominations (filter) ----------------------------------------------------------------------

    def nominate(self, key: str, uid: str, node: str, allocation: ann.Allocation, now_ns: int) -> bool:
        """Count a pod on the one node filter left it (module nominations), until its bind arrives, the
        watch shows it bound or gone, or NOMINATION_TTL_NS passes. Never for a pod being bound, bound or
        shown gone (False then)."""
        with self._lock:
            self.expire_nominations(now_ns)
            record = self._pods.get(key)
            if key in self._assumed or self._nominations.gone(uid) or (record is not None and record.node):
                return False
            self._drop_nomination(key)
            self._nominations.add(key, Nomination(uid, node, now_ns))
            share = accounting.PodShare(key, uid, allocation, assumed=True)
            self._ledger(node).place(share)
            return True

    def nominated_allocation(self, key: str, uid: str, node: str) -> ann.Allocation | None:
        """The GPUs filter counted pod `key` (of `uid`) on at `node`, while that nomination stands."""
        with self._lock:
            nomination = self._nominations.get(key)
            if nomination is None or nomination.node != node or nomination.uid != uid:
                return None
            share = self._ledger(node).share(key)
            return share.allocation if share is not None else None

    def drop_nomination(self, key: str) -> None:
        """Stop counting the pod's nomination: its bind is choosing now, or filter is asked again."""
        with self._lock:
            self._drop_nomination(key)

    def nominated(self) -> dict[str, str]:
        with self._lock:
            return self._nominations.nodes()

    def _drop_nomination(self, key: str) -> None:
        nomination = self._nominations.pop(key)
        if nomination is not None:
            self._ledger(nomination.node).release(key)

    def expire_nominations(self, now_ns: int) -> None:
        """Drop nominations older than NOMINATION_TTL_NS. Filter calls it first: a filter that passes no
        node nominates nothing and a follower never binds, so neither would expire a stale one."""
        with self._lock:
            for key in self._nominations.expired(now_ns):
                self._drop_nomination(key)

    def assumed(self) -> dict[str, str]:
        with self._lock:
            return {k: a.node for k, a in self._assumed.items()}

    # --- reads -------------------------------------------------------------------------------------

    def ledger(self, node: str) -> accounting.Ledger | None:
        """The node's ledger, or None when the node is unknown. Hold `locked()` while reading it."""
        return self._summaries.ledger(node)

    def node_names(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def view(self, node: str) -> NodeView | None:
        with self._lock:
            ledger = self.ledger(node)
            if ledger is None:
                return None
            problems = list(ledger.problems())
            problems += [
                f"pod {r.key}: {r.problem}" for r in self._pods.values() if r.node == node and r.problem
            ]
            mode = self._modes.get(node)
            if isinstance(mode, str) and not isinstance(mode, modes.Mode):  # the label's problem
                problems.append(mode)
            shown = mode.value if isinstance(mode, modes.Mode) else "invalid" if mode else ""
            return NodeView(node, ledger.unit, ledger.gpus(), ledger.shares(), tuple(problems), shown)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"nodes": len(self._nodes), "pods": len(self._pods), "assumed": len(self._assumed)}
