"""What the plugin does about an over-share: Events within the node's budget, and the opt-in eviction only
on nodes labelled share, retried while a disruption budget refuses, never twice once done. The API calls
are replaced here to inject faults; tests/e2e/test_usage.py makes them against the real API server."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from webhook.core.placement import modes
from webhook.core.usage import overshare, usage
from webhook.deviceplugin.usage import overshareactions
from webhook.kube import errors, pods

GIB = 1 << 30


class Calls:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.evictions: list[str] = []
        self.refuse = 0  # evictions to answer 429 before one goes through
        self.done = threading.Condition()

    def event(self, api: Any, involved: dict[str, Any], reason: str, message: str, **kw: Any) -> None:
        with self.done:
            self.events.append(f"{involved['metadata']['name']}: {reason} {kw['type_']}")
            self.done.notify_all()

    def evict(self, api: Any, namespace: str, name: str, uid: str = "") -> None:
        with self.done:
            self.evictions.append(name)
            self.done.notify_all()
            if self.refuse:
                self.refuse -= 1
                raise errors.ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                )

    def wait(self, what: str, count: int) -> None:
        with self.done:
            assert self.done.wait_for(lambda: len(getattr(self, what)) >= count, 5), getattr(self, what)


@pytest.fixture
def calls(monkeypatch):
    found = Calls()
    monkeypatch.setattr(pods, "create_event", found.event)
    monkeypatch.setattr(pods, "evict_pod", found.evict)
    return found


def _over(*pods: str) -> tuple[usage.NodeUsage, list[overshare.Finding]]:
    rows = tuple(
        usage.ContainerUsage("ml", p, "main", f"uid-{p}", 0, GIB, 2 * GIB, over_share=True) for p in pods
    )
    return usage.NodeUsage("n1", 0.0, (), rows), [
        overshare.Finding(overshare.Change.OVER, r, 60) for r in rows
    ]


def _actions(labels: dict[str, str], clock: list[float], **kw: Any) -> overshareactions.OverShareActions:
    api: Any = None  # the calls are replaced
    return overshareactions.OverShareActions(api, "n1", lambda: labels, clock=lambda: clock[0], **kw).start()


def test_findings_become_warning_events_within_the_budget(calls):
    clock = [0.0]
    actions = _actions({}, clock, budget=overshare.EventBudget(per_minute=1, burst=2))
    try:
        report, found = _over("a", "b", "c")
        actions.handle(found, report)
        calls.wait("events", 2)
    finally:
        actions.stop()
    assert calls.events == [f"a: {overshare.REASON} Warning", f"b: {overshare.REASON} Warning"]


def test_eviction_is_off_by_default(calls):
    clock = [0.0]
    actions = _actions({modes.MODE_LABEL: "share"}, clock)
    try:
        report, found = _over("a")
        actions.handle(found, report)
        calls.wait("events", 1)
    finally:
        actions.stop()
    assert calls.evictions == []


@pytest.mark.parametrize("mode", ["cgpu", "mps", None], ids=["cgpu", "mps", "unlabelled"])
def test_eviction_never_acts_where_the_mode_enforces_the_limit_or_may(calls, caplog, mode):
    clock = [0.0]
    actions = _actions({modes.MODE_LABEL: mode} if mode else {}, clock, evict=True)
    try:
        report, found = _over("a")
        actions.handle(found, report)
        actions.handle([], report)
        calls.wait("events", 1)
    finally:
        actions.stop()
    assert calls.evictions == []
    assert caplog.text.count("not evicting pod ml/a") == 1


def test_eviction_on_a_share_node_retries_while_a_budget_refuses_and_happens_once(calls):
    clock = [0.0]
    calls.refuse = 1
    actions = _actions({modes.MODE_LABEL: "share"}, clock, evict=True, retry_s=60)
    try:
        report, found = _over("a")
        actions.handle(found, report)
        calls.wait("evictions", 1)
        clock[0] = 30
        actions.handle([], report)  # within the retry interval: not again
        clock[0] = 61
        actions.handle([], report)
        calls.wait("evictions", 2)
        clock[0] = 200
        actions.handle([], report)  # evicted: never again while it is still listed
    finally:
        actions.stop()
    assert calls.evictions == ["a", "a"]
