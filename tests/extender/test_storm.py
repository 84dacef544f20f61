"""The invariant check (tests/extender/invariant.py) and a short randomized storm of binds (storm.py)
against the API stand-in, with injected faults (chaos.py). bench/extender_invariant.py runs the soak."""

from __future__ import annotations

import threading

import pytest

from tests.extender import chaos, invariant, storm
from tests.extender.factory import FakeApi, pod
from webhook.devcluster.standin.apiserver import ApiServer

CAPACITY = {("n1", 0): 16, ("n1", 1): 8}


def bound(name: str, placed: dict[int, dict[int, int]], *gpu_mem: int, phase: str = "Running"):
    return pod(name, *gpu_mem, node_name="n1", placed=placed, phase=phase)


@pytest.mark.parametrize(
    ("pods", "found"),
    [
        ([bound("a", {0: {0: 10}}, 10), bound("b", {0: {1: 8}}, 8)], []),
        ([bound("a", {0: {0: 10}}, 10), bound("b", {0: {0: 10}}, 10)], ["GPU 0 of node n1 holds 20 of 16"]),
        ([bound("a", {0: {0: 10}}, 10), bound("b", {0: {0: 10}}, 10, phase="Succeeded")], []),
        ([bound("a", {0: {0: 4}}, 10)], ["pod default/a (UID uid-a) asks for 10 and holds 4"]),
        (
            [pod("a", 4, node_name="n1")],
            ["pod default/a (UID uid-a) asks for 4 and is bound without a placement"],
        ),
        ([bound("a", {0: {0: 4}}, 4)] * 2, ["pod default/a (UID uid-a) listed twice"]),
        ([bound("a", {0: {2: 4}}, 4)], ["GPU 2 of node n1 holds 4 of 0"]),
        ([pod("a", 40), pod("cpu")], []),
    ],
    ids=[
        "fits",
        "over-committed",
        "finished-pods-free-memory",
        "partial",
        "no-placement",
        "twice",
        "no-gpu",
        "pending",
    ],
)
def test_violations_are_read_from_the_stored_pods(pods, found):
    assert invariant.violations(pods, CAPACITY) == found


def test_a_pod_being_deleted_keeps_its_memory_until_it_is_gone():
    going = bound("a", {0: {0: 10}}, 10)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert invariant.violations([going, bound("b", {0: {0: 10}}, 10)], CAPACITY) == [
        "GPU 0 of node n1 holds 20 of 16"
    ]
    done = bound("a", {0: {0: 10}}, 10, phase="Failed")
    done["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert invariant.violations([done, bound("b", {0: {0: 10}}, 10)], CAPACITY) == []
    assert invariant.violations([bound("b", {0: {0: 10}}, 10)], CAPACITY) == []  # removed


def test_killed_faulty_api_sends_nothing_more_but_lets_calls_on_the_wire_finish():
    inner = FakeApi()
    inner.add(pod("a", 4))
    inner.gate.clear()
    faulty = chaos.FaultyBindingApi(inner, chaos.Faults.none())
    call = threading.Thread(target=faulty.bind, args=("default", "a", "uid-a", "n1", {}))
    call.start()
    assert inner.entered.wait(5)
    killer = threading.Thread(target=faulty.kill)
    killer.start()
    killer.join(0.1)
    assert killer.is_alive()  # waits for the Binding on the wire
    inner.gate.set()
    killer.join(5)
    call.join(5)
    assert len(inner.bound) == 1
    with pytest.raises(Exception, match="the extender process is gone"):
        faulty.get_pod("default", "a")
    assert faulty.injected[chaos.DEAD] == 1


def test_storm_of_duplicate_binds_deletes_restarts_and_faults_never_over_commits(apiserver: ApiServer):
    def disturb() -> None:  # the extender's watches break and must re-list
        apiserver.drop_watches()
        apiserver.compact()

    report = storm.run(
        apiserver.new_client,
        storm.Workload(binds=300, callers=8),
        chaos.Faults(latency_s=0.1, slow=0.5),
        disturb=disturb,
    )
    assert report.violations == [], report.summary()
    assert report.binds >= 300 and report.bound > 30 and report.checks > report.binds / 3
    assert report.restarts == 2 and report.deletes > 10
    assert report.injected[chaos.SLOW] and sum(report.injected.values()) > 20
