"""What bench/placement.py reads while a run goes: bindings counted from a watch, CPU seconds of every
process (/proc), new TCP connections, kube-apiserver's request and APF metrics, the extender's own time
per call."""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import realbed  # the script's directory is on sys.path when it runs

from tests.e2e.bed import Bed
from webhook.devcluster.process import Process
from webhook.kube import rest, watch

TICK = os.sysconf("SC_CLK_TCK")


class Bindings:
    """Counts the pods of a namespace that have a node, from a watch (no LIST per poll)."""

    def __init__(self, bed: Bed, ns: str) -> None:
        self.bound: set[str] = set()
        self.last_change = time.monotonic()
        self.lock = threading.Lock()
        self.watcher = watch.Watcher(bed.api, rest.path("pods", namespace=ns), self._on, name=f"bench-{ns}")

    def _on(self, event: watch.WatchEvent) -> None:
        pods = event.objects if event.type == watch.RESYNC else (event.object,) if event.object else ()
        with self.lock:
            for pod in pods:
                if pod["spec"].get("nodeName") and pod["metadata"]["name"] not in self.bound:
                    self.bound.add(pod["metadata"]["name"])
                    self.last_change = time.monotonic()

    def count(self) -> int:
        with self.lock:
            return len(self.bound)

    def __enter__(self) -> Bindings:
        self.watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.watcher.stop()


def cpu_seconds(processes: list[Process]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in processes:
        try:
            fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[p.name] = (int(fields[11]) + int(fields[12])) / TICK  # utime + stime
    return out


def tcp_opened() -> int:
    """TCP connections this machine has accepted so far (/proc/net/snmp Tcp PassiveOpens). In a run's
    window only kube-scheduler opens new ones (to the extender: Go keeps 2 idle connections per host on
    HTTP/1.1, so binds in flight past that close theirs and the next ones handshake anew)."""
    header, values = (
        line.split() for line in Path("/proc/net/snmp").read_text().splitlines() if line.startswith("Tcp:")
    )
    return int(values[header.index("PassiveOpens")])


def apiserver_metrics(bed: Bed, *names: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each sample of `names` on kube-apiserver's /metrics."""
    pattern = re.compile(rf"^({'|'.join(map(re.escape, names))})\{{([^}}]*)\}} (\S+)$")
    for line in bed.cp.get_raw("/metrics").decode().splitlines():
        m = pattern.match(line)
        if m:
            yield m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))), float(m.group(3))


def api_requests(bed: Bed) -> Counter[tuple[str, str]]:
    """Requests kube-apiserver served (verb, resource[/subresource]) and those it sent etcd
    ("etcd " + operation, resource type), counted so far; ("ms", "pods/binding"): its milliseconds spent
    on Bindings."""
    counts: Counter[tuple[str, str]] = Counter()
    names = ("apiserver_request_total", "etcd_requests_total", "apiserver_request_duration_seconds_sum")
    for name, labels, value in apiserver_metrics(bed, *names):
        sub = labels.get("subresource", "")
        if name == "apiserver_request_duration_seconds_sum":
            if sub == "binding":
                counts[("ms", "pods/binding")] += int(1000 * value)
        elif name == "etcd_requests_total":
            counts[("etcd " + labels.get("operation", ""), labels.get("type", ""))] += int(value)
        else:
            counts[(labels.get("verb", ""), labels.get("resource", "") + (f"/{sub}" if sub else ""))] += int(
                value
            )
    return counts


def apf_waits(bed: Bed) -> dict[tuple[str, str], tuple[float, float]]:
    """API Priority and Fairness: (seconds waited in queue, requests) so far per (priority level, flow
    schema), from kube-apiserver's apiserver_flowcontrol_request_wait_duration_seconds."""
    waits: dict[tuple[str, str], list[float]] = {}
    prefix = "apiserver_flowcontrol_request_wait_duration_seconds"
    for name, labels, value in apiserver_metrics(bed, f"{prefix}_sum", f"{prefix}_count"):
        cell = waits.setdefault((labels.get("priority_level", ""), labels.get("flow_schema", "")), [0.0, 0.0])
        cell[0 if name.endswith("_sum") else 1] += value
    return {key: (total, count) for key, (total, count) in waits.items()}


def extender_times(bed: Bed) -> str:
    text = realbed.extender_metrics(bed)
    shown = []
    for route in ("filter", "prioritize", "bind"):
        total = count = 0.0
        for line in text.splitlines():
            if f'endpoint="{route}"' in line and line.startswith(
                "gpushare_extender_request_duration_seconds_sum"
            ):
                total += float(line.rsplit(" ", 1)[1])
            elif f'endpoint="{route}"' in line and line.startswith(
                "gpushare_extender_request_duration_seconds_count"
            ):
                count += float(line.rsplit(" ", 1)[1])
        shown.append(f"{route} {1000 * total / count:.2f} ms x {count:.0f}" if count else f"{route} none")
    return ", ".join(shown)


# -- runs ----------------------------------------------------------------------------------------------


def idle_cpu(bed: Bed, seconds: float = 5.0) -> dict[str, float]:
    """CPU seconds per second each process spends with nothing to schedule (leases, controllers)."""
    processes = [*bed.cp.processes, *bed.processes]
    before = cpu_seconds(processes)
    time.sleep(seconds)
    after = cpu_seconds(processes)
    return {name: (after[name] - before.get(name, 0.0)) / seconds for name in after}
