"""What a bind counts before the watch shows it: an `Assumption` per pod, and when an event of another
pod of the same name shows the assumed one gone (`replaces`). The cache keeps them (`Cache.assume`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.placement import accounting

# A bound pod the watch never shows stops counting after 15 minutes: longer than a silently stalled pod
# watch can go unnoticed (WatchSettings.read_timeout_s, 330 s) with room to resume and catch up, so a
# stall never drops a pod the watch has yet to show bound.
ASSUME_TTL_NS = 900 * 10**9


@dataclass(frozen=True, slots=True)
class Assumption:
    """Memory counted for a pod before the watch shows it bound. `token` names the bind that made it;
    `bound`: the API accepted its Binding (else it is in flight, or its outcome is unknown)."""

    token: int
    uid: str
    node: str
    since_ns: int
    bound: bool = False
    created: str = ""  # the assumed pod's creationTimestamp ("" when unknown)
    older: frozenset[str] = frozenset()  # UIDs of older pods of the same name the cache had seen


def replaces(assumption: Assumption, uid: str, created: str, bound: bool) -> bool:
    """Whether an event of another pod of the assumed pod's name (`uid`, created at `created`; `bound`:
    it is bound and holds memory) shows the assumed one gone. Not when it is older or known to the cache
    as a predecessor: a late event of the pod that name had before (the watch is behind the GET that
    showed the binder the newer one), which must not drop the newer pod's memory. A later creation time
    does. In the same second (the timestamp's resolution) or without times the order cannot be read: one
    ledger entry per name counts one of the two, so the pod the API shows holding memory is counted, and
    one that holds none leaves the assumption counting (at worst until the assumed pod's own events or
    the TTL: an over-count, never an over-commit)."""
    if uid in assumption.older or newer(assumption.created, created):
        return False
    return newer(created, assumption.created) or bound


def holds(pod: Mapping[str, Any]) -> bool:
    """The pod is bound and holds memory: what `replaces` is told of a namesake's event (not a DELETED)."""
    return bool(accounting.node_name_of(pod)) and accounting.holds_memory(pod)


def newer(created: str, than: str) -> bool:
    """Creation times (RFC 3339, UTC, seconds) known and strictly later: only then is the order read."""
    return bool(created and than) and created > than
