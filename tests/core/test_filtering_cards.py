"""Tests for the whole-card step of webhook.core.placement.filtering.choose (core.placement.wholecards.judge),
on a NodeState built from plain dicts: which plugin serves a node's cards, and why none may go there."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.placement import accounting, allocator, filtering, modes, podask, wholecards
from webhook.core.placement import annotations as ann
from webhook.core.placement.summaries import UNKNOWN_NODE, Summaries
from webhook.core.wire import resources

NAMES = resources.GpuResourceNames()


def label_problem(value: str) -> str:
    with pytest.raises(modes.ModeError) as err:
        modes.node_mode({modes.MODE_LABEL: value})
    return str(err.value)


BAD_LABEL = label_problem("Cgpu")  # what the cache keeps for a node whose mode label it cannot read


def ask(**limits: str) -> podask.PodAsk:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    return podask.read(pod, {}, NAMES, "GiB")


CARDS = ask(**{resources.NVIDIA_GPU: "2"})


def ledger(name: str, *used: int, unhealthy: tuple[int, ...] = ()) -> accounting.Ledger:
    """A node of 16 GiB GPUs, GPU i holding used[i] GiB of one pod each."""
    devices = tuple(ann.GpuDevice(i, f"GPU-{i}", 16, i not in unhealthy) for i in range(len(used)))
    out = accounting.Ledger(name)
    out.set_devices(ann.NodeDevices("GiB", devices))
    for i, units in enumerate(used):
        if units:
            out.place(accounting.PodShare(f"ns/s{i}", f"s{i}", ann.Allocation({0: {i: units}})))
    return out


def state(
    nodes: dict[str, tuple[modes.Mode | str, accounting.Ledger]], blocked: dict[str, str] | None = None
) -> filtering.NodeState:
    ledgers = {name: held for name, (_, held) in nodes.items()}
    node_modes = {name: mode for name, (mode, _) in nodes.items()}
    return filtering.NodeState("GiB", Summaries(ledgers, set(nodes)), {}, blocked or {}, {}, node_modes)


def choose(nodes: filtering.NodeState, *names: str, pod: podask.PodAsk = CARDS) -> filtering.Choice:
    return filtering.choose(pod, nodes, names, allocator.Policy.BINPACK)


def test_a_node_whose_cards_nvidias_plugin_serves_passes_untouched():
    got = choose(state({"n": (modes.Mode.DEFAULT, ledger("n", 0))}), "n")  # one GPU: kube-scheduler counts
    assert (got.passed, got.failed, got.unresolvable) == (["n"], {}, {})


def test_a_shared_node_with_enough_empty_gpus_passes_and_is_not_nominated():
    got = choose(state({"n": (modes.Mode.SHARE, ledger("n", 0, 4, 0))}), "n")
    assert (got.passed, got.failed, got.unresolvable, got.nominee) == (["n"], {}, {}, None)


def test_a_full_shared_node_fails_as_evicting_its_pods_would_make_room():
    got = choose(state({"n": (modes.Mode.CGPU, ledger("n", 0, 4))}), "n")
    assert got.passed == [] and got.unresolvable == {}
    assert got.failed == {
        "n": "pod asks for 2 whole GPUs, 1 of the node's 2 healthy GPUs hold nothing "
        "(a whole GPU never shares with gpu-mem pods)"
    }


def test_a_shared_node_with_too_few_healthy_gpus_is_unresolvable():
    got = choose(state({"n": (modes.Mode.MPS, ledger("n", 0, 0, unhealthy=(1,)))}), "n")
    assert got.unresolvable == {"n": "pod asks for 2 whole GPUs, node has 1 healthy"}
    assert got.passed == [] and got.failed == {}


def test_an_unknown_node_fails_as_its_watch_may_yet_show_it():
    got = choose(state({}), "ghost")
    assert (got.passed, got.failed, got.unresolvable) == ([], {"ghost": UNKNOWN_NODE}, {})


def test_a_node_whose_mode_label_is_unreadable_is_unresolvable_with_the_labels_problem():
    got = choose(state({"n": (BAD_LABEL, ledger("n", 0, 0))}), "n")
    assert (got.passed, got.failed, got.unresolvable) == ([], {}, {"n": BAD_LABEL})


def test_a_node_nvidias_plugin_serves_fails_while_shares_of_ours_still_run_there():
    got = choose(state({"n": (modes.Mode.TOPOLOGY, ledger("n", 0, 2))}), "n")
    assert (got.passed, got.failed, got.unresolvable) == ([], {"n": wholecards.SHARES_LEFT}, {})


def test_a_blocked_shared_node_fails_with_its_block_as_the_reason():
    why = "the node runs 1 whole-GPU pod(s) that NVIDIA's plugin placed"
    got = choose(state({"n": (modes.Mode.SHARE, ledger("n", 0, 0))}, {"n": why}), "n")
    assert (got.passed, got.failed, got.unresolvable) == ([], {"n": why}, {})


def test_every_node_is_sorted_in_the_order_it_was_sent():
    nodes = state(
        {
            "nvidia": (modes.Mode.DEFAULT, ledger("nvidia", 0)),
            "full": (modes.Mode.SHARE, ledger("full", 4, 4)),
            "room": (modes.Mode.SHARE, ledger("room", 0, 0)),
            "bad": (BAD_LABEL, ledger("bad")),
        }
    )
    got = choose(nodes, "room", "ghost", "bad", "full", "nvidia")
    assert got.passed == ["room", "nvidia"]
    assert list(got.failed) == ["ghost", "full"] and list(got.unresolvable) == ["bad"]


def test_a_pod_asking_nothing_of_ours_passes_every_node_known_blocked_or_not():
    nodes = state({"n": (modes.Mode.DEFAULT, ledger("n", 0))}, {"n": "takes no shares"})
    got = choose(nodes, "n", "ghost", pod=ask(cpu="1"))
    assert (got.passed, got.failed, got.unresolvable, got.nominee) == (["n", "ghost"], {}, {}, None)


@pytest.mark.parametrize("mode", [modes.Mode.SHARE, modes.Mode.DEFAULT])
def test_prioritize_has_no_preference_for_a_card_pod(mode: modes.Mode):
    nodes = state({"n": (mode, ledger("n", 0, 0))})
    assert filtering.scores(CARDS, nodes, ["n", "ghost"], allocator.Policy.BINPACK) == {
        "n": allocator.MIN_SCORE,
        "ghost": allocator.MIN_SCORE,
    }
