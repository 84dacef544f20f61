"""`gpushare`: one entry point, one subcommand per part.

Each subcommand lives in its own module with `build_parser()` and `main(argv) -> int`; it is imported
only when asked for, so `gpushare check` starts without loading the servers' frameworks. Whatever the
command, Ctrl-C ends it with exit 130 and a closed pipe with 141, neither with a traceback
(`webhook.cli.exitcodes`). Run as the kubectl plugin (`webhook.cli.kubectlplugin`), the usage says
`kubectl gpushare` (`webhook.cli.progname`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Sequence

from webhook import __version__
from webhook.cli import exitcodes, progname

# subcommand -> (module under webhook.cli, one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "webhook": ("serve.webhook", "serve the admission webhook (HTTPS): /mutate, /validate"),
    "extender": ("serve.extender", "serve the kube-scheduler extender: filter, prioritize, bind, inspect"),
    "device-plugin": ("serve.device_plugin", "serve the kubelet device plugin for aliyun.com/gpu-mem"),
    "dra-driver": ("serve.dra_driver", "serve the kubelet DRA driver: GPU-memory shares as ResourceClaims"),
    "certs": ("certs", "write a development CA and serving certificate"),
    "ensure-certs": ("ensure_certs", "in-cluster: keep the webhook's certificate Secret and caBundle paired"),
    "check": ("check", "check manifests offline with the webhook's rules"),
    "inspect": ("inspect.command", "show GPU memory per node and GPU"),
    "demo": ("demo", "a local GPU cluster with all three parts, a refused pod and the inspect table"),
}


def version() -> str:
    """`gpushare X.Y.Z`: what `--version` prints, whatever name the program was started under."""
    return f"gpushare {__version__}"


def usage() -> str:
    prog = progname.program()
    lines = [version(), "", f"usage: {prog} <command> [options]", "", "commands:"]
    lines += [f"  {name:<14} {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", f"Run '{prog} <command> --help' for the options of a command."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:  # no command is a usage error, as for git and kubectl: scripts must not read it as success
        print(usage(), file=sys.stderr)
        return exitcodes.USAGE
    if args[0] in ("-h", "--help", "help"):
        print(usage())
        return exitcodes.OK
    if args[0] in ("--version", "version"):
        print(version())
        return exitcodes.OK
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"{progname.program()}: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return exitcodes.USAGE
    try:
        module = importlib.import_module(f"webhook.cli.{command[0]}")
        result: int = module.main(args[1:])
    except KeyboardInterrupt:
        # On a terminal the shell has echoed "^C": start the message on a line of its own.
        print(f"{_newline_on_terminal()}{progname.command(args[0])}: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        _drop_stdout()
        return exitcodes.BROKEN_PIPE
    return result


def _newline_on_terminal() -> str:
    with contextlib.suppress(AttributeError, ValueError):
        if sys.stderr.isatty():
            return "\n"
    return ""


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail on the closed pipe again."""
    # OSError/ValueError: stdout replaced by something without a descriptor (tests, embedding).
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
