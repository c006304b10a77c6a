"""Counts in messages: `1 step`, `2 steps`."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """`count` and `noun` (whose plural takes an s) in the number it asks for."""
    return f"{count} {noun if count == 1 else noun + 's'}"
