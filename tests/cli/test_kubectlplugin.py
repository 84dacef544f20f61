"""The kubectl plugins only dispatch: `kubectl gpushare <command> [args]` is `gpushare <command> [args]`,
`kubectl inspect gpushare [args]` is `gpushare inspect [args]`, each telling the user the name they typed.
tests/e2e/test_kubectl_plugin.py runs them through the real kubectl."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from webhook import __version__
from webhook.cli import exitcodes, kubectlplugin, main

BIN = Path(sys.executable).parent
PLUGIN = "/usr/local/bin/kubectl-gpushare"
INSPECT_PLUGIN = "/usr/local/bin/kubectl-inspect-gpushare"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Every subcommand's main replaced by one that records what it was given and returns 0."""
    seen: list[tuple[str, list[str]]] = []
    for command in ("check", "inspect", "demo"):

        def record(argv: list[str], command: str = command) -> int:
            seen.append((command, list(argv)))
            return 0

        module = importlib.import_module(f"webhook.cli.{main.COMMANDS[command][0]}")
        monkeypatch.setattr(module, "main", record)
    return seen


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["inspect"], ("inspect", [])),
        (["inspect", "-d", "node-1", "-o", "json"], ("inspect", ["-d", "node-1", "-o", "json"])),
        (["check", "--quiet", "deploy/"], ("check", ["--quiet", "deploy/"])),
        (["demo", "--once"], ("demo", ["--once"])),
    ],
    ids=["inspect", "inspect-args", "check", "demo"],
)
def test_kubectl_gpushare_runs_the_command_with_its_arguments(calls, argv, expected) -> None:
    assert kubectlplugin.gpushare(argv) == 0
    assert calls == [expected]


@pytest.mark.parametrize(
    "argv", [[], ["-d"], ["node-1", "node-2"], ["-o", "json", "--kubeconfig", "/k"]], ids=str
)
def test_kubectl_inspect_gpushare_runs_inspect_with_every_argument(calls, argv) -> None:
    assert kubectlplugin.inspect_gpushare(argv) == 0
    assert calls == [("inspect", argv)]


def test_without_arguments_the_plugins_read_sys_argv(calls, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", [INSPECT_PLUGIN, "-d", "node-1"])
    assert kubectlplugin.inspect_gpushare() == 0
    monkeypatch.setattr("sys.argv", [PLUGIN, "check", "pod.yaml"])
    assert kubectlplugin.gpushare() == 0
    assert calls == [("inspect", ["-d", "node-1"]), ("check", ["pod.yaml"])]


def test_kubectl_gpushare_help_and_errors_say_kubectl_gpushare(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", [PLUGIN])
    assert kubectlplugin.gpushare([]) == exitcodes.USAGE
    assert "usage: kubectl gpushare <command> [options]" in capsys.readouterr().err
    assert kubectlplugin.gpushare(["frobnicate"]) == exitcodes.USAGE
    assert capsys.readouterr().err.startswith("kubectl gpushare: unknown command 'frobnicate'")
    with pytest.raises(SystemExit) as exit_:
        kubectlplugin.gpushare(["inspect", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kubectl gpushare inspect ")
    with pytest.raises(SystemExit) as exit_:
        kubectlplugin.gpushare(["check", "--output", "xml"])
    assert exit_.value.code == exitcodes.USAGE
    assert "kubectl gpushare check: error: argument -o/--output" in capsys.readouterr().err


def test_kubectl_inspect_gpushare_help_says_kubectl_inspect_gpushare(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", [INSPECT_PLUGIN])
    with pytest.raises(SystemExit) as exit_:
        kubectlplugin.inspect_gpushare(["--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kubectl inspect gpushare ")


def test_kubectl_gpushare_version_is_the_release(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", [PLUGIN])
    assert kubectlplugin.gpushare(["--version"]) == 0
    assert capsys.readouterr().out == f"gpushare {__version__}\n"


@pytest.mark.parametrize(
    ("script", "argv", "usage"),
    [
        ("kubectl-gpushare", ["inspect", "--help"], "usage: kubectl gpushare inspect "),
        ("kubectl-inspect-gpushare", ["--help"], "usage: kubectl inspect gpushare "),
    ],
    ids=["kubectl-gpushare", "kubectl-inspect-gpushare"],
)
def test_the_package_installs_both_plugin_scripts_beside_gpushare(script, argv, usage) -> None:
    # What kubectl finds on PATH; missing after a pyproject change until `pip install -e .` runs again.
    path = BIN / script
    assert path.is_file(), f"{path} is not installed: reinstall the package"
    done = subprocess.run([path, *argv], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(usage)
