"""The `agentreplay` command (typer + rich): the entry point and the list of command modules."""

from __future__ import annotations

import sys

# Each module registers its commands on `app` when imported.
from agentreplay_core import _cli_admin  # noqa: F401
from agentreplay_core._cli_app import app


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
