"""The `agentreplay` command (typer + rich): the entry point and the list of command modules."""

from __future__ import annotations

import errno
import importlib
import os
import sys
import types
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import typer
    from typer._click.exceptions import ClickException

#: each module registers its commands on `app` when imported; `--help` lists them in this order
COMMAND_MODULES = ("_cli_runs", "_cli_diff", "_cli_replay", "_cli_transfer", "_cli_prune",
                   "_cli_admin", "_cli_demo")


def load_app() -> typer.Typer:
    """The app with every command registered."""
    from agentreplay_core._cli_app import app

    for module in COMMAND_MODULES:
        importlib.import_module(f"agentreplay_core.{module}")
    return app


def main() -> None:
    """Console-script entry point."""
    # the imports are inside: Ctrl-C while they load is an interrupt like any other
    try:
        _run()
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        _quiet_broken_pipe()
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        _quiet_broken_pipe()


class _NeverRaised(Exception):
    exit_code = 0


def _click_modules() -> tuple[types.ModuleType, types.ModuleType]:
    """click's `exceptions` and `utils`: typer's own copy of click since typer 0.29 (its
    errors are not the `click` package's), the `click` package before."""
    try:
        return (importlib.import_module("typer._click.exceptions"),
                importlib.import_module("typer._click.utils"))
    except ImportError:
        return importlib.import_module("click.exceptions"), importlib.import_module("click.utils")


def _run() -> None:
    from typer import Abort

    exceptions, utils = _click_modules()
    ClickException = exceptions.ClickException
    # click 8.2's; before it, the help for no arguments ended in a plain exit
    NoArgsIsHelpError = getattr(exceptions, "NoArgsIsHelpError", _NeverRaised)
    PacifyFlushWrapper = utils.PacifyFlushWrapper
    app = load_app()
    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        sys.exit(exc.exit_code)  # the help is printed as the error is made
    except ClickException as exc:
        _usage_error(exc, app)
    except Abort:
        sys.exit(130)  # click's word for Ctrl-C (or end of input) at a prompt
    except SystemExit:
        # typer answers a broken pipe with exit code 1, after pacifying stdout
        if isinstance(sys.stdout, PacifyFlushWrapper):
            _quiet_broken_pipe()
        raise
    sys.exit(code if isinstance(code, int) else 0)


def _usage_error(exc: ClickException, app: typer.Typer) -> NoReturn:
    """One `error:` line (and where to read the usage), not click's usage text and box."""
    from agentreplay_core._cli_app import err
    from agentreplay_core._cli_table import visible

    err.print("error: " + visible(exc.format_message()), style="red", markup=False,
              highlight=False)
    command = " ".join(["agentreplay", *_command_names(exc, app)])
    err.print(f"try: {command} --help", style="dim", markup=False, highlight=False)
    sys.exit(exc.exit_code)


def _command_names(exc: ClickException, app: typer.Typer) -> list[str]:
    """`["db", "status"]` for an error in `agentreplay db status`, however the program was
    started (`python -m agentreplay_core` too)."""
    ctx = getattr(exc, "ctx", None)
    if ctx is None:  # an error met while parsing has none: the words on the command line say
        return _named_commands(app)
    names: list[str] = []
    while ctx.parent is not None:
        names.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    return names


def _named_commands(app: typer.Typer) -> list[str]:
    """The leading words of the command line that name a command or a command group."""
    from typer.main import get_command

    command: object = get_command(app)
    names: list[str] = []
    for word in sys.argv[1:]:
        commands = getattr(command, "commands", {})
        if word not in commands:
            break
        names.append(word)
        command = commands[word]
    return names


def _quiet_broken_pipe() -> NoReturn:
    """The reader of stdout went away (`| head`): stop without a traceback or a message, and
    without the interpreter failing again to flush stdout on its way out."""
    from agentreplay_core._cli_app import BROKEN_PIPE

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(BROKEN_PIPE)
