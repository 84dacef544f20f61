"""`gpushare`: one entry point, one subcommand per part.

Each subcommand lives in its own module with `build_parser()` and `main(argv) -> int`; it is imported
only when asked for, so `gpushare check` starts without loading the servers' frameworks.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from webhook import __version__

# subcommand -> (module under webhook.cli, one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "webhook": ("serve_webhook", "serve the admission webhook (HTTPS): /mutate, /validate"),
    "extender": ("serve_extender", "serve the kube-scheduler extender: filter, prioritize, bind, inspect"),
    "device-plugin": ("serve_device_plugin", "serve the kubelet device plugin for aliyun.com/gpu-mem"),
    "certs": ("certs", "write a development CA and serving certificate"),
    "ensure-certs": ("ensure_certs", "in-cluster: keep the webhook's certificate Secret and caBundle paired"),
    "check": ("check", "check manifests offline with the webhook's rules"),
    "inspect": ("inspect", "show GPU memory per node and GPU"),
}


def usage() -> str:
    lines = [f"gpushare {__version__}", "", "usage: gpushare <command> [options]", "", "commands:"]
    lines += [f"  {name:<14} {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "Run 'gpushare <command> --help' for the options of a command."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] in ("--version", "version"):
        print(__version__)
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"gpushare: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"webhook.cli.{command[0]}")
    result: int = module.main(args[1:])
    return result


if __name__ == "__main__":
    sys.exit(main())
