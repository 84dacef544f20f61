"""What a bind counts before the watch shows it: an `Assumption` per pod, and when an event of another
pod of the same name shows the assumed one gone (`replaces`). The cache keeps them (`Cache.assume`)."""

from __future__ import annotations

from dataclasses import dataclass

ASSUME_TTL_NS = 300 * 10**9  # a bound pod the watch never shows again stops counting after 5 minutes


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


def replaces(assumption: Assumption, uid: str, created: str) -> bool:
    """Whether an event of another pod of the assumed pod's name (`uid`, created at `created`) shows the
    assumed one gone. Not when it is older, known to the cache as a predecessor or created earlier: a
    late event of the pod that name had before (the watch is behind the GET that showed the binder the
    newer one), which must not drop the newer pod's memory. Unknown or equal times count as newer: the
    watch then settles it within its lag."""
    if uid in assumption.older:
        return False
    return not (created and assumption.created and created < assumption.created)
