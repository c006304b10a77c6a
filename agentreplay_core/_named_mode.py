"""Modes chosen by name, from an option, a pytest flag or an environment variable."""

from __future__ import annotations

import enum
from typing import TypeVar

M = TypeVar("M", bound="NamedMode")


class NamedMode(str, enum.Enum):
    """An enum of modes whose `parse` takes a member or its name in any case, and names the
    valid ones when it does not know the name (a typo in an environment variable must say
    what was meant, not fall back on a default)."""

    @classmethod
    def what(cls) -> str:
        """What the modes are called in the error message."""
        return "mode"

    @classmethod
    def parse(cls: type[M], value: str | M) -> M:
        """The mode named `value`; a ValueError listing the valid names otherwise."""
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown agentreplay {cls.what()} {value!r}; valid modes: "
                             f"{valid}") from None
