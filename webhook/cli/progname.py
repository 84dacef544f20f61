"""What the user typed to run us, for usage lines and argparse's messages: `gpushare inspect`, or
`kubectl gpushare inspect` when kubectl ran us as its plugin.

kubectl runs a plugin with the plugin's path as argv[0] (kubectl pkg/cmd/plugin.go, `syscall.Exec`), and
the entry-point scripts keep it there, so the name the program was started under says which one it is.

    command("inspect", "/usr/local/bin/kubectl-gpushare")  -> "kubectl gpushare inspect"
    command("inspect", "/usr/local/bin/gpushare")          -> "gpushare inspect"
"""

from __future__ import annotations

import os
import sys

GPUSHARE = "gpushare"
PLUGIN = "kubectl-gpushare"  # kubectl gpushare <command> [args]
INSPECT_PLUGIN = "kubectl-inspect-gpushare"  # kubectl inspect gpushare [args]: the original's name

# The kubectl plugin scripts -> the words the user typed before the command's name.
_TYPED = {PLUGIN: "kubectl gpushare", INSPECT_PLUGIN: "kubectl gpushare"}


def program(argv0: str | None = None) -> str:
    """`gpushare`, or `kubectl gpushare` when started as a kubectl plugin (argv0: sys.argv[0])."""
    name = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    return _TYPED.get(name, GPUSHARE)


def command(name: str, argv0: str | None = None) -> str:
    """The prog of subcommand `name`: `gpushare inspect`, `kubectl gpushare inspect`, and for the
    original's plugin, whose own name holds its one command, `kubectl inspect gpushare`."""
    started_as = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    if started_as == INSPECT_PLUGIN and name == "inspect":
        return "kubectl inspect gpushare"
    return f"{program(argv0)} {name}"
