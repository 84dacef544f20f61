"""Bind: choose the pod's GPU(s) under the node's lock, count them at once, then create the Binding.

The placement annotations travel in the Binding itself (`metadata.annotations`, which the API server
merges into the pod together with spec.nodeName), so a pod is never left half-placed: a failed Binding
writes nothing, and the memory that bind reserved is forgotten. The Binding carries the pod UID as a
precondition, so a pod deleted and re-created under the same name is never bound by mistake. Binds of
one pod take turns, so a duplicate sees the first one's outcome instead of reserving again.

The logic is written once, as steps that yield their API calls (`calls.py`): `bind` drives them on the
calling thread, `bind_on_loop` on the event loop (the extender's path; no hand-over to a thread per pod).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.placement import accounting, allocator, modes, wholecards
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.extender import cache as cache_mod
from webhook.extender import records
from webhook.extender.bind import calls as bindcalls
from webhook.extender.bind.calls import BindingApi, CreateBinding, GetPod, Pause, Steps
from webhook.extender.bind.turns import Turns
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs
from webhook.kube import errors

log = logging.getLogger(__name__)

# Picks the pod's GPU(s) from a node's GPUs (with their use) in the node's unit: the allocator's fit for
# shares, wholecards.fit for whole cards. Both reserve and annotate through the same path.
_Choose = Callable[[Sequence[accounting.Gpu], str], allocator.Fit | allocator.NoFit]


@dataclass(frozen=True, slots=True)
class _Outcome:
    """How creating a Binding ended: `error` ("" when the pod is bound where asked); `landed` when it is
    this Binding that bound it; `pod`, the pod as a GET after a failure showed it; `unknown` when a
    Binding may have landed although no reply said so."""

    error: str
    landed: bool = False
    pod: Mapping[str, Any] | None = None
    unknown: bool = False


LOST_LEADERSHIP = "this gpushare extender replica no longer leads (the Lease passed to another); retry"


class Binder:
    """Binds pods; idempotent per pod: a bind for a pod that is bound (or being bound) by this extender
    returns that placement's outcome or says where the pod is, and never touches another bind's
    reservation. `wait_s` bounds how long a duplicate waits for the bind in progress."""

    def __init__(
        self,
        cache: cache_mod.Cache,
        api: BindingApi,
        settings: ExtenderSettings,
        clock_ns: Callable[[], int] = time.time_ns,
        sleep: Callable[[float], None] = time.sleep,
        *,
        wait_s: float = 10.0,
        ttl_clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.cache = cache
        self.api = api
        self.settings = settings
        self.wait_s = wait_s
        # The wall clock only for the assume-time annotation (the device plugin orders pods by it); what
        # the cache counts expires by the monotonic clock, which a step of the wall clock cannot age.
        self._clock_ns = clock_ns
        self._ttl_clock_ns = ttl_clock_ns
        # Whether this replica still leads (ExtenderApp sets its leadership's): checked before every
        # Binding, as a retry may come seconds after the bind started and another replica binds then.
        self.leading: Callable[[], bool] = lambda: True
        self._sleep = sleep
        self._turns = Turns()
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
        with self._turns.turn(args.key, self.wait_s) as mine:
            if not mine:
                return (
                    f"pod {args.key}: an earlier bind of it is still running after {self.wait_s:g} s; retry"
                )
            return bindcalls.run(self._steps(args), self.api, self._sleep)

    async def bind_on_loop(self, args: BindingArgs, api: bindcalls.AsyncBindingApi) -> str | None:
        """`bind` on the event loop with `api`; None, having done nothing, when another bind of the pod
        holds its turn: then call `bind` on a thread, which waits for it."""
        with self._turns.turn(args.key, 0) as mine:
            if not mine:
                return None
            return await bindcalls.run_async(self._steps(args), api)

    def _steps(self, args: BindingArgs) -> Steps:
        try:
            return (yield from self._bind(args))
        except errors.ApiError as err:
            return f"binding pod {args.key} to {args.node}: {err.message}"

    def _bind(self, args: BindingArgs) -> Steps:
        if not self.cache.synced():
            # Its ledgers would miss the pods already running: a bind now could over-commit a GPU. A
            # follower forwards binds to the leader whatever the leader's readiness says.
            return cache_mod.NOT_SYNCED
        record = self.cache.pod(args.key)
        if record is None or (args.pod_uid and record.uid != args.pod_uid):
            # Not yet seen by the watch (or an older pod of the same name): one GET, never a list.
            pod = yield GetPod(args.pod_namespace, args.pod_name)
            if pod is None:
                return f"pod {args.key} not found"
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            if args.pod_uid and uid != args.pod_uid:
                return f"pod {args.key} has UID {uid}, not {args.pod_uid}: it was re-created"
            record = records.record_of(pod, self.cache.names, unit=self.cache.unit)
            if record is None:
                return self._asks_nothing(args)
            if record.node:  # bound already, and the watch has not shown it: count it meanwhile
                self.cache.adopt(pod, self._ttl_clock_ns())
        uid = args.pod_uid or record.uid
        done = yield from self._placed_already(args, uid, record)
        if done is not None:
            return done
        if record.demand is None:
            return f"pod {args.key}: {record.demand_error}"
        if record.cards.asks():
            return (yield from self._bind_cards(args, uid, record))
        if not record.demand.asks():
            return self._asks_nothing(args)
        asked = record.demand
        with self.cache.locked():
            refused = self.cache.unshared().get(args.node)  # the mode label changed since filter
            node_policy = self.cache.placement(args.node)
        if refused is not None:
            return f"node {args.node}: {refused}"
        notes = {resources.PLACEMENT_POLICY_ANNOTATION: record.policy}
        policy = modes.placement_policy(notes, node_policy, self.settings.default_policy)
        return (
            yield from self._place(
                args, uid, lambda gpus, unit: allocator.fit(asked, gpus, policy, unit), record.created
            )
        )

    def _bind_cards(self, args: BindingArgs, uid: str, record: records.PodRecord) -> Steps:
        """Whole cards: reserved and annotated like a share on a node our plugin serves; on a node where
        NVIDIA's plugin serves them, a plain Binding (nothing of ours to count or to tell the plugin)."""
        with self.cache.locked():
            mode = wholecards.ours(self.cache.state, args.node)
            known = mode is None or isinstance(mode, modes.Mode)  # a Mode is a str too: tested first
            refused = wholecards.refusal(self.cache.state, args.node, mode) if known else None
        if refused is not None:  # the node's mode or pods changed since filter
            return f"node {args.node}: {refused}"
        if mode is None:
            return (yield from self._send(args, uid, {})).error
        if not isinstance(mode, modes.Mode):
            return f"node {args.node}: {mode}"
        cards = record.cards
        return (
            yield from self._place(args, uid, lambda gpus, unit: wholecards.fit(cards, gpus), record.created)
        )

    def _place(self, args: BindingArgs, uid: str, choose: _Choose, created: str) -> Steps:
        """Reserve what `choose` picks on the node, then create the Binding with its annotations.
        `created`: the pod's creationTimestamp, which tells later events of an older namesake apart."""
        reserved = self._reserve(args, uid, choose, created)
        if isinstance(reserved, str):
            return reserved
        token, placement = reserved
        outcome = yield from self._send(args, uid, ann.encode(placement))
        if outcome.landed:
            self.cache.confirm(args.key, token)
        elif not outcome.unknown:  # nothing of ours landed: release exactly what this bind reserved
            with self.cache.locked():
                self.cache.forget(args.key, token)
                if outcome.pod is not None:  # bound by someone else: count that until the watch shows it
                    self.cache.adopt(outcome.pod, self._ttl_clock_ns())
        # With an unknown outcome the reservation stays (unconfirmed): the watch settles it, or the
        # scheduler's next bind of the pod asks the API (`_placed_already`). Over-counting a while is safe.
        return outcome.error

    def _asks_nothing(self, args: BindingArgs) -> str:
        return (
            f"pod {args.key} asks for no {self.cache.names.memory} and no {self.cache.names.whole_card}: "
            "the gpushare extender binds only pods that do (list them in managedResources of the "
            "scheduler's extender configuration)"
        )

    def _placed_already(
        self, args: BindingArgs, uid: str, record: records.PodRecord
    ) -> Generator[bindcalls.Call, Any, str | None]:
        """The answer for a pod this extender already bound, or that the watch shows bound; None to bind."""
        held = self.cache.assumption(args.key)
        if held is not None and held.uid == uid and held.bound:
            return _bound_answer(args, held.node, placed=True)
        if held is not None and held.uid == uid:
            # An earlier bind of this pod ended not knowing whether its Binding landed: ask the API.
            try:
                pod = yield GetPod(args.pod_namespace, args.pod_name)
            except errors.ApiError as err:
                return (
                    f"pod {args.key}: whether an earlier bind of it landed is unknown: {err.message}; retry"
                )
            with self.cache.locked():
                self.cache.forget(args.key, held.token)
                if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
                    return f"pod {args.key} was deleted or re-created"
                node = accounting.node_name_of(pod)
                if not node:
                    return None  # it did not land: bind afresh
                self.cache.adopt(pod, self._ttl_clock_ns())
                return _bound_answer(args, node, _has_placement(pod))
        if record.node and record.ended:
            return f"pod {args.key} is bound to node {record.node} and has finished"
        if record.node and record.deleting:  # it keeps its memory until it is gone, and is never bound again
            return f"pod {args.key} is bound to node {record.node} and is being deleted"
        if record.node:
            # Whole cards on a node NVIDIA's plugin serves carry no placement of ours.
            plain = record.cards.asks() and wholecards.ours(self.cache.state, record.node) is None
            return _bound_answer(args, record.node, record.share is not None or bool(record.problem) or plain)
        return None

    def _reserve(
        self, args: BindingArgs, uid: str, choose: _Choose, created: str
    ) -> tuple[int, ann.Placement] | str:
        with self._node_lock(args.node), self.cache.locked():
            nominated = self.cache.nominated_allocation(args.key, uid, args.node)
            self.cache.drop_nomination(args.key)  # filter's guess of this pod: bind decides now
            ledger = self.cache.ledger(args.node)
            if ledger is None:
                return f"node {args.node} is not known to the gpushare extender"
            gpus = ledger.gpus()
            # Filter's GPUs when they still have the room: binds arrive out of order, and fitting anew
            # would see the nominations of pods kube-scheduler placed after this one.
            result = (allocator.again(nominated, gpus) if nominated is not None else None) or choose(
                gpus, ledger.unit
            )
            if isinstance(result, allocator.NoFit):
                return f"node {args.node}: {result.reason}"
            now = self._ttl_clock_ns()
            self.cache.expire_assumptions(now)
            token = self.cache.assume(args.key, uid, args.node, result.allocation, now, created=created)
        assumed_at = self._clock_ns()
        placement = ann.Placement(
            result.allocation, device_memory=result.device_memory, assume_time_ns=assumed_at
        )
        return token, placement

    def _send(
        self, args: BindingArgs, uid: str, wanted: Mapping[str, str]
    ) -> Generator[bindcalls.Call, Any, _Outcome]:
        """Create the Binding; retry on 409 and 5xx unless the pod shows the retry is pointless or done."""
        last = ""
        # A 5xx or lost connection may hide a Binding that landed; a GET showing the pod unbound clears it.
        unsure = False
        for attempt in range(max(1, self.settings.bind_attempts)):
            if attempt:
                yield Pause(self.settings.bind_backoff_s * 2 ** (attempt - 1))
            if not self.leading():
                last = f"binding pod {args.key}: {LOST_LEADERSHIP}"
                return _Outcome(last + ("; whether it landed is unknown" if unsure else ""), unknown=unsure)
            try:
                yield CreateBinding(args.pod_namespace, args.pod_name, uid, args.node, wanted)
                return _Outcome("", landed=True)
            except errors.ApiError as err:
                last = f"binding pod {args.key} to {args.node}: {err.message}"
                if not (err.retryable or isinstance(err, errors.ConflictError)):
                    # Refused outright (404, 4xx): this attempt landed nothing, but an earlier one whose
                    # reply was lost (and no GET settled) may have; keep its reservation then.
                    break
                unsure = unsure or err.retryable
            try:
                pod = yield GetPod(args.pod_namespace, args.pod_name)
            except errors.ApiError:
                continue
            verdict = self._after_failure(args, uid, wanted, pod)
            if verdict is not None:
                return verdict
            unsure = False  # the pod is still unbound: no earlier attempt landed
            log.info(
                "retrying binding", extra={"fields": {"pod": args.key, "node": args.node, "error": last}}
            )
        return _Outcome(last + ("; whether it landed is unknown" if unsure else ""), unknown=unsure)

    @staticmethod
    def _after_failure(
        args: BindingArgs, uid: str, wanted: Mapping[str, str], pod: Mapping[str, Any] | None
    ) -> _Outcome | None:
        """None: retry. Else the outcome the pod shows: bound by this bind (its reply was lost), or why
        a retry never will succeed."""
        if pod is None:
            return _Outcome(f"pod {args.key} was deleted")
        meta = pod.get("metadata") or {}
        if uid and meta.get("uid") != uid:
            return _Outcome(f"pod {args.key} was re-created (UID {meta.get('uid')}, not {uid})")
        node = accounting.node_name_of(pod)
        if node:
            current = meta.get("annotations") or {}
            if node == args.node and all(current.get(k) == v for k, v in wanted.items()):
                return _Outcome("", landed=True)
            return _Outcome(_bound_answer(args, node, _has_placement(pod)), pod=pod)
        if accounting.being_deleted(pod):  # kube-apiserver never binds it now
            return _Outcome(f"pod {args.key} is being deleted")
        return None


def _bound_answer(args: BindingArgs, node: str, placed: bool) -> str:
    """A bind's answer for a pod already bound to `node` (`placed`: with a gpushare placement)."""
    if node != args.node:
        return f"pod {args.key} is already bound to node {node}, not {args.node}"
    if not placed:
        return f"pod {args.key} is already bound to node {node} without a gpushare placement"
    return ""  # the same placement: a duplicate bind succeeds as the first did


def _has_placement(pod: Mapping[str, Any]) -> bool:
    try:
        return ann.decode((pod.get("metadata") or {}).get("annotations")) is not None
    except ann.AnnotationError:
        return True  # a placement, unreadable: the cache reports it on the node
