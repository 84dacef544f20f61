"""Filter's nominations: where best fit sent a pod that kube-scheduler has not bound yet.

Bookkeeping only (which pod, on which node, since when; which pods were shown gone): the cache places and
releases their memory in its ledgers. kube-scheduler binds asynchronously, so the next pod's filter is
often answered before the previous pod's bind arrives; counting the nominated pod at once keeps that
filter from picking the same memory.
"""

from __future__ import annotations

from dataclasses import dataclass

# A nomination stops counting after 30 s: kube-scheduler sends the bind within milliseconds, or drops the
# pod back into its queue (and filters it again, which drops the nomination first).
NOMINATION_TTL_NS = 30 * 10**9
# UIDs of the pods the watch last showed gone, which filter never nominates (a late filter of a deleted pod
# would otherwise hold its memory for the whole TTL): more than are deleted in a TTL on large clusters.
GONE_REMEMBERED = 8192


@dataclass(frozen=True, slots=True)
class Nomination:
    """Memory counted for a pod on the one node filter left it, before its bind arrives."""

    uid: str
    node: str
    since_ns: int


class Nominations:
    """Not thread-safe: the cache calls it under its lock."""

    __slots__ = ("_by_key", "_gone")

    def __init__(self) -> None:
        self._by_key: dict[str, Nomination] = {}  # in the order they were made
        self._gone: dict[str, None] = {}  # GONE_REMEMBERED UIDs, oldest first

    def get(self, key: str) -> Nomination | None:
        return self._by_key.get(key)

    def add(self, key: str, nomination: Nomination) -> None:
        self._by_key.pop(key, None)  # re-inserted: the order stays the order they were made
        self._by_key[key] = nomination

    def pop(self, key: str) -> Nomination | None:
        return self._by_key.pop(key, None)

    def expired(self, now_ns: int) -> list[str]:
        """Keys of the nominations older than NOMINATION_TTL_NS: only the expired head is walked."""
        old = []
        for key, nomination in self._by_key.items():
            if now_ns - nomination.since_ns <= NOMINATION_TTL_NS:
                break
            old.append(key)
        return old

    def bury(self, uid: str) -> None:
        """The watch showed the pod of `uid` gone: it is never nominated again."""
        if uid:
            self._gone[uid] = None
            if len(self._gone) > GONE_REMEMBERED:
                del self._gone[next(iter(self._gone))]

    def gone(self, uid: str) -> bool:
        return uid in self._gone

    def nodes(self) -> dict[str, str]:
        return {key: n.node for key, n in self._by_key.items()}
