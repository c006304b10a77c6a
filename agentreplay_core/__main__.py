"""`python -m agentreplay_core` runs the `agentreplay` command."""

from agentreplay_core._cli import main

main()
