"""What the node agents' commands (`gpushare device-plugin`, `gpushare dra-driver`) share: their common
flags and the settings they give (webhook/nodeagent/settings.py), and the run that turns a bad flag into
exit 2 and a failure at start into exit 1."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from webhook.cli import exitcodes
from webhook.core.node import cdidevices, devicelist, mps
from webhook.gpus import toolkitspecs
from webhook.nodeagent.lifecycle import StartError
from webhook.nodeagent.settings import SettingsError

Settings = TypeVar("Settings")


def add_gpu_flags(p: argparse.ArgumentParser, fake_gpus_help: str, health_file_help: str) -> None:
    """Where the GPUs and their health come from: --fake-gpus, --inventory-file, --health-file, NVML."""
    p.add_argument("--fake-gpus", default="", metavar="SPEC", help=fake_gpus_help)
    p.add_argument("--inventory-file", type=Path, help="declare GPUs from a YAML/JSON file instead of NVML")
    p.add_argument("--health-file", type=Path, help=health_file_help)
    p.add_argument(
        "--health-recovery",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="NVML: a GPU is healthy again after this long without critical XIDs and a passing probe "
        "(default 60)",
    )


def add_api_flags(p: argparse.ArgumentParser) -> None:
    """The API server and the probe port."""
    p.add_argument("--kubeconfig", default="", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    p.add_argument(
        "--api-host", default="", help="API server URL without auth, e.g. http://127.0.0.1:8080 (local runs)"
    )
    p.add_argument(
        "--health-port", type=int, default=0, help="serve /healthz and /metrics on this port (0: off)"
    )


def add_mps_flags(p: argparse.ArgumentParser, mps_help: str, dirs_note: str = "") -> None:
    """--mps and the MPS folders on the node; `dirs_note` follows "the MPS ... directory on the node"."""
    p.add_argument("--mps", action="store_true", help=mps_help)
    p.add_argument(
        "--mps-pipe-dir",
        default=mps.DEFAULT_PIPE_DIRECTORY,
        metavar="DIR",
        help=f"the MPS pipe directory on the node{dirs_note} (default {mps.DEFAULT_PIPE_DIRECTORY})",
    )
    p.add_argument(
        "--mps-log-dir",
        default=mps.DEFAULT_LOG_DIRECTORY,
        metavar="DIR",
        help=f"the MPS log directory on the node{dirs_note} (default {mps.DEFAULT_LOG_DIRECTORY})",
    )


def add_log_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info", help="log level"
    )
    p.add_argument("--log-format", choices=("json", "text"), default="json", help="log format")


def main(
    parser: argparse.ArgumentParser,
    argv: list[str],
    *,
    settings_from_args: Callable[[argparse.Namespace, dict[str, str]], Settings],
    run: Callable[[Settings], int],
    settings_error: type[Exception] = SettingsError,
    start_error: type[Exception] = StartError,
) -> int:
    """Flags and the environment to settings (`settings_error`: exit 2), then `run` them (`start_error`:
    exit 1); each message is prefixed with the parser's prog."""
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args, dict(os.environ))
    except settings_error as err:
        print(f"{parser.prog}: {err}", file=sys.stderr)
        return exitcodes.USAGE
    try:
        return run(settings)
    except start_error as err:
        print(f"{parser.prog}: {err}", file=sys.stderr)
        return exitcodes.FAILURE


def add_delivery_flags(p: argparse.ArgumentParser) -> None:
    """How GPUs reach containers: NVIDIA_VISIBLE_DEVICES, the toolkit's CDI devices, or both."""
    g = p.add_argument_group("how GPUs reach containers (docs/cdi.md)")
    g.add_argument(
        "--device-list-strategy",
        choices=[s.value for s in devicelist.Strategy],
        default=devicelist.Strategy.AUTO.value,
        help="envvar: NVIDIA_VISIBLE_DEVICES for the NVIDIA runtime (legacy mode); cdi-cri: each GPU's CDI "
        "device from the node's NVIDIA toolkit spec; both; auto: cdi-cri when the spec names this node's "
        "GPUs, else envvar (default auto)",
    )
    g.add_argument(
        "--cdi-spec-dirs",
        default=",".join(cdidevices.DEFAULT_FOLDERS),
        metavar="DIRS",
        help="the CDI spec folders the runtime reads, comma-separated, later ones win "
        f"(default {','.join(cdidevices.DEFAULT_FOLDERS)})",
    )
    g.add_argument(
        "--cdi-kind",
        default=cdidevices.NVIDIA_KIND,
        metavar="KIND",
        help=f"the CDI kind of the toolkit's GPU devices (default {cdidevices.NVIDIA_KIND})",
    )


def delivery_settings(args: argparse.Namespace) -> toolkitspecs.DeliverySettings:
    return toolkitspecs.DeliverySettings(
        strategy=args.device_list_strategy,
        folders=tuple(Path(f.strip()) for f in args.cdi_spec_dirs.split(",") if f.strip()),
        kind=args.cdi_kind,
    )


def agent_settings(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, Any]:
    """The fields of NodeAgentSettings, from the flags both agents have and NODE_NAME."""
    return {
        "node_name": environ.get("NODE_NAME", ""),
        "memory_unit": args.memory_unit,
        "mib_per_device": args.mib_per_device,
        "fake_gpus": args.fake_gpus,
        "inventory_file": args.inventory_file,
        "health_file": args.health_file,
        "health_recovery_s": args.health_recovery,
        "kubeconfig": args.kubeconfig,
        "api_host": args.api_host,
        "health_port": args.health_port,
        "api_timeout_s": args.api_timeout,
        "force_mps": args.mps,
        "mps_pipe_dir": args.mps_pipe_dir,
        "mps_log_dir": args.mps_log_dir,
        "delivery": delivery_settings(args),
        "log_level": args.log_level,
        "log_format": args.log_format,
    }
