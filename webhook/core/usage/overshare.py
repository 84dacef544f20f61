"""Over-share detection: a container using more of a GPU's memory than its share for longer than a grace
period. Pure state machines fed with `now`: which containers are over, when an Event is due (once when
the grace passes, then at most every `event_interval_s` per container, within a node-wide budget), and
whether a node's mode lets the opt-in policy evict (only `share`: cgpu and mps enforce the limit).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass

from webhook.core.placement import modes
from webhook.core.usage.usage import ContainerUsage, NodeUsage

REASON = "GPUMemoryOverShare"  # the Event's reason


class Change(enum.StrEnum):
    OVER = "over"  # the grace period passed: log, Event, maybe evict
    STILL_OVER = "still_over"  # still over after another event interval: Event again
    CLEARED = "cleared"  # back at or under its share: log


@dataclass(frozen=True, slots=True)
class Finding:
    change: Change
    usage: ContainerUsage
    seconds: float  # how long it has been above its share


@dataclass(slots=True)
class _State:
    since: float
    flagged: bool = False
    last_event: float | None = None


class OverShareTracker:
    """Per (pod UID, container, GPU): since when it is above its share. Not thread-safe (one poller)."""

    def __init__(self, grace_s: float, event_interval_s: float) -> None:
        self.grace_s = grace_s
        self.event_interval_s = event_interval_s
        self._states: dict[tuple[str, str, int], _State] = {}

    def observe(self, now: float, usage: NodeUsage) -> tuple[NodeUsage, list[Finding]]:
        """`usage` with `over_share` set where the grace has passed, and what changed."""
        findings: list[Finding] = []
        rows = []
        seen = set()
        for row in usage.containers:
            key = row.key
            seen.add(key)
            state = self._states.get(key)
            if not row.above_share:
                if state is not None:
                    del self._states[key]
                    if state.flagged:
                        findings.append(Finding(Change.CLEARED, row, now - state.since))
                rows.append(row)
                continue
            if state is None:
                state = self._states[key] = _State(since=now)
            over_for = now - state.since
            if over_for >= self.grace_s:
                if not state.flagged:
                    state.flagged, state.last_event = True, now
                    findings.append(Finding(Change.OVER, row, over_for))
                elif state.last_event is not None and now - state.last_event >= self.event_interval_s:
                    state.last_event = now
                    findings.append(Finding(Change.STILL_OVER, row, over_for))
                rows.append(dataclasses.replace(row, over_share=True))
                continue
            rows.append(row)
        for key in set(self._states) - seen:  # the pod or its process is gone: nothing to report
            del self._states[key]
        return dataclasses.replace(usage, containers=tuple(rows)), findings


class EventBudget:
    """A token bucket: at most `burst` Events at once, refilled at `per_minute`; keeps a node whose
    containers all go over from flooding the API server."""

    def __init__(self, per_minute: float = 10.0, burst: int = 10) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._tokens = float(burst)
        self._at: float | None = None

    def take(self, now: float) -> bool:
        if self._at is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


def eviction_refusal(labels: Mapping[str, object]) -> str | None:
    """None when the opt-in eviction may act on a node with these labels; otherwise why not.

    Only a node labelled `share` qualifies: on cgpu and mps nodes the limit is enforced (a container
    cannot take more), and an unlabelled legacy node may run cGPU (docs/modes.md), so it is not guessed.
    """
    raw = labels.get(modes.MODE_LABEL)
    if raw == modes.Mode.SHARE.value:
        return None
    if raw in (modes.Mode.CGPU.value, modes.Mode.MPS.value):
        return f"node label {modes.MODE_LABEL}={raw} enforces the limit; not evicting"
    if raw is None:
        return (
            f"node without the {modes.MODE_LABEL} label may run cGPU (legacy mode); label it share to "
            "let over-share eviction act"
        )
    return f"node label {modes.MODE_LABEL}={raw} is not the share mode; not evicting"


def describe(finding: Finding, uuid: str = "") -> str:
    """The Event and log message: which container, how much of which GPU, its share, for how long."""
    row = finding.usage
    gpu = f"GPU {row.gpu}" + (f" ({uuid})" if uuid else "")
    if finding.change is Change.CLEARED:
        return (
            f"container {row.container!r} is back within its share of {gpu}: uses "
            f"{format_bytes(row.used_bytes)} of {format_bytes(row.share_bytes)}"
        )
    return (
        f"container {row.container!r} uses {format_bytes(row.used_bytes)} of {gpu}, above its share of "
        f"{format_bytes(row.share_bytes)}, for {finding.seconds:.0f} s; other pods on this GPU may run out "
        "of memory"
    )


def format_bytes(amount: int) -> str:
    """`5.2 GiB`, `300 MiB`: one decimal above 1 GiB."""
    if amount >= 1 << 30:
        return f"{amount / (1 << 30):.1f} GiB"
    return f"{amount / (1 << 20):.0f} MiB"
