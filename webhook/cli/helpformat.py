"""`--help` that shows every option's default: "(default: X)" is added unless the help text names one.

Options without a value worth showing (None, False, "", empty lists) get nothing added: their help says what
happens when they are left out.
"""

from __future__ import annotations

import argparse

from webhook.cli import progname


def parser(command: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    """The parser of subcommand `command`: named as the user typed it (`progname.command`), its --help
    showing the defaults."""
    return argparse.ArgumentParser(
        prog=progname.command(command),
        description=description,
        epilog=epilog,
        formatter_class=DefaultsFormatter,
    )


class DefaultsFormatter(argparse.HelpFormatter):
    """Use as `ArgumentParser(formatter_class=DefaultsFormatter)`."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        # argparse prints no line at all for an option without help text, so there is nothing to add to.
        text = action.help
        if not text or not action.option_strings or "default" in text.lower() or not shown(action.default):
            return text
        # "30", not "30.0"
        shown_as = f"{action.default:g}" if isinstance(action.default, float) else "%(default)s"
        return f"{text} (default: {shown_as})"


def shown(default: object) -> bool:
    """True for a default worth printing: not unset, off, or empty."""
    return default is not None and default is not False and default not in ([], "", argparse.SUPPRESS)
