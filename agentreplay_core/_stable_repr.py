"""The repr of a value that cannot be stored, kept in its place: without the memory
addresses default reprs carry (`<function add at 0x7f...>`), which differ on every run and
would make two recordings of the same call look different to `agentreplay diff`."""

from __future__ import annotations

import re

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_repr(value: object) -> str:
    """`repr(value)` with every ` at 0x...` address left out."""
    return _ADDRESS.sub("", repr(value))
