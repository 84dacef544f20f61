"""argparse types for flags that several commands share, worded by the core's own check.

argparse reports a type's ValueError as "invalid memory_unit value: 'KiB'" (the function's name, not
what is allowed); an ArgumentTypeError's message is printed as it is.
"""

from __future__ import annotations

import argparse

from webhook.core.wire import units


def memory_unit(text: str) -> str:
    """`--memory-unit`, `--unit`: GiB, MiB or <N>MiB."""
    try:
        return units.memory_unit(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
