"""webhook.kube.leader against the API stand-in: one leader at a time, takeover, release, 409 races."""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

import pytest

from tests.standins.apiserver import ApiServer
from webhook.kube import leader


def settings(identity: str, **kw) -> leader.LeaderSettings:
    values = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.05, **kw}
    return leader.LeaderSettings(
        namespace="kube-system", name="gpushare-extender", identity=identity, **values
    )


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lease(apiserver: ApiServer) -> Any:
    obj = apiserver.get("leases", "gpushare-extender", "kube-system")
    assert obj is not None
    return obj["spec"]


def test_first_candidate_creates_the_lease_and_leads(apiserver):
    a = leader.LeaderElector(apiserver.api, settings("a"))
    assert a.try_acquire_or_renew() and a.is_leader()
    spec = lease(apiserver)
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0 and spec["renewTime"].endswith("Z")


def test_a_second_candidate_waits_while_the_holder_renews(apiserver):
    clock = Clock()
    a = leader.LeaderElector(apiserver.api, settings("a"), monotonic=clock)
    b = leader.LeaderElector(apiserver.api, settings("b"), monotonic=clock)
    assert a.try_acquire_or_renew()
    for _ in range(5):
        clock.now += 0.5
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew() and not b.is_leader()
    assert b.holder == "a"


def test_takeover_after_the_holder_stops_renewing_for_a_lease_duration(apiserver):
    clock = Clock()
    a = leader.LeaderElector(apiserver.api, settings("a"), monotonic=clock)
    b = leader.LeaderElector(apiserver.api, settings("b"), monotonic=clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b starts its own timer now
    clock.now += 0.9
    assert not b.try_acquire_or_renew()
    assert not a.is_leader()  # a did not renew within renew_deadline: it no longer claims to lead
    clock.now += 0.2
    assert b.try_acquire_or_renew() and b.is_leader()
    assert lease(apiserver)["holderIdentity"] == "b" and lease(apiserver)["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew() and not a.is_leader()


def test_release_lets_a_follower_take_over_at_once(apiserver):
    stopped = threading.Event()
    a = leader.LeaderElector(apiserver.api, settings("a"), on_stopped_leading=stopped.set)
    b = leader.LeaderElector(apiserver.api, settings("b"))
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release() and stopped.is_set() and not a.is_leader()
    assert lease(apiserver)["holderIdentity"] == ""
    assert b.try_acquire_or_renew()


def test_a_409_on_a_concurrent_update_means_losing_the_round(apiserver):
    a = leader.LeaderElector(apiserver.api, settings("a"))
    assert a.try_acquire_or_renew()
    a.release()
    apiserver.fail_next("update", "leases", status=409)
    b = leader.LeaderElector(apiserver.api, settings("b"))
    assert not b.try_acquire_or_renew() and not b.is_leader()
    assert b.try_acquire_or_renew()


def test_api_errors_are_a_lost_round_not_an_exception(apiserver):
    a = leader.LeaderElector(apiserver.api, settings("a"))
    apiserver.fail_next("get", "leases", status=500)
    assert not a.try_acquire_or_renew()
    assert a.last_error is not None and a.last_error.status == 500
    assert a.try_acquire_or_renew()


def test_two_running_candidates_never_lead_at_the_same_time_and_hand_over_on_stop(apiserver):
    leaders: list[str] = []
    overlap = threading.Event()
    candidates = {}

    for name in ("a", "b"):
        candidates[name] = leader.LeaderElector(
            apiserver.new_client(), settings(name), on_started_leading=partial(leaders.append, name)
        )
    for candidate in candidates.values():
        candidate.start()

    def check() -> None:
        while not overlap.is_set() and not stop_checking.is_set():
            if all(c.is_leader() for c in candidates.values()):
                overlap.set()
            time.sleep(0.005)

    stop_checking = threading.Event()
    checker = threading.Thread(target=check)
    checker.start()
    try:
        apiserver.wait_for(lambda: len(leaders) == 1, what="a leader")
        first = leaders[0]
        other = "b" if first == "a" else "a"
        time.sleep(0.3)  # several renewals; the follower must stay a follower
        assert leaders == [first]
        candidates[first].stop(release=True)
        apiserver.wait_for(candidates[other].is_leader, timeout=3, what="takeover")
        assert leaders == [first, other]
    finally:
        stop_checking.set()
        checker.join()
        for candidate in candidates.values():
            candidate.stop(release=False)
    assert not overlap.is_set()


def test_leader_that_cannot_reach_the_api_steps_down_after_the_renew_deadline(apiserver):
    stopped = threading.Event()
    a = leader.LeaderElector(apiserver.api, settings("a"), on_stopped_leading=stopped.set).start()
    try:
        apiserver.wait_for(a.is_leader, what="a leads")
        apiserver.fail_next("*", "leases", status=503, count=10_000)
        apiserver.wait_for(stopped.is_set, timeout=3, what="step down")
        assert not a.is_leader()
    finally:
        a.stop(release=False)


@pytest.mark.parametrize(
    ("kw", "problem"),
    [
        ({"identity": ""}, "identity"),
        ({"identity": "a", "renew_deadline": 2.0, "lease_duration": 1.0}, "renew_deadline < lease_duration"),
        ({"identity": "a", "retry_period": 0.0}, "0 < retry_period"),
    ],
    ids=["empty-identity", "deadline-above-duration", "zero-retry"],
)
def test_bad_settings_are_refused(kw, problem):
    values = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.05, **kw}
    with pytest.raises(ValueError, match=problem):
        leader.LeaderSettings(namespace="ns", name="l", **values)
