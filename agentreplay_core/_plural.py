"""Counts in messages: `1 step`, `2 steps`."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun` in the number it asks for (`plural` where adding s is wrong)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
