"""What a storm (tests/extender/storm.py) does, and what it found."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Workload:
    """What `run` does. GPU sizes per node; `names` pods re-created under the same names."""

    binds: int = 300
    seed: int = 1
    gpus: tuple[tuple[int, ...], ...] = ((16, 16), (16,), (24, 8), (16, 16, 16, 16))
    names: int = 20
    callers: int = 6  # scheduler threads
    duplicates: int = 3  # at most this many simultaneous binds of one pod
    other_node: float = 0.3  # share of duplicates sent to another node
    stale_uid: float = 0.05  # share of binds naming an older pod of the same name
    # Share of steps that ask filter first (as kube-scheduler does) and bind where it points: filter's
    # nominations (Cache.nominate) then race the binds; some filters are never followed by a bind.
    filter_first: float = 0.5
    filter_only: float = 0.1
    delete: float = 0.1  # share of steps that delete a pending pod (often while binds of it run)
    delete_bound: float = 0.7  # share of steps on a bound pod that delete it (else: bind it again)
    restarts: int = 2  # extender restarts, spread over the run
    disturbances: int = 2  # calls of run(disturb=...), spread over the run (e.g. cut watches, compact)
    namespace: str = "gpushare-invariant"
    node_prefix: str = "gpushare-inv"


@dataclass
class Report:
    binds: int = 0
    filters: int = 0  # filter calls answered
    bound: int = 0  # answered "" (duplicates included)
    refused: int = 0  # answered with an Error
    unreachable: int = 0  # no answer (the extender was restarting)
    sent: int = 0  # Bindings that reached the API server
    creates: int = 0
    deletes: int = 0
    restarts: int = 0
    checks: int = 0  # states of the API checked
    bad_states: int = 0  # states with at least one violation
    injected: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)  # Error texts, shapes
    violations: list[str] = field(default_factory=list)
    # Memory the extender still counted once every pod was deleted: safe (nothing over-commits) but held
    # until its assumption expires. Bind outcomes never learnt, pods deleted while a watch was down.
    leaked: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.injected.items())) or "none"
        return (
            f"{self.binds} binds ({self.bound} ok, {self.refused} refused, {self.unreachable} unanswered; "
            f"{self.sent} Bindings reached the API), {self.filters} filters, "
            f"{self.creates} creates, {self.deletes} deletes, {self.restarts} restarts, "
            f"{self.seconds:.1f} s; "
            f"faults injected: {faults}; {self.checks} API states checked, "
            f"{self.bad_states} in violation ({len(self.violations)} distinct violations), "
            f"{len(self.leaked)} GPUs with leaked reservations"
        )
