"""argparse types for flags that several commands share, worded by the core's own check.

argparse reports a type's ValueError as "invalid memory_unit value: 'KiB'" (the function's name, not
what is allowed); an ArgumentTypeError's message is printed as it is.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from webhook.core.wire import units

T = TypeVar("T")


def parsed(text: str, parse: Callable[[str], T], error: str = "") -> T:
    """`parse(text)`, its ValueError reported as argparse reports a bad flag: `error` (a format string
    given `text`) or, without one, the ValueError's own words."""
    try:
        return parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(error.format(text=text) if error else str(err)) from None


def memory_unit(text: str) -> str:
    """`--memory-unit`, `--unit`: GiB, MiB or <N>MiB."""
    try:
        return units.memory_unit(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
