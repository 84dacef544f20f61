"""Simulated GPUs (`simulation`): the node agents report declared GPUs instead of NVML only when the values
say so twice (the GPUs and `enabled`), and the declaration is one both agents' CLIs accept."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from tests.chart import render
from tests.chart.test_wiring import CLI_MODULES
from webhook.gpus import inventory

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)
GPUS = "0:16:Tesla V100-SXM2-16GB:7.0,1:16"


def _agent_args(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    out = {}
    for suffix in ("-device-plugin", "-dra-driver"):
        daemonset = render.find(objects, "DaemonSet", suffix)
        out[suffix] = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    return out


def test_by_default_the_node_agents_read_their_gpus_from_nvml() -> None:
    for args in _agent_args(render.render({"dra": {"enabled": True}})).values():
        assert not [a for a in args if a.startswith("--fake-gpus")], args


def test_enabled_both_node_agents_get_the_declared_gpus() -> None:
    values = {"dra": {"enabled": True}, "simulation": {"enabled": True, "gpus": GPUS}}
    for args in _agent_args(render.render(values)).values():
        assert f"--fake-gpus={GPUS}" in args
        module = importlib.import_module(f"webhook.cli.{CLI_MODULES[args[0]]}")
        assert module.build_parser().parse_args(args[1:]).fake_gpus == GPUS  # as the image's CLI reads it


def test_gpus_without_enabled_are_refused_with_the_reason() -> None:
    error = render.render_error({"simulation": {"gpus": GPUS}})
    assert "simulation.gpus declares GPUs that do not exist" in error
    assert "simulation.enabled=true" in error


def test_enabled_without_gpus_is_refused() -> None:
    error = render.render_error({"simulation": {"enabled": True}})
    assert "simulation.enabled=true needs simulation.gpus" in error


@pytest.mark.parametrize(
    "gpus", ["16", "a:16", "0:16,,1:16", "0:"], ids=["no-index", "letter", "empty", "no-memory"]
)
def test_a_malformed_declaration_is_refused_by_the_schema(gpus: str) -> None:
    error = render.render_error({"simulation": {"enabled": True, "gpus": gpus}})
    assert "/simulation/gpus" in error, error


NODES = {"gpu-a": "0:16:Tesla V100-SXM2-16GB:7.0,1:16:Tesla V100-SXM2-16GB:7.0", "gpu-b": "0:24, 1:24MiB"}


def test_each_nodes_own_gpus_reach_its_agents_as_the_inventory_file_named_after_it(tmp_path: Path) -> None:
    values = {"dra": {"enabled": True}, "simulation": {"enabled": True, "nodes": NODES}}
    objects = render.render(values)
    config = render.find(objects, "ConfigMap", "-simulation")
    assert sorted(config["data"]) == ["gpu-a.yaml", "gpu-b.yaml"]
    for suffix, args in _agent_args(objects).items():
        assert "--inventory-file=/etc/gpushare/simulation/$(NODE_NAME).yaml" in args, suffix
        assert not [a for a in args if a.startswith("--fake-gpus")], args
        pod = render.find(objects, "DaemonSet", suffix)["spec"]["template"]["spec"]
        mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["simulation"]["readOnly"] is True
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["simulation"]["configMap"]["name"] == config["metadata"]["name"]
    # What the agents read: each node's GPUs, as the CLI's --fake-gpus would declare them, but with UUIDs
    # of the node's own.
    read = {}
    for key, text in config["data"].items():
        path = tmp_path / key
        path.write_text(text)
        read[key] = inventory.load_inventory_file(path).gpus()
    a, b = read["gpu-a.yaml"], read["gpu-b.yaml"]
    v100 = "Tesla V100-SXM2-16GB"
    assert [(g.index, g.memory_mib, g.model) for g in a] == [(0, 16384, v100), (1, 16384, v100)]
    assert [(g.index, g.memory_mib) for g in b] == [(0, 24576), (1, 24)]
    uuids = [g.uuid for g in (*a, *b)]
    assert len(set(uuids)) == 4 and all(u.startswith("GPU-") for u in uuids)


def test_gpus_and_nodes_together_are_refused() -> None:
    error = render.render_error({"simulation": {"enabled": True, "gpus": GPUS, "nodes": NODES}})
    assert "simulation.gpus and simulation.nodes both declare GPUs" in error


def test_nodes_without_enabled_are_refused() -> None:
    error = render.render_error({"simulation": {"nodes": NODES}})
    assert "simulation.gpus declares GPUs that do not exist" in error
