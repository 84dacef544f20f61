"""The end-to-end test bed: `webhook.devcluster.release.Release` (the chart installed by Helm into the
real kube-apiserver, our three parts run on this host as the chart runs them, each with its own
ServiceAccount's token), plus what only the tests need: node groups, events, waiting.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.devcluster import objects as devobjects
from webhook.devcluster.release import (
    FULLNAME,
    GPUSHARE,
    NAMESPACE,
    RELEASE,
    SCHEDULER_NAME,
    Obj,
    Release,
    admin_api,
)
from webhook.kube import rest

__all__ = ["FULLNAME", "GPUSHARE", "NAMESPACE", "RELEASE", "SCHEDULER_NAME", "Bed", "admin_api"]
GROUP = "e2e-group"


class Bed(Release):
    """A started control plane plus the helpers the tests share; parts are started by the tests."""

    def node(
        self,
        name: str,
        gpus: int,
        gib_each: int,
        labels: Mapping[str, str] | None = None,
        *,
        taints: Sequence[Obj] = (),
        group: str = "",
        annotations: Mapping[str, str] | None = None,
    ) -> Obj:
        """A GPU Node; a `group` node is labelled and tainted so only that group's pods
        (objects.in_group) land there: tests that count exact memory are not disturbed by other tests'
        pending pods."""
        if group:
            labels = {**(labels or {}), GROUP: group}
            taints = [*taints, {"key": GROUP, "value": group, "effect": "NoSchedule"}]
        return devobjects.gpu_node(
            self.api, name, gpus, gib_each, labels, taints=taints, annotations=annotations
        )

    def events(self, namespace: str, pod: str) -> list[Obj]:
        items = self.request(
            "GET",
            rest.path("events", namespace=namespace),
            query={"fieldSelector": f"involvedObject.name={pod}"},
        )["items"]
        return list(items)

    def wait(self, what: str, predicate: Any, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")
