"""The usage loop: every `interval_s`, sample the GPUs (NVML or the fake), read the cgroups of their
processes, match both to the node's pods and shares (core/usage/usage.py), pass the result through the
over-share tracker, hand its findings to the actions, and keep the report that /metrics and /usage serve.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from webhook.core.usage import overshare, usage
from webhook.deviceplugin.state import DeviceState
from webhook.deviceplugin.usage.overshareactions import OverShareActions
from webhook.deviceplugin.usage.pods import PodSharesStore
from webhook.gpus.cgroupreader import CgroupReader
from webhook.gpus.usage.source import UsageSource
from webhook.kube import rounds

log = logging.getLogger(__name__)


class Observer:
    """Poll counts and cost for /metrics; the default counts nothing."""

    def polled(self, seconds: float, cpu_seconds: float, ok: bool) -> None:
        pass

    def reported(self, report: usage.NodeUsage) -> None:
        """A new report, before it is served on /usage (the metrics render its series here)."""


@dataclass(kw_only=True, eq=False)
class UsagePoller:
    source: UsageSource
    reader: CgroupReader
    pods: PodSharesStore
    state: DeviceState
    node_name: str
    tracker: overshare.OverShareTracker
    actions: OverShareActions | None = None
    observer: Observer = field(default_factory=Observer)
    interval_s: float = 10.0
    wall: Callable[[], float] = time.time
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.latest: usage.NodeUsage | None = None  # replaced whole: readers never see a half-made one
        self.polls = 0
        self._one_at_a_time = threading.Lock()  # the tracker is not thread-safe; tests poll directly too
        self._failing = False
        self._rounds = rounds.Rounds("gpu-usage", self._round, period_s=self.interval_s)

    def poll_once(self) -> usage.NodeUsage:
        with self._one_at_a_time:
            return self._poll()

    def _poll(self) -> usage.NodeUsage:
        samples = self.source.sample()
        pids = {p.pid for s in samples for p in s.processes}
        report = usage.attribute(
            node=self.node_name,
            sampled_at=self.wall(),
            gpus=self.state.gpus,
            unhealthy=self.state.unhealthy,
            samples=samples,
            origins=self.reader.origins(pids),
            pods=self.pods.snapshot(),
        )
        report, findings = self.tracker.observe(self.clock(), report)
        if self.actions is not None:
            self.actions.handle(findings, report)
        self.observer.reported(report)
        self.latest = report
        self.polls += 1
        return report

    def start(self) -> UsagePoller:
        self._rounds.poke()  # the first poll at once
        self._rounds.start()
        return self

    def stop(self) -> None:
        self._rounds.stop()

    def _round(self) -> None:
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            self.poll_once()
            ok = True
            if self._failing:
                log.info("sampling GPU usage works again")
            self._failing = False
        except Exception:  # a poll must never end the loop; the next one tries again
            ok = False
            if not self._failing:
                log.exception("sampling GPU usage failed; retrying every %g s", self.interval_s)
            self._failing = True
        self.observer.polled(time.perf_counter() - started, time.thread_time() - cpu, ok)
