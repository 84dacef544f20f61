"""webhook.kube.leader against the API stand-in: one leader at a time, takeover, release, 409 races."""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

import pytest

from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import errors, leader, rest


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


URL = "gpushare.aliyun.com/extender-url"


def lease_annotations(apiserver: ApiServer) -> dict[str, str]:
    obj = apiserver.get("leases", "gpushare-extender", "kube-system")
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def test_holder_writes_its_annotations_when_it_creates_the_lease(apiserver):
    a = leader.LeaderElector(apiserver.api, settings("a", annotations={URL: "http://10.0.0.1:39999"}))
    assert a.try_acquire_or_renew()
    assert lease_annotations(apiserver) == {URL: "http://10.0.0.1:39999"}
    assert a.holder_annotations() == {URL: "http://10.0.0.1:39999"}


def test_no_annotations_configured_writes_none(apiserver):
    assert leader.LeaderElector(apiserver.api, settings("a")).try_acquire_or_renew()
    assert lease_annotations(apiserver) == {}


def test_renewal_merges_the_annotations_back_and_keeps_foreign_ones(apiserver):
    a = leader.LeaderElector(apiserver.api, settings("a", annotations={URL: "http://a"}))
    assert a.try_acquire_or_renew()
    apiserver.edit(
        "leases", "gpushare-extender", {"metadata": {"annotations": {URL: None, "x": "y"}}}, "kube-system"
    )
    assert a.try_acquire_or_renew()
    assert lease_annotations(apiserver) == {URL: "http://a", "x": "y"}


def test_a_follower_sees_the_holders_annotations_and_a_takeover_replaces_them(apiserver):
    clock = Clock()
    a = leader.LeaderElector(apiserver.api, settings("a", annotations={URL: "http://a"}), monotonic=clock)
    b = leader.LeaderElector(apiserver.api, settings("b", annotations={URL: "http://b"}), monotonic=clock)
    assert b.holder_annotations() == {}
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert b.holder_annotations() == {URL: "http://a"}
    clock.now += 1.1  # a stopped renewing for a lease duration
    assert b.try_acquire_or_renew()
    assert lease_annotations(apiserver) == {URL: "http://b"}
    assert b.holder_annotations() == {URL: "http://b"}
    assert not a.try_acquire_or_renew()
    assert a.holder_annotations() == {URL: "http://b"}


def test_release_removes_only_the_holders_annotations(apiserver):
    a = leader.LeaderElector(apiserver.api, settings("a", annotations={URL: "http://a"}))
    b = leader.LeaderElector(apiserver.api, settings("b"))
    assert a.try_acquire_or_renew()
    apiserver.edit("leases", "gpushare-extender", {"metadata": {"annotations": {"x": "y"}}}, "kube-system")
    assert not b.try_acquire_or_renew()
    assert b.holder_annotations() == {URL: "http://a", "x": "y"}
    assert a.release()
    assert lease_annotations(apiserver) == {"x": "y"}
    assert a.holder_annotations() == {}
    assert b.try_acquire_or_renew()  # b has no annotations of its own: the foreign one stays
    assert b.holder_annotations() == {"x": "y"}


def test_annotations_of_a_released_lease_name_no_holder(apiserver):
    """An old release left an annotation behind: with no holder it describes nobody."""
    a = leader.LeaderElector(apiserver.api, settings("a", annotations={URL: "http://a"}))
    b = leader.LeaderElector(apiserver.api, settings("b"), monotonic=Clock())
    assert a.try_acquire_or_renew()
    apiserver.edit("leases", "gpushare-extender", {"spec": {"holderIdentity": ""}}, "kube-system")
    apiserver.fail_next("update", "leases", status=409)
    assert not b.try_acquire_or_renew()
    assert lease_annotations(apiserver) == {URL: "http://a"}
    assert b.holder_annotations() == {}


def test_holder_annotations_can_be_read_while_campaigning(apiserver):
    a = leader.LeaderElector(apiserver.api, settings("a", annotations={URL: "http://a"})).start()
    b = leader.LeaderElector(apiserver.new_client(), settings("b", annotations={URL: "http://b"}))
    try:
        apiserver.wait_for(a.is_leader, what="a leads")
        b.start()
        apiserver.wait_for(lambda: b.holder_annotations() == {URL: "http://a"}, what="b sees a's URL")
        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:  # readers never see a half-built map
            assert b.holder_annotations() in ({URL: "http://a"}, {URL: "http://b"})
        a.stop(release=True)
        apiserver.wait_for(lambda: b.holder_annotations() == {URL: "http://b"}, what="b's own URL")
    finally:
        a.stop(release=False)
        b.stop(release=False)


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


def _two(apiserver: ApiServer, clock: Clock) -> tuple[leader.LeaderElector, leader.LeaderElector]:
    timings = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}
    return (
        leader.LeaderElector(apiserver.api, settings("a", **timings), monotonic=clock),
        leader.LeaderElector(apiserver.api, settings("b", **timings), monotonic=clock),
    )


def _overlap(
    a: leader.LeaderElector, b: leader.LeaderElector, clock: Clock, who: dict[str, str]
) -> list[float]:
    """Seconds (from 1000) at which both claim to lead, trying in turns for 30 s."""
    both = []
    while clock.now < 1030:
        clock.now += 1.0
        for name, elector in (("a", a), ("b", b)):
            who["now"] = name
            elector.try_acquire_or_renew()
        if a.is_leader() and b.is_leader():
            both.append(clock.now - 1000)
    return both


def _cut() -> errors.ApiError:
    return errors.UnreachableError(errors.TRANSPORT, "Timeout", "partitioned from the API server")


def _a_leads(a: leader.LeaderElector, b: leader.LeaderElector, clock: Clock, who: dict[str, str]) -> None:
    """t=0: a takes the Lease, b sees it held; then t=1."""
    who["now"] = "a"
    assert a.try_acquire_or_renew()
    who["now"] = "b"
    assert not b.try_acquire_or_renew()
    clock.now += 1


def test_a_renewal_whose_reply_comes_late_is_dated_from_when_it_was_sent(apiserver, monkeypatch):
    # a's renewal is committed (and seen by b) at t=1, its reply reaches a at t=9, then a is cut off from
    # the API server: b takes over at t=16, so a must stop leading by then, counting from t=1.
    clock = Clock()
    a, b = _two(apiserver, clock)
    real, who, slow = rest.request, {"now": ""}, {"a": False, "cut": False}

    def request(api: Any, method: str, path: str, **kw: Any) -> Any:
        if who["now"] == "a" and slow["cut"]:
            raise _cut()
        reply = real(api, method, path, **kw)
        if who["now"] == "a" and slow["a"] and method == "PUT":
            who["now"] = "b"
            assert not b.try_acquire_or_renew()
            who["now"], clock.now = "a", clock.now + 8
        return reply

    monkeypatch.setattr(rest, "request", request)
    _a_leads(a, b, clock, who)
    slow["a"], who["now"] = True, "a"
    assert a.try_acquire_or_renew()
    slow["cut"] = True
    assert _overlap(a, b, clock, who) == []


def test_another_holders_renewal_is_dated_from_when_our_read_returned(apiserver, monkeypatch):
    # b's GET is sent at t=1 and answered at t=9 with a's renewal made at t=9; a is then cut off: b must
    # not take over before a's renew deadline, counting from t=9.
    clock = Clock()
    a, b = _two(apiserver, clock)
    real, who, state = rest.request, {"now": ""}, {"a_down": False, "b_slow": False}

    def request(api: Any, method: str, path: str, **kw: Any) -> Any:
        if who["now"] == "a" and state["a_down"]:
            raise _cut()
        if who["now"] == "b" and state["b_slow"] and method == "GET":
            state["b_slow"], who["now"], clock.now = False, "a", clock.now + 8
            assert a.try_acquire_or_renew()
            state["a_down"], who["now"] = True, "b"
        return real(api, method, path, **kw)

    monkeypatch.setattr(rest, "request", request)
    _a_leads(a, b, clock, who)
    state["b_slow"] = True
    assert not b.try_acquire_or_renew()
    assert _overlap(a, b, clock, who) == []
