"""The `agentreplay` command (typer + rich): the entry point and the list of command modules."""

from __future__ import annotations

import importlib
import sys

from agentreplay_core._cli_app import app

#: each module registers its commands on `app` when imported; `--help` lists them in this order
COMMAND_MODULES = ("_cli_runs", "_cli_diff", "_cli_replay", "_cli_transfer", "_cli_prune",
                   "_cli_admin", "_cli_demo")
for _module in COMMAND_MODULES:
    importlib.import_module(f"agentreplay_core.{_module}")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
