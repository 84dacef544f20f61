"""The extender's promise against the real kube-apiserver: a randomized storm of binds (duplicates of one
pod to the same and to other nodes, older UIDs, deletes and re-creations under the same names, extender
restarts, injected latency, 409 and 500 between the binder and the API) never over-commits a GPU,
judged from the pods the API server stores, after every change the checker's watch shows.
bench/extender_invariant.py runs the same harness for 10,000+ binds."""

from __future__ import annotations

from typing import Any

from tests.e2e.bed import Bed
from tests.extender import chaos, storm
from webhook.kube import client


def test_a_storm_of_binds_against_the_real_api_server_never_over_commits(bed: Bed) -> None:
    def connect() -> Any:
        return client.connect(client.ClientSettings(kubeconfig=str(bed.cp.admin_kubeconfig)))

    report = storm.run(
        connect,
        storm.Workload(binds=300, callers=8, restarts=2, namespace="e2e-invariant", node_prefix="e2e-inv"),
        chaos.Faults(latency_s=0.1, slow=0.4, each_first=True),
    )
    assert report.violations == [], report.summary()
    assert report.binds >= 300 and report.bound > 30, report.summary()
    assert report.sent > 30 and report.restarts == 2 and report.deletes > 10, report.summary()
    # Every kind of fault reached the binder, and the checker judged many states of the API.
    assert {chaos.SLOW, chaos.CONFLICT, chaos.ERROR, chaos.LOST_REPLY} <= set(report.injected), (
        report.summary()
    )
    assert report.checks > report.binds / 3, report.summary()
