"""Over-share: the grace period, Events once and then per interval, the node-wide budget, and which node
modes let the opt-in eviction act."""

from __future__ import annotations

import dataclasses

import pytest

from webhook.core.placement import modes
from webhook.core.usage import overshare, usage

GIB = 1 << 30


def _report(*used: int) -> usage.NodeUsage:
    rows = tuple(
        usage.ContainerUsage("ml", f"p{i}", "main", f"uid-{i}", 0, share_bytes=4 * GIB, used_bytes=u)
        for i, u in enumerate(used)
    )
    return usage.NodeUsage("n1", 0.0, (), rows)


def _changes(findings: list[overshare.Finding]) -> list[tuple[str, str]]:
    return [(f.change.value, f.usage.pod) for f in findings]


def test_over_only_after_the_grace_period_then_events_per_interval_then_cleared():
    tracker = overshare.OverShareTracker(grace_s=60, event_interval_s=600)
    report, found = tracker.observe(0, _report(5 * GIB))
    assert found == [] and not report.containers[0].over_share
    report, found = tracker.observe(59.9, _report(5 * GIB))
    assert found == [] and report.over_share() == ()
    report, found = tracker.observe(60, _report(5 * GIB))
    assert _changes(found) == [("over", "p0")] and found[0].seconds == 60
    assert [c.pod for c in report.over_share()] == ["p0"]
    _, found = tracker.observe(600, _report(5 * GIB))
    assert found == []  # flagged at 60: the next Event is due at 660
    _, found = tracker.observe(660, _report(5 * GIB))
    assert _changes(found) == [("still_over", "p0")]
    report, found = tracker.observe(700, _report(4 * GIB))  # at its share is within it
    assert _changes(found) == [("cleared", "p0")] and report.over_share() == ()


def test_dipping_under_restarts_the_grace_period():
    tracker = overshare.OverShareTracker(grace_s=60, event_interval_s=600)
    tracker.observe(0, _report(5 * GIB))
    _, found = tracker.observe(30, _report(GIB))
    assert found == []  # never flagged: no "cleared"
    _, found = tracker.observe(80, _report(5 * GIB))
    assert found == []
    _, found = tracker.observe(140, _report(5 * GIB))
    assert _changes(found) == [("over", "p0")]


def test_a_container_that_goes_away_is_forgotten_without_a_finding():
    tracker = overshare.OverShareTracker(grace_s=0, event_interval_s=600)
    _, found = tracker.observe(0, _report(5 * GIB, 5 * GIB))
    assert _changes(found) == [("over", "p0"), ("over", "p1")]
    _, found = tracker.observe(1, _report(5 * GIB))
    assert found == []
    _, found = tracker.observe(2, _report(5 * GIB, 5 * GIB))
    assert _changes(found) == [("over", "p1")]  # came back: a new episode


def test_a_zero_share_is_over_as_soon_as_it_uses_anything():
    tracker = overshare.OverShareTracker(grace_s=0, event_interval_s=600)
    row = dataclasses.replace(_report(1).containers[0], share_bytes=0)
    _, found = tracker.observe(0, usage.NodeUsage("n1", 0.0, (), (row,)))
    assert _changes(found) == [("over", "p0")]


def test_the_event_budget_allows_a_burst_then_refills_at_its_rate():
    budget = overshare.EventBudget(per_minute=6, burst=2)
    assert [budget.take(0), budget.take(0), budget.take(0)] == [True, True, False]
    assert budget.take(9) is False  # 0.9 of a token
    assert budget.take(10) is True
    assert budget.take(1000) is True and budget.take(1000) is True and budget.take(1000) is False


@pytest.mark.parametrize(
    ("labels", "allowed", "needle"),
    [
        ({modes.MODE_LABEL: "share"}, True, ""),
        ({modes.MODE_LABEL: "cgpu"}, False, "enforces the limit"),
        ({modes.MODE_LABEL: "mps"}, False, "enforces the limit"),
        ({}, False, "may run cGPU (legacy mode); label it share"),
        ({modes.MODE_LABEL: "default"}, False, "is not the share mode"),
    ],
    ids=["share", "cgpu", "mps", "unlabelled-legacy", "default"],
)
def test_eviction_acts_only_on_nodes_labelled_share(labels, allowed, needle):
    refusal = overshare.eviction_refusal(labels)
    assert (refusal is None) is allowed
    assert needle in (refusal or "")


def test_the_message_names_container_gpu_use_share_and_time():
    row = dataclasses.replace(_report(int(5.2 * GIB)).containers[0], gpu=1)
    over = overshare.Finding(overshare.Change.OVER, row, 75.4)
    assert overshare.describe(over, "GPU-b") == (
        "container 'main' uses 5.2 GiB of GPU 1 (GPU-b), above its share of 4.0 GiB, for 75 s; other pods "
        "on this GPU may run out of memory"
    )
    cleared = overshare.Finding(overshare.Change.CLEARED, dataclasses.replace(row, used_bytes=300 << 20), 90)
    assert (
        overshare.describe(cleared)
        == "container 'main' is back within its share of GPU 1: uses 300 MiB of 4.0 GiB"
    )
